package http

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Problem is an RFC 9457 problem detail with a stable code. It is also the
// error handlers return: Detail goes to the client, Err only to the log.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Code     string `json:"code"`
	Instance string `json:"instance,omitempty"`
	// RetryAfter sets the Retry-After header (seconds) when positive.
	RetryAfter int   `json:"-"`
	Err        error `json:"-"`
}

func (p *Problem) Error() string {
	if p.Err != nil {
		return p.Code + ": " + p.Detail + ": " + p.Err.Error()
	}
	return p.Code + ": " + p.Detail
}

func (p *Problem) Unwrap() error { return p.Err }

func errBadRequest(code, detail string) *Problem {
	return &Problem{Status: http.StatusBadRequest, Code: code, Detail: detail}
}

func errNotFound(detail string) *Problem {
	return &Problem{Status: http.StatusNotFound, Code: "not_found", Detail: detail}
}

// problemFor maps every error a handler may return to a problem: the one
// table from error kind to HTTP status.
func problemFor(err error) *Problem {
	var p *Problem
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &mbe):
		return &Problem{Status: http.StatusRequestEntityTooLarge, Code: "payload_too_large",
			Detail: "request body is larger than " + strconv.FormatInt(mbe.Limit, 10) + " bytes (TOOLSVC_MAX_REQUEST_BYTES)"}
	case errors.Is(err, registry.ErrOverloaded):
		return &Problem{Status: http.StatusTooManyRequests, Code: "overloaded", Detail: "too many tool calls in flight; retry shortly", RetryAfter: 1}
	case errors.Is(err, registry.ErrConflict):
		return &Problem{Status: http.StatusConflict, Code: "conflict",
			Detail: "this toolCallId was already used for a call with another tool or other arguments; use a new toolCallId"}
	case errors.Is(err, registry.ErrUnavailable):
		return &Problem{Status: http.StatusServiceUnavailable, Code: "unavailable", Detail: "the call store is not answering; the call did not run; retry shortly", RetryAfter: 1, Err: err}
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrNoStore):
		return &Problem{Status: http.StatusNotFound, Code: "not_found", Detail: "no such record"}
	}
	return &Problem{Status: http.StatusInternalServerError, Code: "internal", Detail: "internal error", Err: err}
}

// handle adapts a handler that returns an error: the error becomes a
// problem response, and its internal detail goes to the log.
func (s *Server) handle(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.writeProblem(w, r, err)
		}
	}
}

func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	if p.Status >= 500 {
		s.deps.Logger.ErrorContext(r.Context(), "request failed", "error", err, "path", r.URL.Path, "requestId", requestIDFrom(r.Context()))
	} else if p.Err != nil {
		s.deps.Logger.DebugContext(r.Context(), "request refused", "error", err)
	}
	out := *p
	out.Title = http.StatusText(p.Status)
	if out.Type == "" {
		out.Type = "https://toolsvc.dev/problems/" + p.Code
	}
	out.Instance = r.URL.Path
	if p.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.RetryAfter))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	if err := json.NewEncoder(w).Encode(out); err != nil {
		s.deps.Logger.DebugContext(r.Context(), "writing problem", "error", err)
	}
}
