package httpfetch

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestTraceContextPropagated checks that a fetch carries the traceparent of
// its execute_tool span when a propagator is set, and nothing otherwise.
func TestTraceContextPropagated(t *testing.T) {
	seen := make(chan string, 2)
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("traceparent")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok"))
	}))
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	for _, propagate := range []bool{true, false} {
		o := Options{AllowCIDRs: allowLoopback()}
		if propagate {
			o.Propagator = propagation.TraceContext{}
		}
		reg, err := registry.New(registry.Defaults{Timeout: 10e9, MaxOutputBytes: 64 << 10, ErrorMessageLimit: 1000}, Tools(o)...)
		if err != nil {
			t.Fatal(err)
		}
		ex := registry.NewExecutor(registry.Options{Registry: reg, Tracer: tp.Tracer("test")})
		res, err := ex.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "http__get", Arguments: json.RawMessage(`{"url":"` + srv.URL + `"}`)})
		if err != nil || res.Status != registry.StatusOK {
			t.Fatalf("fetch: %v %+v", err, res)
		}
		got := <-seen
		if !propagate {
			if got != "" {
				t.Errorf("traceparent sent without a propagator: %q", got)
			}
			continue
		}
		spans := exp.GetSpans()
		sc := spans[len(spans)-1].SpanContext
		if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; got != want {
			t.Errorf("traceparent %q, want the execute_tool span's %q", got, want)
		}
	}
}
