package http

import (
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
		return problem(kindMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	}))

	r.Get("/", s.handleIndex())
	r.Get("/healthz", s.handleHealthz())
	r.Get("/readyz", s.handleReadyz())
	r.Get("/openapi.yaml", s.handleOpenAPI())
	if s.deps.Gatherer != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	}

	r.Group(func(r chi.Router) {
		r.Use(s.authenticate)
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
