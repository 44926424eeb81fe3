package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
)

// LogOptions configure the logger.
type LogOptions struct {
	// Level is the least level written.
	Level slog.Leveler
	// Format is "json" (the default) or "text" (for a terminal).
	Format string
}

// NewLogger returns the service's logger: JSON (or text) on w, with
// trace_id and span_id on every line logged with a context that carries a
// span, and the values of attributes that name secrets replaced (see
// RedactSecrets).
func NewLogger(w io.Writer, o LogOptions) *slog.Logger {
	opts := &slog.HandlerOptions{Level: o.Level, ReplaceAttr: newRedactor().replace}
	var h slog.Handler
	if o.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(NewLogHandler(h))
}

// NewLogHandler wraps h so that records logged with a context holding a
// valid span context get trace_id and span_id attributes.
func NewLogHandler(h slog.Handler) slog.Handler { return traceHandler{h} }

type traceHandler struct{ slog.Handler }

func (t traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r = r.Clone()
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return t.Handler.Handle(ctx, r)
}

func (t traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{t.Handler.WithAttrs(attrs)}
}

func (t traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{t.Handler.WithGroup(name)}
}

// Redacted replaces a secret in the log.
const Redacted = "[REDACTED]"

// RedactSecrets is a slog ReplaceAttr function that replaces the value of
// an attribute whose key names a secret (authorization, token, api key,
// password, secret, cookie, credential, private key; any case and
// separator) and any string value that is a bearer or basic credential.
// It is a safety net: the service never logs such values on purpose.
func RedactSecrets(_ []string, a slog.Attr) slog.Attr { return redact(a, isSecretKey) }

// redact is RedactSecrets with secretKey judging the keys.
func redact(a slog.Attr, secretKey func(string) bool) slog.Attr {
	if a.Value.Kind() == slog.KindGroup {
		return a
	}
	if secretKey(a.Key) || a.Value.Kind() == slog.KindString && isCredential(a.Value.String()) {
		return slog.String(a.Key, Redacted)
	}
	return a
}

// redactor is RedactSecrets with the verdict on each key remembered: the
// service logs the same few dozen keys on every line, and looking one up
// costs a fraction of reading it. The remembered keys are a map replaced
// whole when a key is added (lookups take no lock), up to maxKeys; keys
// beyond those are checked every time.
type redactor struct {
	mu      sync.Mutex
	secret  atomic.Pointer[map[string]bool]
	maxKeys int
}

func newRedactor() *redactor {
	r := &redactor{maxKeys: 1024}
	r.secret.Store(&map[string]bool{})
	return r
}

// replace is RedactSecrets. It also hands the handler the level as the
// string it writes: a handler with a ReplaceAttr passes the level to it as
// an Any holding a slog.Level, which the JSON handler would then encode
// through encoding/json's reflection on every line.
func (r *redactor) replace(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok {
			return slog.String(slog.LevelKey, l.String())
		}
	}
	return redact(a, r.isSecretKey)
}

func (r *redactor) isSecretKey(key string) bool {
	known := *r.secret.Load()
	if s, ok := known[key]; ok {
		return s
	}
	s := isSecretKey(key)
	r.mu.Lock()
	defer r.mu.Unlock()
	known = *r.secret.Load()
	if _, ok := known[key]; !ok && len(known) < r.maxKeys {
		next := make(map[string]bool, len(known)+1)
		maps.Copy(next, known)
		next[key] = s
		r.secret.Store(&next)
	}
	return s
}

func isSecretKey(key string) bool {
	// Lower-case the key without its separators into a stack buffer: this
	// runs for every attribute of every line, so it must not allocate.
	var buf [64]byte
	k := buf[:0]
	for _, r := range key {
		if r == '-' || r == '_' || r == '.' {
			continue
		}
		r = unicode.ToLower(r)
		if r >= utf8.RuneSelf {
			k = utf8.AppendRune(k, r)
		} else {
			k = append(k, byte(r))
		}
	}
	for _, w := range secretWords() {
		if bytes.Contains(k, []byte(w)) {
			return true
		}
	}
	return false
}

func secretWords() [9]string {
	return [9]string{"authorization", "password", "passwd", "secret", "token", "apikey", "cookie", "credential", "privatekey"}
}

func isCredential(v string) bool {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
	return ok && rest != "" && (strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "Basic"))
}
