package http

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Problem is an RFC 9457 problem detail with a stable code. It is also the
// error handlers return: Detail goes to the client, Err only to the log.
// Handlers make one with problem, never by hand, so that status, code and
// title always come from the kinds table.
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

// kind is one kind of refused request.
type kind int

// The kinds of refused request; kinds says what each answers.
const (
	kindInvalidJSON kind = iota + 1
	kindUnreadableBody
	kindTooDeep
	kindInvalidCall
	kindUnknownMember
	kindMissingToolName
	kindInvalidBatch
	kindInvalidParameter
	kindInvalidDecision
	kindUnauthorized
	kindForbidden
	kindForeignHost
	kindNotFound
	kindMethodNotAllowed
	kindConflict
	kindPayloadTooLarge
	kindUnsupportedMediaType
	kindOverloaded
	kindRateLimited
	kindDraining
	kindUnavailable
	kindInternal
)

// problemKind is what one kind of refused request answers.
type problemKind struct {
	status int
	code   string
	title  string
	// retryAfter is the Retry-After of the answer, in seconds, when the
	// same request may succeed shortly.
	retryAfter int
}

// kinds is the one table from error kind to problem: status, stable code
// and title. api/openapi.yaml lists the same codes (a test checks).
var kinds = [...]problemKind{
	kindInvalidJSON:          {http.StatusBadRequest, "invalid_json", "The body is not valid JSON", 0},
	kindUnreadableBody:       {http.StatusBadRequest, "unreadable_body", "The body could not be read", 0},
	kindTooDeep:              {http.StatusBadRequest, "too_deep", "The body nests too deeply", 0},
	kindInvalidCall:          {http.StatusBadRequest, "invalid_call", "The call cannot be read", 0},
	kindUnknownMember:        {http.StatusBadRequest, "unknown_member", "The call has a member toolsvc does not know", 0},
	kindMissingToolName:      {http.StatusBadRequest, "missing_tool_name", "The call names no tool", 0},
	kindInvalidBatch:         {http.StatusBadRequest, "invalid_batch", "The batch cannot be read", 0},
	kindInvalidParameter:     {http.StatusBadRequest, "invalid_parameter", "A query parameter is not valid", 0},
	kindInvalidDecision:      {http.StatusBadRequest, "invalid_decision", "The approval decision cannot be read", 0},
	kindUnauthorized:         {http.StatusUnauthorized, "unauthorized", "Missing or invalid credentials", 0},
	kindForbidden:            {http.StatusForbidden, "forbidden", "The caller lacks a scope", 0},
	kindForeignHost:          {http.StatusForbidden, "foreign_host", "The request names a host this server does not serve", 0},
	kindNotFound:             {http.StatusNotFound, "not_found", "Not found", 0},
	kindMethodNotAllowed:     {http.StatusMethodNotAllowed, "method_not_allowed", "Method not allowed", 0},
	kindConflict:             {http.StatusConflict, "conflict", "The toolCallId was used for another call", 0},
	kindPayloadTooLarge:      {http.StatusRequestEntityTooLarge, "payload_too_large", "The body is too large", 0},
	kindUnsupportedMediaType: {http.StatusUnsupportedMediaType, "unsupported_media_type", "Send Content-Type: application/json", 0},
	kindOverloaded:           {http.StatusTooManyRequests, "overloaded", "Too many calls in flight", 1},
	kindRateLimited:          {http.StatusTooManyRequests, "rate_limited", "The caller is over its rate limit", 1},
	kindDraining:             {http.StatusServiceUnavailable, "draining", "The service is shutting down", 1},
	kindUnavailable:          {http.StatusServiceUnavailable, "unavailable", "A service this one depends on is not answering", 1},
	kindInternal:             {http.StatusInternalServerError, "internal", "Internal error", 0},
}

// problem makes the problem of kind k with detail, the sentence the client
// reads.
func problem(k kind, detail string) *Problem {
	pk := kinds[k]
	return &Problem{Status: pk.status, Code: pk.code, Title: pk.title, Detail: detail, RetryAfter: pk.retryAfter}
}

// because records err, which only the log sees, as the cause of p.
func (p *Problem) because(err error) *Problem {
	p.Err = err
	return p
}

// problemFor maps every error a handler may return to a problem: errors
// of the core become their kind, anything else is internal.
func problemFor(err error) *Problem {
	var p *Problem
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &mbe):
		return problem(kindPayloadTooLarge, "request body is larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes (TOOLSVC_MAX_REQUEST_BYTES)")
	case errors.Is(err, registry.ErrOverloaded):
		return problem(kindOverloaded, "too many tool calls in flight; retry shortly")
	case errors.Is(err, registry.ErrConflict):
		return problem(kindConflict, "this toolCallId was already used for a call with another tool, other arguments or another context.instanceKey; use a new toolCallId")
	case errors.Is(err, registry.ErrUnavailable):
		return storeFailed(err, "; the call did not run")
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrNoStore):
		return problem(kindNotFound, "no such record")
	}
	return problem(kindInternal, "internal error").because(err)
}

// storeFailed is the problem of a store that failed, with outcome (what
// did not happen) in its detail: out of disk space or unable to write its
// files, which only an operator can cure, or not answering.
func storeFailed(err error, outcome string) *Problem {
	if errors.Is(err, registry.ErrStoreFull) {
		p := problem(kindUnavailable, "the call store is out of disk space"+outcome+"; retry once an operator has freed space").because(err)
		p.RetryAfter = operatorRetryAfter
		return p
	}
	if errors.Is(err, registry.ErrStoreBroken) {
		p := problem(kindUnavailable, "the call store needs an operator: its database refuses the service's statements (the embedded store's file deleted, replaced or made unwritable, or its disk failing; a PostgreSQL table, privilege or database missing, or the database read-only)"+outcome+
			"; retrying shortly does not help: retry once an operator has repaired the store or restarted the service").because(err)
		p.RetryAfter = operatorRetryAfter
		return p
	}
	return problem(kindUnavailable, "the call store is not answering"+outcome+"; retry shortly").because(err)
}

// operatorRetryAfter is the Retry-After, in seconds, of a store failure
// that only an operator can cure.
const operatorRetryAfter = 30

// needsOperator reports whether err is a store failure that only an
// operator can cure, which /readyz reports too.
func needsOperator(err error) bool {
	var idp *keysUnavailableError
	return errors.Is(err, registry.ErrStoreFull) || errors.Is(err, registry.ErrStoreBroken) || errors.As(err, &idp)
}

// clientLeft reports whether r's client went away: net/http cancels a
// request's context, without a cause of its own, when its connection
// closes. The service's own cancellations (shutdown) carry a cause.
func clientLeft(r *http.Request) bool {
	return errors.Is(context.Cause(r.Context()), context.Canceled)
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

// maxDetailBytes and maxEchoBytes bound a problem's detail and instance.
const (
	maxDetailBytes = 4 << 10
	maxEchoBytes   = 1 << 10
)

func (s *Server) writeProblem(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	// The path is the client's: the log gets it at the length the answer
	// echoes it, not a 200 KB id.
	path := clipTo(r.URL.Path, maxEchoBytes)
	switch {
	case p.Status == http.StatusServiceUnavailable && clientLeft(r):
		// The client stopped waiting (its own timeout, a closed
		// connection), so the call was given up and this answer reaches
		// nobody. That is the client's doing, not a failure to page
		// anyone about; a slow store behind it shows in the store's
		// metrics. A 500 stays an error whoever left.
		s.deps.Logger.InfoContext(r.Context(), "client left before the answer", "error", err, "path", path, "requestId", requestIDFrom(r.Context()))
	case p.Code == "draining":
		// Shutting down is what the operator asked for: each call it
		// refuses is worth a line, not an error to page about.
		s.deps.Logger.InfoContext(r.Context(), "refused while draining", "path", path, "requestId", requestIDFrom(r.Context()))
	case p.Status == http.StatusServiceUnavailable && needsOperator(err):
		// A full disk or a store that cannot write refuses every call
		// until an operator acts, and /readyz says so; an identity
		// provider that is down refuses every token it signed until it
		// is back: a line per call at error level (thousands a second
		// under load) pages nobody more than the first did.
		s.deps.Logger.WarnContext(r.Context(), "request failed", "error", err, "path", path, "requestId", requestIDFrom(r.Context()))
	case p.Status >= 500:
		s.deps.Logger.ErrorContext(r.Context(), "request failed", "error", err, "path", path, "requestId", requestIDFrom(r.Context()))
	case p.Err != nil:
		s.deps.Logger.DebugContext(r.Context(), "request refused", "error", err)
	}
	out := *p
	if out.Type == "" {
		out.Type = "https://toolsvc.dev/problems/" + p.Code
	}
	// What a client sent comes back in the detail and the instance at a
	// bounded length: a 900 KB format name is not worth 900 KB of answer.
	out.Instance = path
	if len(out.Detail) > maxDetailBytes {
		out.Detail = clipTo(out.Detail, maxDetailBytes) + "…"
	}
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
