package http

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// addRoutes is the one place every route is declared.
func (s *Server) addRoutes(r chi.Router) {
	r.Use(middleware.GetHead, s.telemetry(), s.requestID, s.accessLog, s.recoverer, s.loopbackHost)
	r.NotFound(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return problem(kindNotFound, "no route for "+r.URL.Path)
	}))
	root := r
	r.MethodNotAllowed(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Allow", allowedMethods(root, r.URL.Path))
		if !strings.HasPrefix(r.URL.Path, "/") {
			return noPath(r)
		}
		return problem(kindMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	}))

	r.Get("/", s.handleIndex())
	r.Get("/healthz", s.handleHealthz())
	r.Get("/readyz", s.handleReadyz())
	r.Get("/openapi.yaml", s.handleOpenAPI())
	if s.deps.Gatherer != nil {
		r.Method(http.MethodGet, "/metrics", s.metricsHandler())
	}

	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, s.queryOnce)
		r.Get("/tools", s.handle(s.handleListTools))
		r.Get("/tools/{name}", s.handle(s.handleGetTool))
		r.With(s.require(registry.ScopeCall), s.admitCall).Post("/calls", s.handle(s.handleCall))
		r.With(s.require(registry.ScopeCall), s.admitCall).Post("/calls/batch", s.handle(s.handleBatch))
		r.With(s.require(registry.ScopeCall)).Get("/calls/{toolCallId}", s.handle(s.handleGetCall))
		r.With(s.require(registry.ScopeCall)).Get("/calls/{toolCallId}/output", s.handle(s.handleGetOutput))
		r.Get("/approvals", s.handle(s.handleListApprovals))
		r.Get("/approvals/{id}", s.handle(s.handleGetApproval))
		r.With(s.require(registry.ScopeApprove), s.admitCall).Post("/approvals/{id}", s.handle(s.handleDecide))
		r.With(s.admitCall).Method(http.MethodPost, "/mcp", s.handleMCP())
	})
	if s.console != nil {
		s.console.Routes(r)
	}
}

// AdminHandler serves only /healthz, /readyz and /metrics, as the main
// handler does, for a listener of their own (TOOLSVC_ADMIN_ADDR): probes
// and scrapers then reach the service even when clients hold every
// connection the main listener accepts. It shares the main handler's
// state, so /readyz answers 503 there too while the service drains.
func (s *Server) AdminHandler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.GetHead, s.recoverer)
	r.NotFound(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return problem(kindNotFound, "no route for "+r.URL.Path+": this address serves only /healthz, /readyz and /metrics")
	}))
	r.MethodNotAllowed(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		if !strings.HasPrefix(r.URL.Path, "/") {
			w.Header().Set("Allow", "")
			return noPath(r)
		}
		w.Header().Set("Allow", "GET, HEAD")
		return problem(kindMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	}))
	r.Get("/healthz", s.handleHealthz())
	r.Get("/readyz", s.handleReadyz())
	if s.deps.Gatherer != nil {
		r.Method(http.MethodGet, "/metrics", s.metricsHandler())
	}
	return r
}

// metricsHandler serves the Prometheus exposition.
func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// noPath is the 405 of a request whose target is no path: CONNECT's
// host and port (RFC 9110, section 9.3.6), which asks for a tunnel. Its
// Allow header is empty: no method applies to such a target.
func noPath(r *http.Request) error {
	if r.Method == http.MethodConnect {
		return problem(kindMethodNotAllowed, fmt.Sprintf("CONNECT asks for a tunnel to %q, and this server is not a proxy: send requests to its own routes, such as POST /calls (GET / lists them)", clipTo(r.RequestURI, maxEchoBytes)))
	}
	return problem(kindMethodNotAllowed, fmt.Sprintf("%s %q names no path of this server; send requests to its own routes, such as POST /calls (GET / lists them)", r.Method, clipTo(r.RequestURI, maxEchoBytes)))
}

// allowedMethods lists the methods routed for path, for the Allow header
// that every 405 carries (RFC 9110, section 15.5.6).
func allowedMethods(routes chi.Routes, path string) string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if routes.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
			if m == http.MethodGet {
				allowed = append(allowed, http.MethodHead) // middleware.GetHead
			}
		}
	}
	return strings.Join(allowed, ", ")
}
