package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func tracedExec(t *testing.T, o Options, tools ...*Tool) (*Executor, *tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	o.Tracer = tp.Tracer("test")
	return newExec(t, o, tools...), exp, o.Tracer
}

func attrs(s tracetest.SpanStub) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func eventNames(s tracetest.SpanStub) []string {
	var out []string
	for _, e := range s.Events {
		out = append(out, e.Name)
	}
	return out
}

func TestExecuteSpans(t *testing.T) {
	failing := Func(func(context.Context, *Request) (any, error) { return nil, errors.New("disk on fire") })
	e, exp, _ := tracedExec(t, Options{}, tool("t__echo", ReadOnly, echo), tool("t__fail", SideEffecting, failing))

	mustExec(t, e, nil, &Call{ToolName: "t__echo", ToolCallID: "call_1", Arguments: json.RawMessage(`{"path":"secret.txt"}`)})
	mustExec(t, e, nil, &Call{ToolName: "t__echo", ToolCallID: "call_2", Arguments: json.RawMessage(`{"path":1}`)})
	mustExec(t, e, nil, &Call{ToolName: "t__fail", ToolCallID: "call_3", Arguments: json.RawMessage(`{"path":"x"}`)})
	mustExec(t, e, nil, &Call{ToolName: "t__nope", ToolCallID: "call_4"})

	spans := exp.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans", len(spans))
	}
	ok, invalid, failed, unknown := spans[0], spans[1], spans[2], spans[3]
	a := attrs(ok)
	if ok.Name != "execute_tool t__echo" || ok.SpanKind != trace.SpanKindInternal || ok.Status.Code == codes.Error {
		t.Errorf("ok span: %s %v %v", ok.Name, ok.SpanKind, ok.Status)
	}
	for k, want := range map[string]string{
		"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t__echo", "gen_ai.tool.call.id": "call_1",
		"gen_ai.tool.type": "builtin", "toolsvc.tool.tier": "read_only", "toolsvc.policy.decision": "allow",
	} {
		if a[k].AsString() != want {
			t.Errorf("ok span %s = %q, want %q", k, a[k].AsString(), want)
		}
	}
	if a["toolsvc.timeout_ms"].AsInt64() != 5000 || a["toolsvc.output.truncated"].Type() != attribute.BOOL {
		t.Errorf("ok span timeout/truncation: %v", a)
	}
	if _, has := a["error.type"]; has {
		t.Errorf("ok span has error.type")
	}
	for _, k := range []string{"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} {
		if _, has := a[k]; has {
			t.Errorf("content recorded without TraceContent: %s", k)
		}
	}
	if names := eventNames(ok); strings.Join(names, ",") != "policy_decision" {
		t.Errorf("ok span events: %v", names)
	}

	if a := attrs(invalid); a["error.type"].AsString() != "E_INVALID_ARGUMENTS" || invalid.Status.Code != codes.Error || !strings.Contains(strings.Join(eventNames(invalid), ","), "validation_failed") {
		t.Errorf("invalid span: %v %v %v", a, invalid.Status, eventNames(invalid))
	}
	if a := attrs(failed); a["error.type"].AsString() != "E_TOOL" || failed.Status.Code != codes.Error || a["toolsvc.tool.tier"].AsString() != "side_effecting" {
		t.Errorf("failed span: %v %v", a, failed.Status)
	}
	if a := attrs(unknown); unknown.Name != "execute_tool unknown" || a["gen_ai.tool.name"].AsString() != "unknown" || a["error.type"].AsString() != "E_TOOL_NOT_FOUND" {
		t.Errorf("unknown span: %s %v", unknown.Name, a)
	}
}

func TestExecuteSpanParentAndContent(t *testing.T) {
	e, exp, tracer := tracedExec(t, Options{TraceContent: true}, tool("t__echo", ReadOnly, echo))
	ctx, parent := tracer.Start(context.Background(), "POST /calls")
	if _, err := e.Execute(ctx, Anonymous(), &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"notes.md"}`)}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	s := exp.GetSpans()[0]
	if s.Parent.SpanID() != parent.SpanContext().SpanID() || s.SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("execute_tool is not a child of the request span")
	}
	a := attrs(s)
	if a["gen_ai.tool.call.arguments"].AsString() != `{"path":"notes.md"}` || a["gen_ai.tool.call.result"].AsString() != `{"path":"notes.md"}` {
		t.Errorf("content: %v", a)
	}
}

// ctxHandler keeps the contexts records are logged with.
type ctxHandler struct {
	mu   sync.Mutex
	ctxs []context.Context
	msgs []string
}

func (h *ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ctxs, h.msgs = append(h.ctxs, ctx), append(h.msgs, r.Message)
	return nil
}
func (h *ctxHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *ctxHandler) WithGroup(string) slog.Handler      { return h }

func TestAuditLineCarriesSpan(t *testing.T) {
	h := &ctxHandler{}
	e, exp, _ := tracedExec(t, Options{Logger: slog.New(h)}, tool("t__echo", ReadOnly, echo))
	mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a"}`)})
	if len(h.msgs) != 1 || h.msgs[0] != "tool call" {
		t.Fatalf("log: %v", h.msgs)
	}
	if got, want := trace.SpanContextFromContext(h.ctxs[0]).SpanID(), exp.GetSpans()[0].SpanContext.SpanID(); got != want {
		t.Errorf("the audit line is logged with span %s, want the execute_tool span %s", got, want)
	}
}

func TestMetricLabelsStayBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newExec(t, Options{Metrics: NewMetrics(reg)}, tool("t__echo", ReadOnly, echo))
	mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a"}`)})
	mustExec(t, e, nil, &Call{ToolName: "invented__0"})
	before, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 500; i++ {
		mustExec(t, e, nil, &Call{ToolName: fmt.Sprintf("invented__%d", i), Arguments: json.RawMessage(`{}`)})
	}
	mustExec(t, e, nil, &Call{ToolName: strings.Repeat("x", 300)})
	after, err := testutil.GatherAndCount(reg)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("invented names grew the series from %d to %d", before, after)
	}
	if n := testutil.ToFloat64(e.metrics.calls.WithLabelValues(UnknownTool, "", "error", "E_TOOL_NOT_FOUND")); n != 501 {
		t.Errorf("unknown calls counted %v, want 501", n)
	}
	families, _ := reg.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" && l.GetValue() != "t__echo" && l.GetValue() != UnknownTool {
					t.Errorf("%s has tool label %q", f.GetName(), l.GetValue())
				}
			}
		}
	}
}

func TestDurationExemplar(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, _, tracer := tracedExec(t, Options{Metrics: NewMetrics(reg)}, tool("t__echo", ReadOnly, echo))
	ctx, span := tracer.Start(context.Background(), "request")
	if _, err := e.Execute(ctx, Anonymous(), &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a"}`)}); err != nil {
		t.Fatal(err)
	}
	span.End()
	// An unsampled call records no exemplar.
	mustExec(t, newExec(t, Options{Metrics: NewMetrics(prometheus.NewRegistry())}, tool("t__echo", ReadOnly, echo)), nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a"}`)})

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var found string
	for _, f := range families {
		if f.GetName() != "toolsvc_tool_call_duration_seconds" {
			continue
		}
		for _, b := range f.GetMetric()[0].GetHistogram().GetBucket() {
			if ex := b.GetExemplar(); ex != nil {
				for _, l := range ex.GetLabel() {
					if l.GetName() == "trace_id" {
						found = l.GetValue()
					}
				}
			}
		}
	}
	if found != span.SpanContext().TraceID().String() {
		t.Errorf("exemplar trace_id %q, want %s", found, span.SpanContext().TraceID())
	}
}

func TestApprovalsPendingGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.SetApprovalsPending(3)
	if n := testutil.ToFloat64(m.approvals); n != 3 {
		t.Errorf("approvals pending %v", n)
	}
	var none *Metrics
	none.SetApprovalsPending(1) // no metrics: no panic
}

// TestToolSeriesCountEveryCall: the series looked up once per tool count
// what the labelled lookups counted, for ok calls and the others alike,
// and a tool no call has touched exposes no call or decision series.
func TestToolSeriesCountEveryCall(t *testing.T) {
	reg := prometheus.NewRegistry()
	fail := func(ctx context.Context, r *Request) (any, error) { return nil, ToolError("no", "") }
	e := newExec(t, Options{Metrics: NewMetrics(reg)}, tool("t__echo", ReadOnly, echo), tool("t__fail", ReadOnly, fail), tool("t__idle", ReadOnly, echo))
	for range 3 {
		mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a"}`)})
	}
	mustExec(t, e, nil, &Call{ToolName: "t__fail", Arguments: json.RawMessage(`{"path":"a"}`)})
	m := e.metrics
	for _, c := range []struct {
		name string
		got  prometheus.Collector
		want float64
	}{
		{"ok calls of t__echo", m.calls.WithLabelValues("t__echo", "read_only", "ok", ""), 3},
		{"failed calls of t__fail", m.calls.WithLabelValues("t__fail", "read_only", "error", "E_TOOL"), 1},
		{"allowed t__echo", m.decisions.WithLabelValues("t__echo", "allow"), 3},
		{"allowed t__fail", m.decisions.WithLabelValues("t__fail", "allow"), 1},
		{"t__echo in flight", m.inFlight.WithLabelValues("t__echo"), 0},
	} {
		if got := testutil.ToFloat64(c.got); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.duration); n != 2 {
		t.Errorf("%d duration series, want 2 (t__echo ok, t__fail error)", n)
	}
	families, _ := reg.Gather()
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetValue() == "t__idle" && (f.GetName() == "toolsvc_tool_calls_total" || f.GetName() == "toolsvc_policy_decisions_total" || f.GetName() == "toolsvc_tool_call_duration_seconds") {
					t.Errorf("%s has a series for t__idle, which no call touched", f.GetName())
				}
			}
		}
	}
}
