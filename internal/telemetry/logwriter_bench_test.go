package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"
)

// BenchmarkLogWriter is one call's audit line through the service's
// logger into the log's writer, to /dev/null: held and written out
// together every 100ms, and written as soon as possible
// (TOOLSVC_LOG_FLUSH_INTERVAL=0); one caller at a time and one per CPU.
func BenchmarkLogWriter(b *testing.B) {
	for _, interval := range []time.Duration{100 * time.Millisecond, 0} {
		for _, parallel := range []bool{false, true} {
			name := fmt.Sprintf("interval=%v/parallel=%v", interval, parallel)
			b.Run(name, func(b *testing.B) {
				null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
				if err != nil {
					b.Fatal(err)
				}
				defer null.Close()
				w := NewBufferedWriter(null, interval)
				defer w.Close()
				log := NewLogger(w, LogOptions{Level: slog.LevelInfo})
				b.ReportAllocs()
				if !parallel {
					for b.Loop() {
						auditLine(log)
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							auditLine(log)
						}
					})
				}
				// A line the writer goroutine could not keep up with is
				// dropped, which is cheaper than writing it: a run that
				// dropped lines measured the wrong thing.
				b.ReportMetric(float64(w.full.Load())/float64(b.N), "dropped/op")
			})
		}
	}
}

func auditLine(log *slog.Logger) {
	log.LogAttrs(context.Background(), slog.LevelInfo, "tool call", slog.String("caller", "anonymous"), slog.String("tool", "fs__stat"),
		slog.String("tier", "read_only"), slog.String("toolCallId", "call_01a2178cb8426e60d667a7b99b8d42cf"),
		slog.String("decision", "allow"), slog.String("rule", "tier-default:read_only"), slog.String("status", "ok"),
		slog.String("code", ""), slog.Int64("durationMs", 0),
		slog.String("argumentsDigest", "4ae486c3a48f8dc732af672b138b438a1d96960304cc334d46bbc2687d169cbb"),
		slog.String("requestId", "eadf413e75a25c85"))
}
