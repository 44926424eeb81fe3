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
	"runtime/debug"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

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
func (s *Server) admitCall(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.draining.Load() && r.Body != nil && r.Body != http.NoBody {
			r.Body = s.readAhead(w, r)
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

// readAhead reads r's body while Drain may cut it off, and returns it as
// a body readBody takes at once.
func (s *Server) readAhead(w http.ResponseWriter, r *http.Request) *readBodyAhead {
	rc := http.NewResponseController(w)
	s.uploadsMu.Lock()
	if s.draining.Load() {
		s.uploadsMu.Unlock()
		return &readBodyAhead{limit: s.deps.Limits.MaxRequestBytes, err: errDraining}
	}
	s.uploads[rc] = struct{}{}
	s.uploadsMu.Unlock()
	body, err := readBody(w, r, s.deps.Limits.MaxRequestBytes)
	s.uploadsMu.Lock()
	delete(s.uploads, rc)
	s.uploadsMu.Unlock()
	// The original body is left to net/http, which drains or drops what
	// is left of it after the handler.
	return &readBodyAhead{limit: s.deps.Limits.MaxRequestBytes, body: body, err: err}
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
