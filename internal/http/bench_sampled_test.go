package http

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/telemetry"
)

// BenchmarkPostCallsNoExporter is POST /calls of a read-only tool as an
// instance without a trace exporter serves it (the default): HTTP
// metrics, the JSON log, the tracer provider telemetry.NewTracerProvider
// makes without an exporter. A client's sampled traceparent makes the
// request's spans record (and be dropped) so that the sampled flag goes
// on to the hosts tools call; the sub-benchmarks show what that costs
// against no traceparent and an unsampled one.
func BenchmarkPostCallsNoExporter(b *testing.B) {
	tp, err := telemetry.NewTracerProvider(context.Background(), telemetry.TracingOptions{})
	if err != nil {
		b.Fatal(err)
	}
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
	for _, c := range []struct{ name, traceparent string }{
		{"none", ""},
		{"unsampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{"sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req, err := http.NewRequest("POST", e.ts.URL+"/calls", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				if c.traceparent != "" {
					req.Header.Set("traceparent", c.traceparent)
				}
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}
