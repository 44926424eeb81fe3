package http

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type ctxKey int

const (
	callerKey ctxKey = iota
)

// requestIDFrom returns the request's id; the executor's audit line of a
// call reads it from the same context value.
func requestIDFrom(ctx context.Context) string { return registry.RequestIDFrom(ctx) }

// CallerFrom returns the authenticated caller of a request.
func CallerFrom(ctx context.Context) *registry.Caller {
	c, _ := ctx.Value(callerKey).(*registry.Caller)
	return c
}

// requestID takes a sane X-Request-Id from the client or makes one, and
// echoes it.
func (s *Server) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !saneID(id) {
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(registry.WithRequestID(r.Context(), id)))
	})
}

// loopbackHost refuses a request that reached a loopback address under
// another host's name while the service takes callers without
// credentials. A web page whose name an attacker re-pointed at 127.0.0.1
// (DNS rebinding) would otherwise reach such a service, whose anonymous
// caller may run and approve every tool, as a same-origin page that needs
// no CORS preflight. It is the rule the MCP SDK applies at /mcp, applied
// to every route. With credentials a rebound page has none to send, and a
// proxy on the same host (a sidecar) may pass the name it was reached by.
func (s *Server) loopbackHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.identity() == nil && !isLoopback(r.Host) {
			if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil && isLoopback(local.String()) {
				s.writeProblem(w, r, problem(kindForeignHost, fmt.Sprintf(
					"this server takes requests without credentials on a loopback address, so it answers only requests for localhost, 127.0.0.1 or [::1], not for %q", r.Host[:min(len(r.Host), 256)])))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopback reports whether hostport (a Host header or an address, with
// or without a port) names a loopback host.
func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func saneID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_.:", c)) {
			return false
		}
	}
	return true
}

// accessLog writes one line per request, labelled by route pattern. A
// call the executor answered (POST /calls or /calls/batch with a 2xx) has
// its audit line ("tool call", with the request id), so its access line is
// at debug level: one line per call, not two. A call refused before the
// executor (a bad body, a rate limit, overload) keeps its access line.
func (s *Server) accessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		// The telemetry middleware's wrapper already counts status and
		// bytes; wrap again only without it.
		ww, ok := w.(middleware.WrapResponseWriter)
		if !ok {
			ww = middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		}
		next.ServeHTTP(ww, r)
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = UnmatchedRoute // as the metrics and the span name it
		}
		level := slog.LevelInfo
		switch {
		case r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == "/metrics":
			level = slog.LevelDebug
		case r.Method == http.MethodPost && (route == "/calls" || route == "/calls/batch") && ww.Status() < 300:
			level = slog.LevelDebug
		}
		if !s.deps.Logger.Enabled(r.Context(), level) {
			return
		}
		// The method is the client's, read before authentication: a
		// method that is not a standard one is logged as the metrics count
		// it, _OTHER, with its first KiB beside it (a request line may
		// carry a method of a megabyte).
		method := methodLabel(r.Method)
		attrs := []slog.Attr{slog.String("method", method), slog.String("route", route), slog.Int("status", ww.Status()),
			slog.Int("bytes", ww.BytesWritten()), slog.Duration("duration", time.Since(start)),
			slog.String("requestId", requestIDFrom(r.Context())), slog.String("remote", r.RemoteAddr)}
		if method != r.Method {
			attrs = append(attrs, slog.String("methodOriginal", clip(r.Method)))
		}
		s.deps.Logger.LogAttrs(r.Context(), level, "http request", attrs...)
	})
}

// recoverer turns a handler panic into a 500 problem and a logged stack.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.writeProblem(w, r, problem(kindInternal, "internal error").because(fmt.Errorf("panic: %v\n%s", p, debug.Stack())))
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// authenticate resolves the request's credentials to a caller (see
// ResolveCaller); without configured credentials every request is the
// anonymous caller.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, err := s.ResolveCaller(r)
		if err != nil {
			s.writeAuthError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey, caller)))
	})
}

func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// require refuses callers without scope.
func (s *Server) require(scope registry.Scope) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !CallerFrom(r.Context()).Has(scope) {
				s.writeProblem(w, r, problem(kindForbidden, fmt.Sprintf("this caller lacks the %q scope", scope)))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// admitCall refuses new calls while draining and counts the ones running,
// so shutdown can wait for them.
//
// It reads the request's body first (within MaxRequestBytes; the handler
// takes what it read through readBody): a request whose body is still
// arriving is not a call yet. Counted from its first byte, one client
// trickling a body a byte a second held every shutdown for the whole
// TOOLSVC_SHUTDOWN_TIMEOUT, which then reported calls still running and
// failed. Drain cuts the bodies still being read, and those requests are
// refused like any other that comes while draining.
//
// The bytes of the bodies read are held against the service-wide budget
// MaxRequestBytesInFlight until the request's handling ends: a body that
// does not fit is not read, and its request is answered as overloaded. A
// body that sends nothing for bodyIdleTimeout is cut off (400, its read
// failed) and gives its share back.
func (s *Server) admitCall(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.draining.Load() && r.Body != nil && r.Body != http.NoBody {
			body, held := s.readAhead(w, r)
			defer s.bodies.release(held)
			if body.err == errOverBudget {
				s.bodies.refuse()
				s.writeProblem(w, r, s.overBudget())
				return
			}
			r.Body = body
		}
		// Count first, then check: a call that sees "not draining" is
		// already counted when shutdown starts waiting.
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		if s.draining.Load() {
			s.writeProblem(w, r, problem(kindDraining, "the service is shutting down; retry on another instance"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// overBudget is the answer to a request whose body would take the bytes
// in flight past MaxRequestBytesInFlight: the executor's answer to a call
// over its concurrency limit (429, overloaded, Retry-After), since it is
// the same condition, too much at once, that passes as soon as other
// requests end; 503 says the service or its store is unavailable.
func (s *Server) overBudget() *Problem {
	return problem(kindOverloaded, fmt.Sprintf("the service holds as many request bodies as it may at once (%d bytes, TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT); this request was refused before its body was read whole, and nothing ran; retry shortly",
		s.deps.Limits.MaxRequestBytesInFlight))
}

// readAhead reads r's body while Drain may cut it off, and returns it as
// a body readBody takes at once, with the bytes of the budget of request
// bytes in flight it holds for it, which the caller gives back when the
// request's handling ends. A body that does not fit in the budget ends
// with errOverBudget.
func (s *Server) readAhead(w http.ResponseWriter, r *http.Request) (*readBodyAhead, int64) {
	limit := s.deps.Limits.MaxRequestBytes
	if r.ContentLength > limit {
		// Refused by readBody (413) before a byte is read.
		body, err := readBody(w, r, limit)
		return &readBodyAhead{limit: limit, body: body, err: err}, 0
	}
	rc := http.NewResponseController(w)
	s.uploadsMu.Lock()
	if s.draining.Load() {
		s.uploadsMu.Unlock()
		return &readBodyAhead{limit: limit, err: errDraining}, 0
	}
	s.uploads[rc] = struct{}{}
	s.uploadsMu.Unlock()
	pr := &progressReader{s: s, rc: rc, r: http.MaxBytesReader(w, r.Body, limit), idle: s.bodies.idleTimeout(), deadlines: true}
	if hs, ok := r.Context().Value(http.ServerContextKey).(*http.Server); ok && hs.ReadTimeout > 0 {
		// From the handler's start rather than the request's first
		// byte, which the handler does not see: a little later.
		pr.whole = time.Now().Add(hs.ReadTimeout)
	}
	body, held, err := s.bodies.read(pr, r.ContentLength, limit)
	runtime.Gosched() // as readBody does
	// The deadline is left as it is: once a body is read to its end,
	// net/http clears it for its own read of the connection (to notice the
	// client leaving, which cancels the request's context, as a deadline
	// met there would); a body cut off keeps its past one, and one refused
	// mid-way its idle one, for net/http to drop or drain it.
	s.uploadsMu.Lock()
	delete(s.uploads, rc)
	s.uploadsMu.Unlock()
	var stalled *bodyStalledError
	if errors.As(err, &stalled) {
		s.bodies.stall()
	}
	// The original body is left to net/http, which drains or drops what
	// is left of it after the handler.
	return &readBodyAhead{limit: limit, body: body, err: err}, held
}

// errOverBudget is the body error of a request whose body did not fit in
// the budget of request bytes in flight.
var errOverBudget = errors.New("the budget of request bytes in flight is spent")

// bodyIdleTimeout is how long a request body that admitCall reads may
// send nothing, from its headers or from its last bytes, before its read
// is cut off: the request is answered 400 (unreadable body), its
// connection closed, and its share of the budget of request bytes in
// flight given back. The server's ReadTimeout (60 s for the whole
// request) still bounds a body that keeps trickling. Without it, 32
// connections that each sent a quarter of a body of 1 MiB and stopped held
// the whole default budget until that ReadTimeout: every call of every
// caller was refused for a minute, for 8 MB sent.
const bodyIdleTimeout = 10 * time.Second

// progressReader reads a request body while renewing, before every
// read, the connection's read deadline to idle from now (never past
// whole, the server's deadline for the whole request), so that a body
// that stops arriving fails its read with a bodyStalledError. Where the
// ResponseWriter has no read deadline (an httptest.ResponseRecorder), it
// only reads. The renewals take s.uploadsMu and stop once the server
// drains, so that they cannot undo the deadline cutUploads sets.
type progressReader struct {
	s         *Server
	rc        *http.ResponseController
	r         io.Reader
	idle      time.Duration
	whole     time.Time // zero: no deadline for the whole request
	deadlines bool      // false once rc says it has no read deadline
	byIdle    bool      // the deadline set last was the idle one
}

func (p *progressReader) Read(b []byte) (int, error) {
	if p.deadlines {
		d, byIdle := time.Now().Add(p.idle), true
		if !p.whole.IsZero() && p.whole.Before(d) {
			d, byIdle = p.whole, false
		}
		p.s.uploadsMu.Lock()
		if !p.s.draining.Load() {
			if p.rc.SetReadDeadline(d) != nil {
				p.deadlines = false // http.ErrNotSupported
			}
			p.byIdle = byIdle
		} else {
			p.byIdle = false // cutUploads's deadline, not ours
		}
		p.s.uploadsMu.Unlock()
	}
	n, err := p.r.Read(b)
	if err != nil && p.deadlines && p.byIdle && isTimeout(err) && !p.s.draining.Load() {
		err = &bodyStalledError{idle: p.idle, err: err}
	}
	return n, err
}

// isTimeout reports whether err is a read that met its deadline.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// bodyStalledError is the read error of a body that sent nothing for
// bodyIdleTimeout.
type bodyStalledError struct {
	idle time.Duration
	err  error
}

func (e *bodyStalledError) Error() string {
	return fmt.Sprintf("the request body sent nothing for %s: %v", e.idle, e.err)
}

func (e *bodyStalledError) Unwrap() error { return e.err }

// bodyBudget bounds the bytes of the request bodies held at once
// (Limits.MaxRequestBytesInFlight).
type bodyBudget struct {
	max  int64
	used atomic.Int64
	// idle is how long a body may send nothing; 0 is bodyIdleTimeout.
	idle time.Duration
	// refused counts the requests refused for want of budget, stalled
	// the bodies cut off for sending nothing; nil without a Registerer.
	refused, stalled prometheus.Counter
}

// idleTimeout is how long a body being read may send nothing.
func (b *bodyBudget) idleTimeout() time.Duration {
	if b.idle > 0 {
		return b.idle
	}
	return bodyIdleTimeout
}

// register exposes the budget as metrics: the bytes held now, the most
// that may be, and the requests refused, so an operator sees a budget
// that is too small (refusals while memory is plentiful) or too large.
func (b *bodyBudget) register(reg prometheus.Registerer) {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolsvc_request_body_bytes_in_flight",
		Help: "Bytes of request bodies held now against the budget TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT.",
	}, func() float64 { return float64(b.used.Load()) })
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "toolsvc_request_body_bytes_in_flight_limit",
		Help: "The budget of request body bytes held at once (TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT, or its default).",
	}, func() float64 { return float64(b.max) })
	b.refused = f.NewCounter(prometheus.CounterOpts{
		Name: "toolsvc_request_body_budget_refused_total",
		Help: "Requests refused with 429, their body unread, because it did not fit in TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT.",
	})
	b.stalled = f.NewCounter(prometheus.CounterOpts{
		Name: "toolsvc_request_body_stalled_total",
		Help: "Requests answered 400, their share of TOOLSVC_MAX_REQUEST_BYTES_IN_FLIGHT given back, because their body sent nothing for 10s.",
	})
}

// refuse counts a request refused for want of budget.
func (b *bodyBudget) refuse() {
	if b.refused != nil {
		b.refused.Inc()
	}
}

// stall counts a body cut off for sending nothing.
func (b *bodyBudget) stall() {
	if b.stalled != nil {
		b.stalled.Inc()
	}
}

// smallBody is the most a body may hold and still take the last of the
// budget, its reserve (see room).
const smallBody = 64 << 10

// room is how much of the budget a body may take up to, once it holds
// total bytes, for a body limit of limit. A body that holds more than
// smallBody leaves the last thirty-second of the budget (1 MiB of the
// default 32 MiB) to the small ones, but never so much that a body at
// the limit would no longer fit: big bodies that arrive, or stall, by
// the dozen cannot have every small call refused, and small calls are
// most calls.
func (b *bodyBudget) room(total, limit int64) int64 {
	if total <= smallBody {
		return b.max
	}
	return b.max - max(0, min(b.max/32, b.max-limit))
}

// take takes n bytes of the budget for a body that then holds total,
// when they fit (see room).
func (b *bodyBudget) take(n, total, limit int64) bool {
	room := b.room(total, limit)
	for {
		used := b.used.Load()
		if used+n > room {
			return false
		}
		if b.used.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// release gives n bytes back.
func (b *bodyBudget) release(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// firstPiece is the most of the budget a body takes before its first
// read, no more than its connection costs the server anyway (a goroutine's
// stack, net/http's buffers); it takes more as it arrives.
const firstPiece = 4 << 10

// read reads a body of size bytes (-1: unknown) and at most limit into a
// buffer that it grows as the body arrives, twice at a step up to the
// size, and returns the body and the bytes of the budget it took, its
// buffer's capacity. The budget goes with what arrives, not with what a
// client declares: a buffer grows only once full, so it is at most twice
// what arrived (or its first piece). When it grew four times at a step
// from 64 KiB, 32 connections that declared 1 MiB and sent 256 KiB and
// one byte each held the whole default budget, and 512 that declared
// 64 KiB and sent nothing did too. A body whose declared size, or first
// piece, does not fit in what is left is not read at all; one that stops
// fitting as it grows (others grew meanwhile, or it is chunked) ends with
// errOverBudget, keeping what it took. A body of more than smallBody may
// not take the reserve that room keeps for small ones.
// Growing twice at a step, and to the size the body declares, the
// buffers it drops add up to about the body; io.ReadAll reads into
// pieces that add up to the body and copies them into one buffer at the
// end, so it allocated the body twice as well (BenchmarkReadBody).
func (b *bodyBudget) read(r io.Reader, size, limit int64) (body []byte, held int64, err error) {
	end := limit // the most the buffer must hold
	if size >= 0 {
		end = size
	}
	if size >= 0 && b.used.Load()+size > b.room(size, limit) {
		return nil, 0, errOverBudget // would not fit as it stands
	}
	first := min(end, firstPiece)
	if !b.take(first, first, limit) {
		return nil, 0, errOverBudget
	}
	buf := make([]byte, 0, first)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) == end {
				if size < 0 {
					// At the limit: one more byte makes the reader's
					// MaxBytesError, and EOF ends the body.
					var one [1]byte
					_, err := io.ReadFull(r, one[:])
					if err == io.EOF {
						err = nil
					} else if err == nil {
						err = &http.MaxBytesError{Limit: limit}
					}
					return buf, int64(cap(buf)), err
				}
				return buf, int64(cap(buf)), nil
			}
			grown := min(2*int64(cap(buf)), end)
			if !b.take(grown-int64(cap(buf)), grown, limit) {
				return buf, int64(cap(buf)), errOverBudget
			}
			buf = append(make([]byte, 0, grown), buf...)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		switch {
		case err == io.EOF && size >= 0 && int64(len(buf)) < size:
			return buf, int64(cap(buf)), io.ErrUnexpectedEOF
		case err == io.EOF:
			return buf, int64(cap(buf)), nil
		case err != nil:
			return buf, int64(cap(buf)), err
		}
	}
}

// errDraining is the body error of a request whose body was not read
// because the service is draining.
var errDraining = errors.New("the service is shutting down")

// readBodyAhead is a request body admitCall has read: readBody returns
// body and err as they are; other readers read body, then get err.
type readBodyAhead struct {
	limit int64
	body  []byte
	err   error
	off   int
}

func (b *readBodyAhead) Read(p []byte) (int, error) {
	if b.off < len(b.body) {
		n := copy(p, b.body[b.off:])
		b.off += n
		return n, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return 0, io.EOF
}

func (b *readBodyAhead) Close() error { return nil }

// cutUploads makes the reads of the bodies admitCall is reading fail now.
// The caller has set draining first, so no new reads start afterwards.
func (s *Server) cutUploads() {
	s.uploadsMu.Lock()
	defer s.uploadsMu.Unlock()
	for rc := range s.uploads {
		_ = rc.SetReadDeadline(time.Now())
	}
}
