package telemetry

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"maps"
	"slices"
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
	// The handler gets no ReplaceAttr: the redactor looks at each record
	// once before it, so the handler keeps its own fast paths for the
	// time, the level and the message.
	opts := &slog.HandlerOptions{Level: o.Level}
	var h slog.Handler
	if o.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(logHandler{Handler: h, redact: newRedactor()})
}

// logHandler redacts each record (see RedactSecrets) and adds the trace
// ids of its context's span before the record reaches the handler.
type logHandler struct {
	slog.Handler
	redact *redactor
}

func (h logHandler) Handle(ctx context.Context, r slog.Record) error {
	r, copied := h.redact.record(r)
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		if !copied {
			r = r.Clone()
		}
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = h.redact.attr(a)
	}
	return logHandler{Handler: h.Handler.WithAttrs(out), redact: h.redact}
}

func (h logHandler) WithGroup(name string) slog.Handler {
	return logHandler{Handler: h.Handler.WithGroup(name), redact: h.redact}
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

// record returns r with every attribute redacted (see RedactSecrets),
// and whether it is a new record: a record with nothing to redact or
// resolve, the common case, is returned as it is.
func (rd *redactor) record(r slog.Record) (slog.Record, bool) {
	clean := !isCredential(r.Message)
	if clean {
		r.Attrs(func(a slog.Attr) bool {
			clean = !rd.needed(a)
			return clean
		})
	}
	if clean {
		return r, false
	}
	msg := r.Message
	if isCredential(msg) {
		msg = Redacted
	}
	out := slog.NewRecord(r.Time, r.Level, msg, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(rd.attr(a))
		return true
	})
	return out, true
}

// needed reports whether a, or an attribute in its group, is redacted or
// must be resolved: a LogValuer is resolved here, once, and the record
// rebuilt with its value, so that its LogValue does not run again in the
// handler.
func (rd *redactor) needed(a slog.Attr) bool {
	switch a.Value.Kind() {
	case slog.KindLogValuer:
		return true
	case slog.KindGroup:
		return slices.ContainsFunc(a.Value.Group(), rd.needed)
	}
	return rd.isSecretKey(a.Key) || a.Value.Kind() == slog.KindString && isCredential(a.Value.String())
}

// attr is RedactSecrets for a resolved a, and for each attribute of a
// group (as a handler's ReplaceAttr sees them).
func (rd *redactor) attr(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() != slog.KindGroup {
		return redact(a, rd.isSecretKey)
	}
	members := a.Value.Group()
	out := make([]slog.Attr, len(members))
	for i, m := range members {
		out[i] = rd.attr(m)
	}
	return slog.Attr{Key: a.Key, Value: slog.GroupValue(out...)}
}

func (rd *redactor) isSecretKey(key string) bool {
	known := *rd.secret.Load()
	if s, ok := known[key]; ok {
		return s
	}
	s := isSecretKey(key)
	rd.mu.Lock()
	defer rd.mu.Unlock()
	known = *rd.secret.Load()
	if _, ok := known[key]; !ok && len(known) < rd.maxKeys {
		next := make(map[string]bool, len(known)+1)
		maps.Copy(next, known)
		next[key] = s
		rd.secret.Store(&next)
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
