package telemetry

import (
	"context"
	"io"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// BenchmarkRedactSecrets is the per-attribute cost of the log's safety net.
func BenchmarkRedactSecrets(b *testing.B) {
	attrs := []slog.Attr{slog.String("caller", "anonymous"), slog.String("toolCallId", "call_1"), slog.Int64("durationMs", 3), slog.String("argumentsDigest", "abc")}
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, a := range attrs {
				RedactSecrets(nil, a)
			}
		}
	})
	b.Run("logger", func(b *testing.B) {
		r := newRedactor()
		b.ReportAllocs()
		for b.Loop() {
			for _, a := range attrs {
				r.attr(a)
			}
		}
	})
}

// BenchmarkLogLine is one call's audit line through the service's
// logger: redaction, trace ids and JSON, to a discarding writer.
func BenchmarkLogLine(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("bench").Start(context.Background(), "call")
	defer span.End()
	log := NewLogger(io.Discard, LogOptions{Level: slog.LevelInfo})
	b.ReportAllocs()
	for b.Loop() {
		log.LogAttrs(ctx, slog.LevelInfo, "tool call", slog.String("caller", "anonymous"), slog.String("tool", "fs__stat"),
			slog.String("tier", "read_only"), slog.String("toolCallId", "call_01a2178cb8426e60d667a7b99b8d42cf"),
			slog.String("decision", "allow"), slog.String("rule", "tier-default:read_only"), slog.String("status", "ok"),
			slog.String("code", ""), slog.Int64("durationMs", 0),
			slog.String("argumentsDigest", "4ae486c3a48f8dc732af672b138b438a1d96960304cc334d46bbc2687d169cbb"),
			slog.String("requestId", "eadf413e75a25c85"))
	}
}
