package http

import (
	"context"
	"net/http"
	"sort"
	"sync"
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

// readyCheckTimeout bounds each readiness check.
const readyCheckTimeout = 2 * time.Second

// handleReadyz runs the readiness checks at once, each with its own
// deadline: a store that takes the whole of it must not leave the next
// check an expired context, which would report a healthy Redis as
// unreachable. /readyz thus answers within one deadline.
func (s *Server) handleReadyz() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out := readiness{Status: "ready", Checks: map[string]string{}, Details: s.deps.ReadyDetails}
		status := http.StatusOK
		if s.draining.Load() {
			out.Status, status = "draining", http.StatusServiceUnavailable
		}
		reg := s.deps.Executor.Registry()
		out.Tools = reg.Len()
		names := make([]string, 0, len(s.deps.Ready))
		for n := range s.deps.Ready {
			names = append(names, n)
		}
		sort.Strings(names)
		errs := make([]error, len(names))
		var rateDetail string
		rateOK := true
		var wg sync.WaitGroup
		for i, n := range names {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(r.Context(), readyCheckTimeout)
				defer cancel()
				errs[i] = s.deps.Ready[n](ctx)
			})
		}
		if s.deps.RateLimiter != nil {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(r.Context(), readyCheckTimeout)
				defer cancel()
				rateDetail, rateOK = s.deps.RateLimiter.Status(ctx)
			})
		}
		wg.Wait()
		for i, n := range names {
			if errs[i] != nil {
				out.Checks[n] = registry.RedactURLs(errs[i].Error())
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
			out.Checks["rateLimit"] = rateDetail
			if !rateOK && status == http.StatusOK {
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
