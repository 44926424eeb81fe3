// Package ratelimit keeps per-caller token buckets: in the process
// (golang.org/x/time/rate) or, shared by every replica, in Redis (GCRA
// through github.com/go-redis/redis_rate). When Redis does not answer, the
// shared limiter fails open (to a per-instance bucket) or closed (refusing
// calls), as configured.
package ratelimit

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// Bucket names a token bucket and its size: Burst calls at once, refilled
// at PerSecond.
type Bucket struct {
	Key       string
	PerSecond float64
	Burst     int
}

// Decision is the outcome of taking from a bucket.
type Decision struct {
	Allowed bool
	// Limit is the bucket's size; Remaining what is left in it.
	Limit     int
	Remaining int
	// RetryAfter is when a refused request may succeed.
	RetryAfter time.Duration
	// ResetAfter is when the bucket is full again.
	ResetAfter time.Duration
	// Fallback says that the shared limiter did not answer, so (failing
	// open) the per-instance bucket decided: with N replicas, callers
	// get up to N times their limit.
	Fallback bool
	// Change is set on the one decision that first found the shared
	// limiter not answering, or answering again after it had not: so that
	// each change is logged once, not with every call.
	Change *Change
}

// Change is a change of whether the shared limiter answers.
type Change struct {
	// Down: it stopped answering, for Err; FailOpen says whether calls
	// are now limited per instance (true) or refused. Otherwise it
	// answers again, after not answering for DownFor.
	Down     bool
	Err      error
	FailOpen bool
	DownFor  time.Duration
}

// Limiter takes n tokens from a bucket.
type Limiter interface {
	Allow(ctx context.Context, b Bucket, n int) (Decision, error)
	// Peek says whether Allow would let n tokens through now, taking
	// none.
	Peek(ctx context.Context, b Bucket, n int) (Decision, error)
	// Status says how the limiter is (for /readyz) and whether calls are
	// served; it never blocks longer than ctx.
	Status(ctx context.Context) (detail string, ok bool)
}

// Local is an in-process limiter. It keeps at most MaxKeys buckets and
// forgets the least recently used beyond that (a forgotten bucket is
// full, which errs on the caller's side only for callers idle longest).
type Local struct {
	mu      sync.Mutex
	max     int
	order   *list.List // of *entry, most recent first
	buckets map[string]*list.Element
	now     func() time.Time
}

type entry struct {
	key string
	lim *rate.Limiter
}

// DefaultMaxKeys bounds a local limiter's memory.
const DefaultMaxKeys = 100000

// NewLocal returns an in-process limiter of at most maxKeys buckets (0:
// DefaultMaxKeys); now nil is time.Now.
func NewLocal(maxKeys int, now func() time.Time) *Local {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if now == nil {
		now = time.Now
	}
	return &Local{max: maxKeys, order: list.New(), buckets: map[string]*list.Element{}, now: now}
}

// Allow implements Limiter.
func (l *Local) Allow(_ context.Context, b Bucket, n int) (Decision, error) {
	if err := b.check(n); err != nil {
		return Decision{}, err
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var lim *rate.Limiter
	if el, ok := l.buckets[b.Key]; ok {
		l.order.MoveToFront(el)
		lim = el.Value.(*entry).lim
		if lim.Limit() != rate.Limit(b.PerSecond) || lim.Burst() != b.Burst {
			lim.SetLimitAt(now, rate.Limit(b.PerSecond))
			lim.SetBurstAt(now, b.Burst)
		}
	} else {
		lim = rate.NewLimiter(rate.Limit(b.PerSecond), b.Burst)
		l.buckets[b.Key] = l.order.PushFront(&entry{key: b.Key, lim: lim})
		for l.order.Len() > l.max {
			last := l.order.Back()
			l.order.Remove(last)
			delete(l.buckets, last.Value.(*entry).key)
		}
	}
	d := Decision{Limit: b.Burst}
	if n > b.Burst {
		// Can never succeed; say when the bucket is full, not "soon".
		d.RetryAfter = seconds(float64(b.Burst) / b.PerSecond)
	} else {
		r := lim.ReserveN(now, n)
		if delay := r.DelayFrom(now); delay > 0 {
			r.CancelAt(now)
			d.RetryAfter = delay
		} else {
			d.Allowed = true
		}
	}
	tokens := lim.TokensAt(now)
	d.Remaining = max(0, int(math.Floor(tokens)))
	d.ResetAfter = seconds((float64(b.Burst) - tokens) / b.PerSecond)
	return d, nil
}

// Peek implements Limiter. A bucket not kept is full.
func (l *Local) Peek(_ context.Context, b Bucket, n int) (Decision, error) {
	if err := b.check(n); err != nil {
		return Decision{}, err
	}
	now := l.now()
	tokens := float64(b.Burst)
	l.mu.Lock()
	if el, ok := l.buckets[b.Key]; ok {
		if lim := el.Value.(*entry).lim; lim.Limit() == rate.Limit(b.PerSecond) && lim.Burst() == b.Burst {
			tokens = lim.TokensAt(now)
		}
	}
	l.mu.Unlock()
	d := Decision{Limit: b.Burst, Remaining: max(0, int(math.Floor(tokens))), ResetAfter: seconds((float64(b.Burst) - tokens) / b.PerSecond)}
	switch {
	case n > b.Burst:
		d.RetryAfter = seconds(float64(b.Burst) / b.PerSecond)
	case tokens < float64(n):
		d.RetryAfter = seconds((float64(n) - tokens) / b.PerSecond)
	default:
		d.Allowed = true
	}
	return d, nil
}

// Status implements Limiter.
func (l *Local) Status(context.Context) (string, bool) { return "local", true }

func (b Bucket) check(n int) error {
	if b.Key == "" || !(b.PerSecond > 0) || b.Burst <= 0 || n <= 0 { // !(> 0) refuses NaN too
		return fmt.Errorf("ratelimit: bad bucket %q (%v/s, burst %d) or count %d", b.Key, b.PerSecond, b.Burst, n)
	}
	return nil
}

// seconds converts s to a duration, at most the longest one: a tiny rate
// refills in more seconds than a Duration holds, and the conversion would
// overflow into a negative reset time.
func seconds(s float64) time.Duration {
	switch {
	case s <= 0:
		return 0
	case s >= float64(math.MaxInt64)/float64(time.Second):
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

// RedisOptions configure a shared limiter.
type RedisOptions struct {
	// URL is a redis:// or rediss:// URL (go-redis ParseURL syntax).
	URL string
	// Prefix is put before every key, so services (and tests) sharing a
	// Redis keep apart.
	Prefix string
	// FailOpen: when Redis does not answer, limit per instance (true) or
	// refuse calls (false).
	FailOpen bool
	// Timeout bounds one Redis round trip; 0 is 250ms.
	Timeout time.Duration
	// Local is the per-instance fallback of fail-open; nil makes one.
	Local *Local
}

// Redis is a limiter shared through Redis.
type Redis struct {
	rdb     *redis.Client
	lim     *redis_rate.Limiter
	o       RedisOptions
	timeout time.Duration
	// downUntil (unix nanoseconds) skips Redis for a moment after a
	// failure, so an outage does not add a timeout to every call.
	downUntil atomic.Int64
	// downSince (unix nanoseconds) is when Redis stopped answering; 0
	// while it answers.
	downSince atomic.Int64
}

// ErrUnavailable is returned (when failing closed) while Redis does not
// answer.
var ErrUnavailable = errors.New("the shared rate limiter (Redis) is not answering")

// NewRedis connects to Redis lazily; it fails only on a malformed URL.
func NewRedis(o RedisOptions) (*Redis, error) {
	opts, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("TOOLSVC_RATE_LIMIT_REDIS_URL: %w", err)
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 250 * time.Millisecond
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = timeout, timeout, timeout
	opts.MaxRetries = -1 // a retry would only double the wait of a call
	opts.PoolTimeout = timeout
	if o.Local == nil {
		o.Local = NewLocal(0, nil)
	}
	rdb := redis.NewClient(opts)
	return &Redis{rdb: rdb, lim: redis_rate.NewLimiter(rdb), o: o, timeout: timeout}, nil
}

// Close closes the connections.
func (r *Redis) Close() error { return r.rdb.Close() }

// downFor is how long Redis is skipped after a failure.
const downFor = time.Second

// Allow implements Limiter.
func (r *Redis) Allow(ctx context.Context, b Bucket, n int) (Decision, error) {
	return r.take(ctx, b, n, n)
}

// Peek implements Limiter: it takes no tokens (a cost of 0 in GCRA) and
// compares what remains with n.
func (r *Redis) Peek(ctx context.Context, b Bucket, n int) (Decision, error) {
	return r.take(ctx, b, n, 0)
}

// take takes cost tokens (n or, to peek, 0) and says whether n could be
// taken.
func (r *Redis) take(ctx context.Context, b Bucket, n, cost int) (Decision, error) {
	if err := b.check(n); err != nil {
		return Decision{}, err
	}
	var change *Change
	if time.Now().UnixNano() >= r.downUntil.Load() {
		rctx, cancel := context.WithTimeout(ctx, r.timeout)
		defer cancel()
		// GCRA: one token every 1/PerSecond seconds, Burst at once.
		lim := redis_rate.Limit{Rate: 1, Burst: b.Burst, Period: seconds(1 / b.PerSecond)}
		res, err := r.lim.AllowN(rctx, r.o.Prefix+b.Key, lim, cost)
		if err == nil {
			d := Decision{Limit: b.Burst, Remaining: max(0, res.Remaining), ResetAfter: max(0, res.ResetAfter)}
			if r.downSince.Load() != 0 { // read first: a write on every call would be contended
				if since := r.downSince.Swap(0); since != 0 {
					d.Change = &Change{DownFor: time.Duration(time.Now().UnixNano() - since)}
				}
			}
			if cost > 0 {
				d.Allowed = res.Allowed >= n
			} else {
				d.Allowed = n <= b.Burst && res.Remaining >= n
			}
			if !d.Allowed {
				d.RetryAfter = res.RetryAfter
				if cost == 0 && n <= b.Burst {
					d.RetryAfter = seconds(float64(n-res.Remaining) / b.PerSecond)
				}
				if d.RetryAfter < 0 {
					d.RetryAfter = seconds(float64(b.Burst) / b.PerSecond)
				}
			}
			return d, nil
		}
		if ctx.Err() != nil {
			return Decision{}, ctx.Err() // the caller went away
		}
		now := time.Now()
		r.downUntil.Store(now.Add(downFor).UnixNano())
		if r.downSince.CompareAndSwap(0, now.UnixNano()) {
			change = &Change{Down: true, Err: err, FailOpen: r.o.FailOpen}
		}
	}
	if r.o.FailOpen {
		var d Decision
		var err error
		if cost == 0 {
			d, err = r.o.Local.Peek(ctx, b, n)
		} else {
			d, err = r.o.Local.Allow(ctx, b, n)
		}
		d.Fallback, d.Change = err == nil, change
		return d, err
	}
	return Decision{Limit: b.Burst, RetryAfter: downFor, Change: change}, ErrUnavailable
}

// Status implements Limiter: Redis is pinged; failing open, an outage is
// reported but the instance stays ready.
func (r *Redis) Status(ctx context.Context) (string, bool) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	err := r.rdb.Ping(ctx).Err()
	if err == nil {
		return "redis ok", true
	}
	if r.o.FailOpen {
		return "redis unreachable (" + err.Error() + "); failing open: limits hold per instance", true
	}
	return "redis unreachable (" + err.Error() + "); failing closed: calls are refused", false
}
