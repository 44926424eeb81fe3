package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
)

func TestOTLPSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		s    OTLPSettings
		want string // in the error; empty: valid
	}{
		{OTLPSettings{}, ""},
		{OTLPSettings{Endpoint: "http://collector:4318"}, ""},
		{OTLPSettings{Endpoint: " https://collector.example/otlp "}, ""}, // the exporter trims
		{OTLPSettings{TracesEndpoint: "http://127.0.0.1:4318/v1/traces", Timeout: "2500"}, ""},
		{OTLPSettings{Endpoint: "127.0.0.1:19258"}, "OTEL_EXPORTER_OTLP_ENDPOINT must be a URL with scheme http or https and a host (http://collector:4318), got \"127.0.0.1:19258\" (did you mean http://127.0.0.1:19258?)"},
		{OTLPSettings{Endpoint: "localhost:4318"}, "(did you mean http://localhost:4318?)"},
		{OTLPSettings{Endpoint: "::not a url"}, `OTEL_EXPORTER_OTLP_ENDPOINT must be a URL with scheme http or https and a host (http://collector:4318), got "::not a url"`},
		{OTLPSettings{Endpoint: "ftp://collector:4318"}, "scheme http or https"},
		{OTLPSettings{Endpoint: "http:///v1/traces"}, "OTEL_EXPORTER_OTLP_ENDPOINT must name a host"},
		// The TRACES_ variable wins, so it is the one checked.
		{OTLPSettings{Endpoint: "junk", TracesEndpoint: "http://collector:4318"}, ""},
		{OTLPSettings{Endpoint: "http://collector:4318", TracesEndpoint: "collector:4318"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT must be a URL"},
		// gRPC takes targets, not only URLs, but not what net/url refuses.
		{OTLPSettings{Protocol: "grpc", Endpoint: "collector:4317"}, ""},
		{OTLPSettings{Protocol: "grpc", Endpoint: "http://collector:4317"}, ""},
		{OTLPSettings{TracesProtocol: "grpc", Endpoint: "127.0.0.1:4317"}, "OTEL_EXPORTER_OTLP_ENDPOINT must be a URL (http://collector:4317), got \"127.0.0.1:4317\" (did you mean http://127.0.0.1:4317?)"},
		{OTLPSettings{Protocol: "grpc", Endpoint: "https://"}, "must name a host"},
		{OTLPSettings{Protocol: "http/json"}, "OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc"},
		{OTLPSettings{Protocol: "http/json", TracesProtocol: "http/protobuf"}, ""},
		{OTLPSettings{TracesProtocol: "GRPC"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL must be"},
		{OTLPSettings{Timeout: "junk"}, `OTEL_EXPORTER_OTLP_TIMEOUT must be a whole number of milliseconds above 0 (10000 is 10 s), got "junk"`},
		{OTLPSettings{Timeout: "10s"}, "OTEL_EXPORTER_OTLP_TIMEOUT must be"},
		{OTLPSettings{Timeout: "0"}, "OTEL_EXPORTER_OTLP_TIMEOUT must be"},
		{OTLPSettings{Timeout: "-5"}, "OTEL_EXPORTER_OTLP_TIMEOUT must be"},
		{OTLPSettings{Timeout: "junk", TracesTimeout: "5000"}, ""},
		{OTLPSettings{TracesTimeout: "1.5"}, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT must be"},
	} {
		err := tc.s.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v", tc.s, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: got %v, want %q", tc.s, err, tc.want)
		}
	}
	// Only the OTLP exporter's settings are checked when it is in use.
	bad := OTLPSettings{Endpoint: "127.0.0.1:4318"}
	if err := (TracingOptions{Exporter: ExporterConsole, OTLP: bad}).Validate(); err != nil {
		t.Errorf("console exporter: %v", err)
	}
	if _, err := NewTracerProvider(context.Background(), TracingOptions{OTLPEndpoint: "127.0.0.1:4318", OTLP: bad}); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_ENDPOINT") {
		t.Errorf("otlp exporter: %v", err)
	}
}

// TestSpanWriterNeverBlocksSpans ends spans on the console exporter
// writing through a span writer whose output never takes a byte (a pipe
// nobody reads): ending them returns, past the backlog they are dropped
// and counted, and the provider shuts down. When the output reads again,
// what it gets is spans only, one whole span a line.
func TestSpanWriterNeverBlocksSpans(t *testing.T) {
	r, w := io.Pipe()
	sw := NewSpanWriter(w)
	tp, err := NewTracerProvider(context.Background(), TracingOptions{Exporter: ExporterConsole, Console: sw})
	if err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", 64<<10)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for range 40 { // 2.5 MiB of spans, past LogBacklogBytes
			_, span := tp.Tracer("test").Start(context.Background(), "execute_tool text__transform")
			span.SetAttributes(attribute.String("big", big))
			span.End()
		}
	}()
	select {
	case <-ended:
	case <-time.After(30 * time.Second): // a hang guard, not a measure
		r.Close()
		t.Fatal("ending spans waits for stdout")
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := spansDropped(t, sw)["full"]; n == 0 {
		t.Error("no span counted as dropped")
	}
	// The reader reads again: the held spans come out, and nothing else.
	read := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); read <- b }()
	if err := sw.Close(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	out := <-read
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) == 0 || len(lines) >= 40 {
		t.Fatalf("%d lines out of 40 spans, 2.5 MiB through a 1 MiB backlog", len(lines))
	}
	for i, line := range lines {
		var span struct{ Name string }
		if err := json.Unmarshal([]byte(line), &span); err != nil || span.Name != "execute_tool text__transform" {
			t.Fatalf("line %d is not a whole span (%v): %.200s", i, err, line)
		}
	}
}

// spansDropped is toolsvc_console_spans_dropped_total by reason, gathered
// by a pedantic registry.
func spansDropped(t *testing.T, b *BufferedWriter) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(b)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "toolsvc_console_spans_dropped_total" {
			t.Errorf("unexpected metric %s", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}
