package http

import (
	"context"
	"testing"

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
	e := productionEnv(b, tp)
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`)
	client := e.ts.Client()
	for _, c := range []struct{ name, traceparent string }{
		{"none", ""},
		{"unsampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{"sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			header := map[string]string{}
			if c.traceparent != "" {
				header["traceparent"] = c.traceparent
			}
			for b.Loop() {
				postTo(b, client, e.ts.URL+"/calls", body, header)
			}
		})
	}
}
