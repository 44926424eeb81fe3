// Package http is toolsvc's HTTP adapter: the chi router, handlers, auth,
// RFC 9457 problem responses and the wire formats of the model APIs. It
// consumes the core through the small interfaces declared here.
package http

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Executor runs calls and approved calls; *registry.Executor implements it.
type Executor interface {
	Execute(ctx context.Context, caller *registry.Caller, call *registry.Call) (*registry.Result, error)
	ExecuteBatch(ctx context.Context, caller *registry.Caller, calls []*registry.Call, o registry.BatchOptions) ([]*registry.Result, error)
	Decide(ctx context.Context, approver *registry.Caller, id string, v registry.Verdict, reason string) (*registry.Approval, *registry.Result, error)
	Registry() *registry.Registry
	// Store is where calls and approvals are kept; nil when nowhere.
	Store() registry.Store
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
}

// Deps are what the HTTP adapter needs.
type Deps struct {
	Executor Executor
	// Auth authenticates bearer tokens; nil serves every request as the
	// anonymous caller (only allowed on loopback; run enforces that).
	Auth   Authenticator
	Logger *slog.Logger
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
}

// Server is the HTTP side of toolsvc.
type Server struct {
	deps     Deps
	handler  http.Handler
	draining atomic.Bool
	inFlight atomic.Int64
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
	s := &Server{deps: deps}
	r := chi.NewRouter()
	s.addRoutes(r)
	s.handler = r
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Drain makes /readyz answer 503 and refuses new calls with 503; calls
// already running go on.
func (s *Server) Drain() { s.draining.Store(true) }

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
