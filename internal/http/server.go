// Package http is toolsvc's HTTP adapter: the chi router, handlers, auth,
// RFC 9457 problem responses and the wire formats of the model APIs. It
// consumes the core through the small interfaces declared here.
package http

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/http/ui"
	"github.com/toolsvc/toolsvc/internal/ratelimit"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// Executor runs calls and approved calls; *registry.Executor implements it.
type Executor interface {
	Execute(ctx context.Context, caller *registry.Caller, call *registry.Call) (*registry.Result, error)
	ExecuteBatch(ctx context.Context, caller *registry.Caller, calls []*registry.Call, o registry.BatchOptions) ([]*registry.Result, error)
	Decide(ctx context.Context, approver *registry.Caller, id string, v registry.Verdict, reason string) (*registry.Approval, *registry.Result, error)
	// CallerApproval and DecideAsCaller let a caller decide their own
	// approval request when its rule sets callerMayApprove (over MCP).
	CallerApproval(ctx context.Context, caller *registry.Caller, id string) (*registry.Approval, error)
	DecideAsCaller(ctx context.Context, caller *registry.Caller, id string, v registry.Verdict, reason string) (*registry.Approval, *registry.Result, error)
	Registry() *registry.Registry
	// AuditRefused writes the audit line of a call answered without it.
	AuditRefused(ctx context.Context, caller *registry.Caller, res *registry.Result)
	// Store is where calls and approvals are kept; nil when nowhere.
	Store() registry.Store
	// GetCall and WaitCall read a call's record as the store's methods
	// do, except that a call that finished while the store did not take
	// its result reads as done, with the result held in memory.
	GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error)
	WaitCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error)
}

// Authenticator maps a bearer token to a caller.
type Authenticator interface {
	Authenticate(token string) (*registry.Caller, bool)
}

// Check is a readiness check; a non-nil error makes /readyz answer 503.
type Check func(ctx context.Context) error

// Limits bound what a request may carry.
type Limits struct {
	// MaxRequestBytes bounds a request body (413 beyond).
	MaxRequestBytes int64
	// MaxJSONDepth bounds the nesting of a request body (400 beyond).
	MaxJSONDepth int
	// MaxRequestBytesInFlight bounds the bytes of the request bodies of
	// calls (POST /calls, /calls/batch, /approvals/{id}, /mcp and the
	// console's decisions) held at once, from before they are read until
	// their requests end; a request whose body does not fit is answered
	// 429 unread. 0 is defaultRequestBytesInFlight.
	MaxRequestBytesInFlight int64
}

// defaultRequestBytesInFlight is the budget of request bytes in flight
// for a body limit of maxRequestBytes and a Go memory limit of memLimit
// (math.MaxInt64: none): 32 bodies at the limit (32 MiB at the default
// 1 MiB), and at most a sixteenth of the memory limit, but never less than
// one body at the limit. A body costs several times its size while its
// call is decoded, validated and run, and the collector lets the heap
// grow to twice what is live: through the binary, each MiB of the budget
// that 1 MB fs__write calls filled added about 6 MB to the peak resident
// memory (32 MiB: 260 MB, 64 MiB: 446 MB, 128 MiB: 891 MB; docs/limits.md).
func defaultRequestBytesInFlight(maxRequestBytes, memLimit int64) int64 {
	budget := 32 * maxRequestBytes
	if memLimit > 0 && memLimit < math.MaxInt64 {
		budget = min(budget, memLimit/16)
	}
	return max(budget, maxRequestBytes)
}

// Deps are what the HTTP adapter needs.
type Deps struct {
	Executor Executor
	// Auth authenticates bearer tokens; nil serves every request as the
	// anonymous caller (only allowed on loopback; run enforces that).
	Auth Authenticator
	// Anonymous is that caller when neither Auth nor Identity is set (its
	// rate limit); nil is registry.Anonymous().
	Anonymous *registry.Caller
	// Identity resolves bearer tokens (static keys and JWTs) and client
	// certificates; it takes precedence over Auth.
	Identity Identity
	// RateLimiter keeps the callers' rate limits; nil limits nothing.
	RateLimiter ratelimit.Limiter
	Logger      *slog.Logger
	// Gatherer serves /metrics.
	Gatherer prometheus.Gatherer
	// Registerer takes the HTTP server metrics; nil records none.
	Registerer prometheus.Registerer
	// TracerProvider makes a server span per request; nil traces nothing.
	TracerProvider trace.TracerProvider
	// OpenAPI is the contract served at /openapi.yaml.
	OpenAPI []byte
	Limits  Limits
	// Ready lists the readiness checks beyond "not draining".
	Ready map[string]Check
	// ReadyDetails are reported by /readyz (e.g. the sandbox layers).
	ReadyDetails map[string]any
	// Batch schedules the calls of POST /calls/batch.
	Batch registry.BatchOptions
	// Version is the service's version, served as /mcp's
	// serverInfo.version ("" or "dev": the module version and VCS
	// revision from build info).
	Version string
	// Console configures the console at /ui.
	Console Console
}

// Console configures the console at /ui.
type Console struct {
	// Disabled serves no console.
	Disabled bool
	// Key seals the session cookies (32 bytes); nil makes a random one
	// per process.
	Key []byte
	// SessionTTL is how long a sign-in lasts; 0 is 12 hours.
	SessionTTL time.Duration
	// SecureCookies marks cookies Secure without TLS on the connection
	// (behind a TLS-terminating proxy).
	SecureCookies bool
}

// Server is the HTTP side of toolsvc.
type Server struct {
	deps     Deps
	rate     *rateMetrics
	handler  http.Handler
	draining atomic.Bool
	// drained ends when the server drains: long polls end with it.
	drained    context.Context
	endDrained context.CancelFunc
	inFlight   atomic.Int64
	// uploads are the request bodies admitCall is reading, which Drain
	// cuts off.
	uploadsMu sync.Mutex
	uploads   map[*http.ResponseController]struct{}
	// bodies is the budget of request bytes in flight.
	bodies  *bodyBudget
	console *ui.Console // nil when disabled
	formats formats
}

// NewServer returns the HTTP server for deps.
func NewServer(deps Deps) *Server {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Limits.MaxRequestBytes <= 0 {
		deps.Limits.MaxRequestBytes = 1 << 20
	}
	if deps.Limits.MaxJSONDepth <= 0 {
		deps.Limits.MaxJSONDepth = 64
	}
	if deps.Limits.MaxRequestBytesInFlight <= 0 {
		deps.Limits.MaxRequestBytesInFlight = defaultRequestBytesInFlight(deps.Limits.MaxRequestBytes, debug.SetMemoryLimit(-1))
	}
	// One body at the limit always fits.
	deps.Limits.MaxRequestBytesInFlight = max(deps.Limits.MaxRequestBytesInFlight, deps.Limits.MaxRequestBytes)
	s := &Server{deps: deps, formats: wireFormats(), uploads: map[*http.ResponseController]struct{}{},
		bodies: &bodyBudget{max: deps.Limits.MaxRequestBytesInFlight}}
	s.drained, s.endDrained = context.WithCancel(context.Background())
	if deps.Registerer != nil {
		s.bodies.register(deps.Registerer)
	}
	if deps.Registerer != nil && deps.RateLimiter != nil {
		s.rate = newRateMetrics(deps.Registerer)
	}
	r := chi.NewRouter()
	if !deps.Console.Disabled {
		// Only a key of the wrong length (which run checks first) or
		// broken embedded templates (which tests catch) fail here.
		c, err := s.newConsole()
		if err != nil {
			deps.Logger.Error("the console at /ui is off", "error", err)
		}
		s.console = c
	}
	s.addRoutes(r)
	s.handler = r
	return s
}

// newConsole makes the console; it signs people in through the API's own
// authenticator, so every credential the API takes works there.
func (s *Server) newConsole() (*ui.Console, error) {
	// Sign-in resolves a token as the API does: static keys and JWTs.
	var authenticate func(string) (*registry.Caller, bool)
	if id := s.identity(); id != nil {
		authenticate = func(token string) (*registry.Caller, bool) {
			c, err := id.Token(context.Background(), token)
			return c, err == nil
		}
	}
	return ui.New(ui.Options{
		Executor: s.deps.Executor, Authenticate: authenticate, Key: s.deps.Console.Key,
		SessionTTL: s.deps.Console.SessionTTL, SecureCookies: s.deps.Console.SecureCookies, Logger: s.deps.Logger,
		Admit: s.admitCall,
	})
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Drain makes /readyz answer 503 and refuses new calls with 503; calls
// already running go on. Calls whose bodies are still arriving are
// refused too: their reads are cut off.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.endDrained()
	s.cutUploads()
}

// untilDrain returns a context that also ends when the server drains: a
// long poll's wait, which shutdown would otherwise wait out (it counts
// as no call in flight) and then cut off without an answer.
func (s *Server) untilDrain(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(s.drained, cancel)
	return ctx, func() { stop(); cancel() }
}

// WaitIdle waits until no call is running or ctx ends, and reports
// whether the server went idle.
func (s *Server) WaitIdle(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for s.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}
