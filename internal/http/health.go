package http

import (
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

func (s *Server) handleHealthz() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = encode(w, http.StatusOK, map[string]string{"status": "ok"})
	}
}

type readiness struct {
	Status  string            `json:"status"`
	Checks  map[string]string `json:"checks,omitempty"`
	Tools   int               `json:"tools"`
	Details map[string]any    `json:"details,omitempty"`
}

func (s *Server) handleReadyz() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out := readiness{Status: "ready", Checks: map[string]string{}, Details: s.deps.ReadyDetails}
		status := http.StatusOK
		if s.draining.Load() {
			out.Status, status = "draining", http.StatusServiceUnavailable
		}
		reg := s.deps.Executor.Registry()
		out.Tools = reg.Len()
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		names := make([]string, 0, len(s.deps.Ready))
		for n := range s.deps.Ready {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if err := s.deps.Ready[n](ctx); err != nil {
				out.Checks[n] = registry.RedactURLs(err.Error())
				if status == http.StatusOK {
					out.Status, status = "not_ready", http.StatusServiceUnavailable
				}
				continue
			}
			out.Checks[n] = "ok"
		}
		if s.deps.RateLimiter != nil {
			// Failing open, a Redis outage is reported but keeps the
			// instance ready; failing closed, it is not ready.
			detail, ok := s.deps.RateLimiter.Status(ctx)
			out.Checks["rateLimit"] = detail
			if !ok && status == http.StatusOK {
				out.Status, status = "not_ready", http.StatusServiceUnavailable
			}
		}
		_ = encode(w, status, out)
	}
}

func (s *Server) handleOpenAPI() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(s.deps.OpenAPI)
	}
}
