package http

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/telemetry"
)

// BenchmarkPostCalls is POST /calls end to end through a real HTTP server
// on loopback: client, chi, decoding, executor, text__transform, encoding.
func BenchmarkPostCalls(b *testing.B) {
	e := newEnv(b)
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(e.ts.URL+"/calls", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}

// BenchmarkPostCallsTraced is BenchmarkPostCalls with everything a
// production instance records: HTTP metrics, a sampled server span and
// execute_tool span (exported nowhere), and the JSON log with trace ids.
func BenchmarkPostCallsTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	log := telemetry.NewLogger(io.Discard, telemetry.LogOptions{Level: slog.LevelInfo})
	e := newEnv(b, func(d *Deps, o *registry.Options) {
		d.Registerer = d.Gatherer.(*prometheus.Registry)
		d.TracerProvider = tp
		d.Logger, o.Logger = log, log
		o.Tracer = tp.Tracer("toolsvc")
	})
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Post(e.ts.URL+"/calls", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}
