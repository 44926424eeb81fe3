package http

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/ratelimit"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// rateMetrics count refused calls by the limit's configured name (a
// Caller resource, or an Issuer and its mapping rule: never a token's
// subject), so the number of series is bounded by the configuration.
// Calls refused because the shared limiter did not answer are counted
// apart: their callers were not over any limit; and so are calls the
// per-instance fallback decided, each replica on its own.
type rateMetrics struct {
	limited     *prometheus.CounterVec
	unavailable *prometheus.CounterVec
	fallback    *prometheus.CounterVec
}

func newRateMetrics(reg prometheus.Registerer) *rateMetrics {
	m := &rateMetrics{
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_rate_limited_total",
			Help: "Calls refused by a rate limit, by caller (the configured name of the limit: a Caller, or Issuer/name/rule) and bucket (caller or tool).",
		}, []string{"caller", "bucket"}),
		unavailable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_rate_limiter_unavailable_total",
			Help: "Calls refused because the shared rate limiter (Redis) did not answer and TOOLSVC_RATE_LIMIT_FAILURE is closed, by caller (the configured name of the limit).",
		}, []string{"caller"}),
		fallback: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_rate_limiter_fallback_total",
			Help: "Requests (a call, a batch, a plan's steps) whose rate limits this instance's own buckets decided because the shared rate limiter (Redis) did not answer and TOOLSVC_RATE_LIMIT_FAILURE is open, by caller (the configured name of the limit).",
		}, []string{"caller"}),
	}
	reg.MustRegister(m.limited, m.unavailable, m.fallback)
	return m
}

// rateLimited is a refusal by a rate limit.
type rateLimited struct {
	d      ratelimit.Decision
	policy string // the RateLimit-Policy header
}

func (e *rateLimited) Error() string { return "rate limited" }

// retryAfter is the whole seconds of Retry-After (at least 1).
func (e *rateLimited) retryAfter() int {
	return int(wholeSeconds(e.d.RetryAfter.Seconds()))
}

// limiterDown is a refusal by a shared limiter that did not answer and
// fails closed: no limit was found exceeded, so it is answered as an
// outage (503), with no RateLimit headers, not as a rate limit.
type limiterDown struct {
	retryAfter int // seconds
	err        error
}

func (e *limiterDown) Error() string { return "rate limiter unavailable: " + e.err.Error() }

func (e *limiterDown) Unwrap() error { return e.err }

func (e *limiterDown) problem() *Problem {
	p := problem(kindUnavailable, "the shared rate limiter is not answering and the service fails closed, so nothing ran; retry shortly").because(e.err)
	p.RetryAfter = e.retryAfter
	return p
}

// wholeSeconds rounds s up to whole seconds, at least 1 and at most what
// a duration holds: a tiny rate's window would overflow an int.
func wholeSeconds(s float64) int64 {
	const most = math.MaxInt64 / int64(time.Second)
	if !(s < float64(most)) {
		return most + 1
	}
	return max(1, int64(math.Ceil(s)))
}

func (e *rateLimited) problem() *Problem {
	p := problem(kindRateLimited, fmt.Sprintf("this caller is over its rate limit; retry in %d s (see the RateLimit and Retry-After headers)", e.retryAfter()))
	p.RetryAfter = e.retryAfter()
	return p
}

// overBurst is a refusal of calls that no wait would let through: more of
// them count against a bucket than its burst holds.
type overBurst struct {
	n, held, burst int
	kind           string
}

func (e *overBurst) Error() string { return "more calls than the rate limit's burst" }

func (e *overBurst) problem() *Problem {
	return problem(kindInvalidBatch, fmt.Sprintf(
		"this batch holds %d calls that count against the %s rate limit, whose burst is %d; no batch of more than %d such calls can run, so send them in smaller batches",
		e.n, e.kind, e.burst, e.burst))
}

// limitCalls takes one token per call of tools from the caller's buckets:
// the caller's own and, for tools with a rule of their own, the tool's. It
// returns the headers to send (IETF RateLimit and RateLimit-Policy) and a
// *rateLimited when the calls may not run, an *overBurst when they never
// can, a *limiterDown when a shared limiter that fails closed did not
// answer. held names calls of the same request that have taken their tokens
// already (a plan, for its steps): they count against the burst.
func (s *Server) limitCalls(ctx context.Context, caller *registry.Caller, tools []string, held ...string) (http.Header, error) {
	lim := caller.RateLimit
	if s.deps.RateLimiter == nil || lim == nil || len(tools) == 0 {
		return nil, nil
	}
	type take struct {
		bucket ratelimit.Bucket
		n      int
		held   int
		name   string // the policy's name in the headers
		kind   string
	}
	takes := []take{{bucket: ratelimit.Bucket{Key: "c:" + caller.ID, PerSecond: lim.PerSecond, Burst: lim.Burst}, n: len(tools), held: len(held), name: "caller", kind: "caller"}}
	for i, tl := range lim.Tools {
		matching := func(names []string) (n int) {
			for _, t := range names {
				if registry.MatchAny(tl.Tools, t) {
					n++
				}
			}
			return n
		}
		if n := matching(tools); n > 0 {
			takes = append(takes, take{bucket: ratelimit.Bucket{Key: "t:" + strconv.Itoa(i) + ":" + caller.ID, PerSecond: tl.PerSecond, Burst: tl.Burst},
				n: n, held: matching(held), name: "tool" + strconv.Itoa(i), kind: "tool"})
		}
	}
	for _, t := range takes {
		if t.n+t.held > t.bucket.Burst {
			// No wait would let it through: say so, not "retry in N s".
			return nil, &overBurst{n: t.n, held: t.held, burst: t.bucket.Burst, kind: t.kind}
		}
	}
	fellBack := false
	decided := func(d ratelimit.Decision) {
		fellBack = fellBack || d.Fallback
		s.limiterChanged(ctx, d.Change)
	}
	defer func() {
		if fellBack && s.rate != nil {
			s.rate.fallback.WithLabelValues(lim.Name).Inc()
		}
	}()
	h := http.Header{}
	// The caller's bucket is taken last: calls a tool's bucket refuses do
	// not run, so they must not use up what the caller may call otherwise.
	// Before the tools' buckets are taken, the caller's is looked at, so
	// that calls it would refuse do not use up the tools' either. (Only a
	// call racing another of the same caller between the look and the take
	// can still take from a tool's bucket and then be refused.)
	if len(takes) > 1 {
		t := takes[0]
		d, err := s.deps.RateLimiter.Peek(ctx, t.bucket, t.n)
		decided(d)
		if err == nil && !d.Allowed {
			return h, s.refuse(ctx, h, lim, t.bucket, t.name, t.kind, d)
		}
	}
	slices.Reverse(takes)
	for _, t := range takes {
		d, err := s.deps.RateLimiter.Allow(ctx, t.bucket, t.n)
		decided(d)
		switch {
		case errors.Is(err, ratelimit.ErrUnavailable):
			return h, s.limiterDown(ctx, lim, d, err)
		case err != nil:
			addRateHeaders(h, t.bucket, t.name, d)
			return h, err
		case !d.Allowed:
			return h, s.refuse(ctx, h, lim, t.bucket, t.name, t.kind, d)
		}
		addRateHeaders(h, t.bucket, t.name, d)
	}
	return h, nil
}

// addRateHeaders adds a bucket's RateLimit-Policy and RateLimit headers
// to h, and returns the policy.
func addRateHeaders(h http.Header, b ratelimit.Bucket, name string, d ratelimit.Decision) string {
	policy := fmt.Sprintf("%q;q=%d;w=%d", name, b.Burst, wholeSeconds(float64(b.Burst)/b.PerSecond))
	h.Add("RateLimit-Policy", policy)
	h.Add("RateLimit", fmt.Sprintf("%q;r=%d;t=%d", name, d.Remaining, int64(math.Ceil(d.ResetAfter.Seconds()))))
	return policy
}

// refuse records that a bucket refused calls and returns the refusal,
// its headers added to h.
func (s *Server) refuse(ctx context.Context, h http.Header, lim *registry.RateLimit, b ratelimit.Bucket, name, kind string, d ratelimit.Decision) *rateLimited {
	policy := addRateHeaders(h, b, name, d)
	if s.rate != nil {
		s.rate.limited.WithLabelValues(lim.Name, kind).Inc()
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("toolsvc.rate_limit", lim.Name+"/"+kind))
	if d.RetryAfter <= 0 {
		d.RetryAfter = time.Second
	}
	return &rateLimited{d: d, policy: policy}
}

// limiterDown records that calls were refused because the shared limiter
// did not answer (err), and returns the refusal. It adds no RateLimit
// headers: the limiter said nothing about what remains.
func (s *Server) limiterDown(ctx context.Context, lim *registry.RateLimit, d ratelimit.Decision, err error) *limiterDown {
	if s.rate != nil {
		s.rate.unavailable.WithLabelValues(lim.Name).Inc()
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Bool("toolsvc.rate_limit.unavailable", true))
	return &limiterDown{retryAfter: int(wholeSeconds(d.RetryAfter.Seconds())), err: err}
}

// limiterChanged logs a change of whether the shared limiter answers,
// once per change rather than with every call: failing open, an outage
// is otherwise silent, while every replica admits a caller's whole limit.
func (s *Server) limiterChanged(ctx context.Context, c *ratelimit.Change) {
	switch {
	case c == nil:
	case c.Down && c.FailOpen:
		s.deps.Logger.WarnContext(ctx, "the shared rate limiter (Redis) is not answering: each instance limits calls on its own until it does, so N replicas admit up to N times a limit (TOOLSVC_RATE_LIMIT_FAILURE=open)", "error", c.Err)
	case c.Down:
		s.deps.Logger.WarnContext(ctx, "the shared rate limiter (Redis) is not answering: calls are refused until it does (TOOLSVC_RATE_LIMIT_FAILURE=closed)", "error", c.Err)
	default:
		s.deps.Logger.InfoContext(ctx, "the shared rate limiter (Redis) answers again: limits are shared again", "downFor", c.DownFor.Round(time.Millisecond).String())
	}
}

// limitHTTP applies limitCalls to an HTTP request: the headers are set,
// and a refusal is returned as a problem (429, or 503 failing closed).
func (s *Server) limitHTTP(w http.ResponseWriter, r *http.Request, tools ...string) error {
	h, err := s.limitCalls(r.Context(), CallerFrom(r.Context()), tools)
	for k, vs := range h {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	var rl *rateLimited
	var ob *overBurst
	var down *limiterDown
	switch {
	case errors.As(err, &rl):
		return rl.problem()
	case errors.As(err, &ob):
		return ob.problem()
	case errors.As(err, &down):
		return down.problem()
	}
	return err
}

// LimitSteps takes one token per call of tools from the caller's rate
// limits, for the calls a call of the tool held makes through the
// executor (plan__execute's steps), as a batch takes one per call; held
// has taken its own token when its request came in. A refusal is a
// *registry.Error that tells the model when to try again, or that the
// steps are more than the limit lets through at once.
func (s *Server) LimitSteps(ctx context.Context, caller *registry.Caller, held string, tools []string) error {
	_, err := s.limitCalls(ctx, caller, tools, held)
	var rl *rateLimited
	var ob *overBurst
	var down *limiterDown
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ob):
		most := ob.burst - ob.held
		took := ""
		if ob.held > 0 {
			took = fmt.Sprintf(", and this call took %d of it", ob.held)
		}
		return &registry.Error{Code: registry.CodeInvalidArguments,
			Message: fmt.Sprintf("no step ran: %d steps count against the %s rate limit, whose burst is %d%s; at most %d such steps can run in one call",
				ob.n, ob.kind, ob.burst, took, most),
			Suggestion: fmt.Sprintf("Split the steps into calls of at most %d steps each.", max(most, 0))}
	case errors.As(err, &down):
		return &registry.Error{Code: registry.CodeTool,
			Message:    "no step ran: the shared rate limiter is not answering, and the service fails closed",
			Suggestion: fmt.Sprintf("Retry in %d s.", down.retryAfter)}
	case errors.As(err, &rl):
		return &registry.Error{Code: registry.CodeTool,
			Message:    fmt.Sprintf("no step ran: the steps are over this caller's rate limit; retry in %d s", rl.retryAfter()),
			Suggestion: fmt.Sprintf("Retry in %d s, or with fewer steps.", rl.retryAfter())}
	}
	s.deps.Logger.Error("rate limiter: a plan's steps", "error", err)
	return &registry.Error{Code: registry.CodeInternal, Message: "internal error"}
}
