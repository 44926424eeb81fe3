package telemetry

import (
	"log/slog"
	"testing"
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
				r.replace(nil, a)
			}
		}
	})
}
