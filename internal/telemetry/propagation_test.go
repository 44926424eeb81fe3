package telemetry

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
)

// outgoing returns the trace headers a tool's request carries when it is
// made inside a request that came with incoming (nil: none), the way the
// server extracts them and http__get injects them.
func outgoing(t *testing.T, o TracingOptions, incoming http.Header) http.Header {
	t.Helper()
	tp, err := NewTracerProvider(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(incoming))
	ctx, server := tp.Tracer("test").Start(ctx, "POST /calls")
	defer server.End()
	ctx, call := tp.Tracer("test").Start(ctx, "execute_tool http__get")
	defer call.End()
	out := http.Header{}
	Propagator().Inject(ctx, propagation.HeaderCarrier(out))
	if want := call.SpanContext().SpanID().String(); !strings.Contains(out.Get("traceparent"), "-"+want+"-") {
		t.Errorf("traceparent %q does not name the call's span %s", out.Get("traceparent"), want)
	}
	return out
}

const clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// TestNoExporterPassesOnSampledFlag: without an exporter the service
// records none of its own spans, yet a client's sampled traceparent stays
// sampled on the requests tools make: a hop that exports nothing must not
// turn the trace off for the hosts after it. An unsampled one stays
// unsampled, and a trace the service starts is not sampled.
func TestNoExporterPassesOnSampledFlag(t *testing.T) {
	for _, c := range []struct {
		name, traceparent, want string
	}{
		{"sampled", "00-" + clientTrace + "-00f067aa0ba902b7-01", "00-" + clientTrace + "-*-01"},
		{"not sampled", "00-" + clientTrace + "-00f067aa0ba902b7-00", "00-" + clientTrace + "-*-00"},
		{"no traceparent", "", "00-*-*-00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := http.Header{}
			if c.traceparent != "" {
				in.Set("traceparent", c.traceparent)
			}
			got := outgoing(t, TracingOptions{}, in).Get("traceparent")
			parts, want := strings.Split(got, "-"), strings.Split(c.want, "-")
			if len(parts) != 4 {
				t.Fatalf("traceparent %q", got)
			}
			for i := range want {
				if want[i] != "*" && parts[i] != want[i] {
					t.Errorf("traceparent %q, want %q", got, c.want)
				}
			}
		})
	}
}

// TestPropagatorDropsClientTracestate: the hosts tools call get the
// call's traceparent and nothing else a client sent: not its tracestate,
// whatever it holds, nor baggage.
func TestPropagatorDropsClientTracestate(t *testing.T) {
	in := http.Header{}
	in.Set("traceparent", "00-"+clientTrace+"-00f067aa0ba902b7-01")
	in.Set("tracestate", "secret=hunter2,vendor=x")
	in.Set("baggage", "user=alice")
	for _, o := range []TracingOptions{{}, {Sampler: "always_on"}} {
		out := outgoing(t, o, in)
		if out.Get("traceparent") == "" {
			t.Errorf("sampler %q: no traceparent", o.Sampler)
		}
		for k := range out {
			if !strings.EqualFold(k, "traceparent") {
				t.Errorf("sampler %q: the tool's request carries %s: %q", o.Sampler, k, out.Get(k))
			}
		}
	}
	if f := Propagator().Fields(); len(f) != 1 || f[0] != "traceparent" {
		t.Errorf("Fields() = %q, want only traceparent", f)
	}
}
