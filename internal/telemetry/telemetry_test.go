package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolsvc/toolsvc/internal/logtest"
)

func TestNewRegistry(t *testing.T) {
	reg := NewRegistry("1.2.3")
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
		if f.GetName() == "toolsvc_build_info" {
			m := f.GetMetric()[0]
			if m.GetGauge().GetValue() != 1 || !hasLabel(m.GetLabel(), "version", "1.2.3") {
				t.Errorf("build info: %v", m)
			}
		}
	}
	for _, want := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes", "toolsvc_build_info"} {
		if !got[want] {
			t.Errorf("%s missing from the registry", want)
		}
	}
	// Its own registry: registering the same collector twice fails here and
	// does not touch the default registry.
	if err := reg.Register(prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolsvc_build_info", Help: "x"})); err == nil {
		t.Error("a duplicate metric registered")
	}
}

func hasLabel(labels []*dto.LabelPair, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestSampler(t *testing.T) {
	for _, tt := range []struct {
		name, arg, want string
	}{
		{"", "", "ParentBased{root:AlwaysOnSampler"},
		{"parentbased_always_on", "", "ParentBased{root:AlwaysOnSampler"},
		{"always_on", "", "AlwaysOnSampler"},
		{"always_off", "", "AlwaysOffSampler"},
		{"traceidratio", "0.25", "TraceIDRatioBased{0.25}"},
		{"traceidratio", "", "TraceIDRatioBased{1}"},
		{"parentbased_always_off", "", "ParentBased{root:AlwaysOffSampler"},
		{"parentbased_traceidratio", "0.5", "ParentBased{root:TraceIDRatioBased{0.5}"},
		// The argument of a sampler without one is ignored, as the SDK does.
		{"always_on", "junk", "AlwaysOnSampler"},
	} {
		s, err := Sampler(tt.name, tt.arg)
		if err != nil {
			t.Errorf("%s %s: %v", tt.name, tt.arg, err)
			continue
		}
		if !strings.HasPrefix(s.Description(), tt.want) {
			t.Errorf("%s %s: %s, want %s", tt.name, tt.arg, s.Description(), tt.want)
		}
	}
	for _, bad := range [][2]string{{"sometimes", ""}, {"traceidratio", "2"}, {"parentbased_traceidratio", "half"}, {"traceidratio", "-0.1"}} {
		if _, err := Sampler(bad[0], bad[1]); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestExporterChoice(t *testing.T) {
	for _, tt := range []struct {
		o    TracingOptions
		want string
	}{
		{TracingOptions{}, ExporterNone},
		{TracingOptions{OTLPEndpoint: "http://collector:4318"}, ExporterOTLP},
		{TracingOptions{Exporter: "console", OTLPEndpoint: "http://collector:4318"}, ExporterConsole},
		{TracingOptions{Exporter: "none", OTLPEndpoint: "http://collector:4318"}, ExporterNone},
	} {
		if got := tt.o.ExporterName(); got != tt.want {
			t.Errorf("%+v: %s, want %s", tt.o, got, tt.want)
		}
		if err := tt.o.Validate(); err != nil {
			t.Errorf("%+v: %v", tt.o, err)
		}
	}
	if _, err := NewTracerProvider(context.Background(), TracingOptions{Exporter: "zipkin"}); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("unknown exporter: %v", err)
	}
	if _, err := NewTracerProvider(context.Background(), TracingOptions{Sampler: "maybe"}); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER") {
		t.Errorf("unknown sampler: %v", err)
	}
}

func TestConsoleExporter(t *testing.T) {
	var out logtest.Buffer
	tp, err := NewTracerProvider(context.Background(), TracingOptions{Exporter: "console", Console: &out, ServiceName: "toolsvc-test", ServiceVersion: "9.9.9"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "execute_tool text__transform", trace.WithAttributes(attribute.String("gen_ai.tool.name", "text__transform")))
	span.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Name       string
		Attributes []struct {
			Key   string
			Value struct{ Value any }
		}
		Resource []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
		t.Fatalf("console output is not one JSON span: %v\n%s", err, out.String())
	}
	if got.Name != "execute_tool text__transform" || len(got.Attributes) != 1 || got.Attributes[0].Value.Value != "text__transform" {
		t.Errorf("span: %+v", got)
	}
	res := map[string]any{}
	for _, kv := range got.Resource {
		res[kv.Key] = kv.Value.Value
	}
	if res["service.name"] != "toolsvc-test" || res["service.version"] != "9.9.9" {
		t.Errorf("resource: %v", res)
	}
}

func TestNoneExporterStillMakesIDs(t *testing.T) {
	tp, err := NewTracerProvider(context.Background(), TracingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Shutdown(context.Background())
	_, span := tp.Tracer("test").Start(context.Background(), "x")
	defer span.End()
	// Nothing receives spans, so none is recorded, but ids still exist.
	if !span.SpanContext().IsValid() || span.IsRecording() {
		t.Errorf("span context: %+v, recording %v", span.SpanContext(), span.IsRecording())
	}
	// An incoming trace keeps its trace id.
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled, Remote: true})
	_, child := tp.Tracer("test").Start(trace.ContextWithRemoteSpanContext(context.Background(), parent), "y")
	defer child.End()
	if child.SpanContext().TraceID() != parent.TraceID() || !child.SpanContext().IsValid() {
		t.Errorf("child of an incoming trace: %+v", child.SpanContext())
	}
}

// TestOTLPExporter sends spans to an OTLP/HTTP receiver on loopback, the
// way a collector receives them. The OTLP exporter reads its settings from
// the process environment, so the test sets them there.
func TestOTLPExporter(t *testing.T) {
	got := make(chan *coltrace.ExportTraceServiceRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("request: %s %s %s", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		req := &coltrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			t.Errorf("body: %v", err)
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")

	tp, err := NewTracerProvider(context.Background(), TracingOptions{OTLPEndpoint: srv.URL, ServiceVersion: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("test").Start(context.Background(), "execute_tool json__query")
	span.End()
	// Shutdown flushes the batch.
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	req := <-got
	rs := req.GetResourceSpans()
	if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || rs[0].GetScopeSpans()[0].GetSpans()[0].GetName() != "execute_tool json__query" {
		t.Fatalf("exported: %v", req)
	}
	res := map[string]string{}
	for _, kv := range rs[0].GetResource().GetAttributes() {
		res[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	if res["service.name"] != "toolsvc" || res["service.version"] != "1.0.0" || res["deployment.environment.name"] != "test" {
		t.Errorf("resource: %v", res)
	}
}

func TestLoggerTraceIDs(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	ctx, span := tp.Tracer("test").Start(context.Background(), "request")
	var out bytes.Buffer
	log := NewLogger(&out, LogOptions{Level: slog.LevelDebug}).With("component", "test")
	log.InfoContext(ctx, "inside")
	log.Info("outside")
	span.End()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("log: %s", out.String())
	}
	var in, outside map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &in)
	_ = json.Unmarshal([]byte(lines[1]), &outside)
	sc := span.SpanContext()
	if in["trace_id"] != sc.TraceID().String() || in["span_id"] != sc.SpanID().String() || in["component"] != "test" {
		t.Errorf("inside a span: %v", in)
	}
	if _, ok := outside["trace_id"]; ok {
		t.Errorf("outside a span: %v", outside)
	}

	out.Reset()
	NewLogger(&out, LogOptions{Format: "text"}).InfoContext(ctx, "inside")
	if !strings.Contains(out.String(), "trace_id="+sc.TraceID().String()) || !strings.HasPrefix(out.String(), "time=") {
		t.Errorf("text log: %s", out.String())
	}
}

func TestRedactSecrets(t *testing.T) {
	var out bytes.Buffer
	log := NewLogger(&out, LogOptions{Level: slog.LevelDebug})
	const secret = "s3cr3t-value-42"
	log.Info("request",
		"Authorization", "Bearer "+secret,
		"api_key", secret,
		"X-Api-Key", secret,
		"githubToken", secret,
		"header", "bearer "+secret,
		"basic", "Basic "+secret,
		slog.Group("headers", "Proxy-Authorization", secret, "Cookie", secret, "Accept", "text/plain"),
		"db.password", secret,
		"client_secret", secret,
		"tool", "fs__read",
	)
	log.With("token", secret).Warn("with")
	// A value resolved from a LogValuer, attributes and groups given to
	// With and WithGroup, and a message that is a credential.
	log.WithGroup("g").With("password", secret, slog.Group("h", "cookie", secret)).Info("Bearer "+secret,
		"resolved", logValuer{slog.GroupValue(slog.String("api_key", secret), slog.String("kept", "yes"))},
		"auth", logValuer{slog.StringValue("Basic " + secret)})
	s := out.String()
	if strings.Contains(s, secret) {
		t.Errorf("a secret reached the log:\n%s", s)
	}
	if strings.Count(s, Redacted) != 16 {
		t.Errorf("want 16 redactions:\n%s", s)
	}
	if !strings.Contains(s, `"kept":"yes"`) {
		t.Errorf("an ordinary attribute of a resolved group was redacted:\n%s", s)
	}
	if !strings.Contains(s, `"tool":"fs__read"`) || !strings.Contains(s, `"Accept":"text/plain"`) {
		t.Errorf("ordinary attributes were redacted:\n%s", s)
	}
}

// TestRedactCredentialMessageWithPlainAttrs: a message that is a
// credential is redacted though every attribute beside it is ordinary.
func TestRedactCredentialMessageWithPlainAttrs(t *testing.T) {
	var out bytes.Buffer
	const secret = "s3cr3t-value-42"
	NewLogger(&out, LogOptions{}).Info("Bearer "+secret, "tool", "fs__read", "n", 3)
	if s := out.String(); strings.Contains(s, secret) || !strings.Contains(s, `"msg":"`+Redacted+`"`) || !strings.Contains(s, `"tool":"fs__read"`) {
		t.Errorf("log line: %s", s)
	}
}

type logValuer struct{ v slog.Value }

func (l logValuer) LogValue() slog.Value { return l.v }

type countingValuer struct{ n *int }

func (c countingValuer) LogValue() slog.Value { *c.n++; return slog.StringValue("v") }

// TestLogValuerResolvedOnce: the redactor resolves a LogValuer, at the
// top or in a group, and the handler does not resolve it again.
func TestLogValuerResolvedOnce(t *testing.T) {
	var out bytes.Buffer
	log := NewLogger(&out, LogOptions{Level: slog.LevelInfo})
	var top, nested int
	log.Info("x", "top", countingValuer{&top}, slog.Group("g", "nested", countingValuer{&nested}))
	if top != 1 || nested != 1 {
		t.Errorf("LogValue ran %d and %d times, want once each", top, nested)
	}
	if !strings.Contains(out.String(), `"top":"v","g":{"nested":"v"}`) {
		t.Errorf("log: %s", out.String())
	}
}

// TestRedactorRemembersVerdicts: the logger's remembered verdicts are
// RedactSecrets' own, for keys seen before, keys beyond the ones it keeps,
// and credentials in the values of keys it knows to be harmless.
func TestRedactorRemembersVerdicts(t *testing.T) {
	r := newRedactor()
	r.maxKeys = 3
	keys := []string{"tool", "Authorization", "header", "api_key", "caller", "X-Api-Key", "durationMs", "client_secret"}
	values := []slog.Value{slog.StringValue("plain"), slog.StringValue("Bearer abc.def"), slog.IntValue(3)}
	for round := range 3 {
		for _, k := range keys {
			for _, v := range values {
				a := slog.Attr{Key: k, Value: v}
				if got, want := r.attr(a), RedactSecrets(nil, a); !got.Equal(want) {
					t.Fatalf("round %d: %s=%v became %v, want %v", round, k, v, got, want)
				}
			}
		}
	}
	if n := len(*r.secret.Load()); n != 3 {
		t.Errorf("remembered %d keys, want the cap of 3", n)
	}
}

// TestLoggerLevels: the level of every line reads as slog names it, in
// both formats, custom levels included (the redactor hands it over as a
// string).
func TestLoggerLevels(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		log := NewLogger(&buf, LogOptions{Level: slog.LevelDebug, Format: format})
		for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelInfo + 2, slog.LevelError + 4} {
			buf.Reset()
			log.Log(context.Background(), l, "x", "level", "not the level")
			want := `"level":"` + l.String() + `"`
			if format == "text" {
				want = "level=" + l.String() + " "
			}
			if got := buf.String(); !strings.Contains(got, want) || strings.Count(got, "not the level") != 1 {
				t.Errorf("%s, %v: %s; want %s once and the attribute named level kept", format, l, got, want)
			}
		}
	}
}
