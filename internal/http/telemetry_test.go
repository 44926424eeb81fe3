package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/telemetry"
)

// tracedEnv is newEnv with the HTTP metrics, tracing into an in-memory
// exporter, and the service's logger at debug level.
func tracedEnv(t *testing.T, mutate ...func(*Deps, *registry.Options)) (*env, *tracetest.InMemoryExporter, *logtest.Buffer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	logs := &logtest.Buffer{}
	log := telemetry.NewLogger(logs, telemetry.LogOptions{Level: slog.LevelDebug})
	e := newEnv(t, append([]func(*Deps, *registry.Options){func(d *Deps, o *registry.Options) {
		d.TracerProvider = tp
		d.Logger = log
		o.Logger = log
		o.Tracer = tp.Tracer("toolsvc")
	}}, mutate...)...)
	return e, exp, logs
}

func spanAttrs(s tracetest.SpanStub) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func findSpan(t *testing.T, spans tracetest.SpanStubs, name string) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.Name == name {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	t.Fatalf("no span %q among %v", name, names)
	return tracetest.SpanStub{}
}

func TestTraceContinuesTraceparent(t *testing.T) {
	e, exp, logs := tracedEnv(t)
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	h := map[string]string{"Content-Type": "application/json", "traceparent": "00-" + traceID + "-" + parentID + "-01"}
	r := e.do("POST", "/calls", []byte(`{"toolName":"text__transform","toolCallId":"call_7","arguments":{"operation":"upper","text":"a"}}`), h, true)
	if r.status != 200 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	spans := exp.GetSpans()
	server := findSpan(t, spans, "POST /calls")
	tool := findSpan(t, spans, "execute_tool text__transform")
	if server.SpanKind != trace.SpanKindServer || server.SpanContext.TraceID().String() != traceID || server.Parent.SpanID().String() != parentID || !server.Parent.IsRemote() {
		t.Errorf("server span does not continue the traceparent: kind %v trace %s parent %s", server.SpanKind, server.SpanContext.TraceID(), server.Parent.SpanID())
	}
	if tool.Parent.SpanID() != server.SpanContext.SpanID() || tool.SpanKind != trace.SpanKindInternal {
		t.Errorf("execute_tool is not a child of the server span")
	}
	sa := spanAttrs(server)
	if sa["http.route"].AsString() != "/calls" || sa["http.request.method"].AsString() != "POST" || sa["http.response.status_code"].AsInt64() != 200 {
		t.Errorf("server span attributes: %v", sa)
	}
	ta := spanAttrs(tool)
	if ta["gen_ai.operation.name"].AsString() != "execute_tool" || ta["gen_ai.tool.call.id"].AsString() != "call_7" || ta["toolsvc.policy.decision"].AsString() != "allow" {
		t.Errorf("tool span attributes: %v", ta)
	}

	// Every log line of the request carries its trace, and the audit line
	// the execute_tool span.
	var audit, access map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", line)
		}
		switch m["msg"] {
		case "tool call":
			audit = m
		case "http request":
			access = m
		}
	}
	if audit["trace_id"] != traceID || audit["span_id"] != tool.SpanContext.SpanID().String() {
		t.Errorf("audit line: %v", audit)
	}
	if access["trace_id"] != traceID || access["span_id"] != server.SpanContext.SpanID().String() {
		t.Errorf("access line: %v", access)
	}
	for _, k := range []string{"caller", "tool", "tier", "decision", "status", "code", "durationMs", "argumentsDigest"} {
		if _, ok := audit[k]; !ok {
			t.Errorf("audit line lacks %s: %v", k, audit)
		}
	}
}

func TestTraceErrorsAndRoutes(t *testing.T) {
	e, exp, _ := tracedEnv(t)
	e.call("/calls", `{"toolName":"test__sleep","arguments":{}}`)
	e.call("/calls", `{"toolName":"text__transfrom","arguments":{}}`)
	e.do("GET", "/tools/json__query", nil, nil, true)
	e.do("GET", "/no/such/path", nil, nil, false)
	e.do("GET", "/healthz", nil, nil, true)
	e.do("GET", "/metrics", nil, nil, true)
	spans := exp.GetSpans()

	sleep := findSpan(t, spans, "execute_tool test__sleep")
	if sleep.Status.Code != codes.Error || spanAttrs(sleep)["error.type"].AsString() != "E_TIMEOUT" {
		t.Errorf("timed out call: %v %v", sleep.Status, spanAttrs(sleep))
	}
	unknown := findSpan(t, spans, "execute_tool unknown")
	if unknown.Status.Code != codes.Error || spanAttrs(unknown)["error.type"].AsString() != "E_TOOL_NOT_FOUND" {
		t.Errorf("unknown tool: %v %v", unknown.Status, spanAttrs(unknown))
	}
	if s := findSpan(t, spans, "GET /tools/{name}"); spanAttrs(s)["http.route"].AsString() != "/tools/{name}" {
		t.Errorf("route of /tools/json__query: %v", spanAttrs(s))
	}
	if s := findSpan(t, spans, "GET "+UnmatchedRoute); spanAttrs(s)["http.response.status_code"].AsInt64() != 404 || s.Status.Code == codes.Error {
		t.Errorf("unmatched: %v %v (a 4xx is the client's error, not the server's)", s.Status, spanAttrs(s))
	}
	if s := findSpan(t, spans, "GET /tools/{name}"); spanAttrs(s)["url.path"].AsString() != "/tools/json__query" || spanAttrs(s)["client.address"].AsString() == "" ||
		spanAttrs(s)["network.protocol.version"].AsString() != "1.1" || s.InstrumentationScope.Name != tracerName {
		t.Errorf("request attributes of GET /tools/json__query: %v, scope %q", spanAttrs(s), s.InstrumentationScope.Name)
	}
	for _, s := range spans {
		if strings.Contains(s.Name, "healthz") || strings.Contains(s.Name, "metrics") {
			t.Errorf("probe traced: %s", s.Name)
		}
	}
}

func TestHTTPMetricsUseRoutePatterns(t *testing.T) {
	e, _, _ := tracedEnv(t, func(d *Deps, o *registry.Options) { d.Registerer = d.Gatherer.(*prometheus.Registry) })
	probe := func(from, to int) {
		for i := from; i < to; i++ {
			e.do("GET", fmt.Sprintf("/scan/%d/wp-login.php", i), nil, nil, false)
			e.call("/calls", fmt.Sprintf(`{"toolName":"made__up%d","arguments":{}}`, i))
			e.do("GET", fmt.Sprintf("/tools/made__up%d", i), nil, nil, true)
		}
	}
	e.do("GET", "/tools", nil, nil, true)
	e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`)
	e.do("FROB", "/tools", nil, nil, false)
	probe(0, 3)
	before, err := testutil.GatherAndCount(e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	probe(3, 300)
	after, err := testutil.GatherAndCount(e.metrics)
	if err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("invented paths and tool names grew the series from %d to %d", before, after)
	}
	routes := map[string]bool{}
	families, _ := e.metrics.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "route":
					routes[l.GetValue()] = true
				case "method":
					if l.GetValue() != "GET" && l.GetValue() != "POST" && l.GetValue() != "_OTHER" {
						t.Errorf("%s method %q", f.GetName(), l.GetValue())
					}
				case "tool":
					if _, registered := e.srv.deps.Executor.Registry().Lookup(l.GetValue()); !registered && l.GetValue() != registry.UnknownTool {
						t.Errorf("%s carries the unregistered tool label %q", f.GetName(), l.GetValue())
					}
				}
			}
		}
	}
	for r := range routes {
		if r != "/tools" && r != "/tools/{name}" && r != "/calls" && r != UnmatchedRoute {
			t.Errorf("route label %q", r)
		}
	}
	if n := seriesValue(t, e.metrics, "toolsvc_http_requests_total", map[string]string{"method": "GET", "route": "/tools/{name}", "code": "404"}); n != 300 {
		t.Errorf("GET /tools/{name} 404 counted %v, want 300", n)
	}
	if n := seriesValue(t, e.metrics, "toolsvc_http_requests_total", map[string]string{"method": "_OTHER", "route": UnmatchedRoute, "code": "405"}); n != 1 {
		t.Errorf("FROB /tools counted %v, want 1", n)
	}
}

// seriesValue is the value of the counter series of family name with
// exactly labels.
func seriesValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func TestExemplarsInOpenMetrics(t *testing.T) {
	e, exp, _ := tracedEnv(t, func(d *Deps, o *registry.Options) { d.Registerer = d.Gatherer.(*prometheus.Registry) })
	e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`)
	traceID := findSpan(t, exp.GetSpans(), "execute_tool text__transform").SpanContext.TraceID().String()
	// Plain request: the contract validator cannot decode OpenMetrics.
	req, _ := http.NewRequest("GET", e.ts.URL+"/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text; version=1.0.0")
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/openmetrics-text") {
		t.Fatalf("content type %s", resp.Header.Get("Content-Type"))
	}
	for _, family := range []string{"toolsvc_tool_call_duration_seconds_bucket", "toolsvc_http_request_duration_seconds_bucket"} {
		found := false
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, family+"{") && strings.Contains(line, `# {trace_id="`+traceID+`"}`) {
				found = true
			}
		}
		if !found {
			t.Errorf("no exemplar with trace %s on %s:\n%s", traceID, family, body)
		}
	}
	text := e.do("GET", "/metrics", nil, nil, true)
	if bytes.Contains(text.body, []byte("trace_id")) {
		t.Error("the classic text format carries exemplars")
	}
}

func TestSecretsNeverLogged(t *testing.T) {
	const token = "tok-9f8e7d6c5b4a"
	e, exp, logs := tracedEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{token: {ID: "gateway", Scopes: []registry.Scope{registry.ScopeCall}}}
	})
	auth := map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	e.do("POST", "/calls", []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"password hunter2"}}`), auth, true)
	e.do("POST", "/calls", []byte(`{"toolName":"test__panic","arguments":{"n":1}}`), auth, true)
	e.do("POST", "/calls", []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"password hunter2","bogus":"`+token+`"}}`), auth, true)
	e.do("GET", "/tools", nil, map[string]string{"Authorization": "Bearer " + token + "x"}, false)
	e.do("GET", "/tools", nil, map[string]string{"Authorization": "Basic " + token}, false)
	e.do("POST", "/calls", []byte(`{"toolName":`), auth, false)
	out := logs.String()
	if !strings.Contains(out, `"msg":"tool call"`) || !strings.Contains(out, `"caller":"gateway"`) {
		t.Fatalf("no audit line:\n%s", out)
	}
	for _, secret := range []string{token, "hunter2"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q reached the log:\n%s", secret, out)
		}
		for _, s := range exp.GetSpans() {
			b, _ := json.Marshal(s.Attributes)
			ev, _ := json.Marshal(s.Events)
			if bytes.Contains(b, []byte(secret)) || bytes.Contains(ev, []byte(secret)) {
				t.Errorf("%q reached span %s", secret, s.Name)
			}
		}
	}
}

// TestApprovedCallTraced follows a call that waits for approval: its span
// records the ask, and the approved run is an execute_tool span under the
// approver's request.
func TestApprovedCallTraced(t *testing.T) {
	st := openStore(t)
	e, exp, _ := tracedEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	approvalID := e.askApproval("call_p")
	asked := findSpan(t, exp.GetSpans(), "execute_tool test__priv")
	if a := spanAttrs(asked); a["toolsvc.policy.decision"].AsString() != "ask" {
		t.Errorf("pending call's span: %v", a)
	}
	exp.Reset()
	if r := e.do("POST", "/approvals/"+approvalID, []byte(`{"decision":"approve","reason":"fine"}`), jsonCT, true); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	spans := exp.GetSpans()
	server := findSpan(t, spans, "POST /approvals/{id}")
	ran := findSpan(t, spans, "execute_tool test__priv")
	if ran.Parent.SpanID() != server.SpanContext.SpanID() || ran.SpanKind != trace.SpanKindInternal {
		t.Errorf("the approved run is not an execute_tool span under POST /approvals/{id}")
	}
	a := spanAttrs(ran)
	for k, want := range map[string]string{"gen_ai.tool.name": "test__priv", "gen_ai.tool.call.id": "call_p", "gen_ai.tool.type": "builtin",
		"toolsvc.tool.tier": "privileged", "toolsvc.policy.decision": "allow"} {
		if a[k].AsString() != want {
			t.Errorf("approved run %s = %q, want %q", k, a[k].AsString(), want)
		}
	}
}

// TestCallRecordCarriesTraceID: the record of a call made with a
// traceparent carries that trace id, while it waits for approval and once
// the approved run (under the approver's own trace) has ended.
func TestCallRecordCarriesTraceID(t *testing.T) {
	st := openStore(t)
	e, _, _ := tracedEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	const traceID, approverTrace = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c"
	traced := func(id string) map[string]string {
		return map[string]string{"Content-Type": "application/json", "traceparent": "00-" + id + "-00f067aa0ba902b7-01"}
	}
	r := e.do("POST", "/calls", []byte(`{"toolName":"test__priv","toolCallId":"call_t","arguments":{"n":1}}`), traced(traceID), true)
	var res registry.Result
	r.json(t, &res)
	if r.status != 202 || res.Approval == nil {
		t.Fatalf("privileged call: %d %s", r.status, r.body)
	}
	rec, err := st.GetCall(t.Context(), registry.Anonymous().ID, "call_t")
	if err != nil || rec.State != registry.CallPendingApproval || rec.TraceID != traceID {
		t.Fatalf("pending record = %+v, %v; want trace id %s", rec, err, traceID)
	}
	if r := e.do("POST", "/approvals/"+res.Approval.ID, []byte(`{"decision":"approve"}`), traced(approverTrace), true); r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if rec, err := st.GetCall(t.Context(), registry.Anonymous().ID, "call_t"); err != nil || rec.State != registry.CallDone || rec.TraceID != traceID {
		t.Errorf("approved record = %+v, %v; want done with the caller's trace id %s", rec, err, traceID)
	}

	// A recorded call that runs at once.
	r = e.do("POST", "/calls", []byte(`{"toolName":"text__transform","toolCallId":"call_r","record":true,"arguments":{"operation":"upper","text":"a"}}`), traced(traceID), true)
	if r.status != 200 {
		t.Fatalf("recorded call: %d %s", r.status, r.body)
	}
	if rec, err := st.GetCall(t.Context(), registry.Anonymous().ID, "call_r"); err != nil || rec.State != registry.CallDone || rec.TraceID != traceID {
		t.Errorf("record = %+v, %v; want done with trace id %s", rec, err, traceID)
	}
}

// TestOneLogLinePerCall: at info level a call the executor answered
// writes one line, its audit line, which carries the request id the
// client got; a call refused before the executor keeps its access line.
func TestOneLogLinePerCall(t *testing.T) {
	logs := &logtest.Buffer{}
	log := telemetry.NewLogger(logs, telemetry.LogOptions{Level: slog.LevelInfo})
	e := newEnv(t, func(d *Deps, o *registry.Options) { d.Logger = log; o.Logger = log })
	lines := func() []map[string]any {
		var out []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("log line is not JSON: %q", line)
			}
			out = append(out, m)
		}
		return out
	}
	h := map[string]string{"Content-Type": "application/json", "X-Request-Id": "req-one-line"}
	r := e.do("POST", "/calls", []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`), h, true)
	if r.status != 200 || r.header.Get("X-Request-Id") != "req-one-line" {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	got := lines()
	if len(got) != 1 || got[0]["msg"] != "tool call" || got[0]["requestId"] != "req-one-line" {
		t.Fatalf("log of one call: %v, want only its audit line with requestId req-one-line", got)
	}
	for _, k := range []string{"caller", "tool", "tier", "toolCallId", "decision", "rule", "status", "code", "durationMs", "argumentsDigest"} {
		if _, ok := got[0][k]; !ok {
			t.Errorf("audit line lacks %s: %v", k, got[0])
		}
	}
	logs.Reset()
	h["X-Request-Id"] = "req-bad-body"
	if r := e.do("POST", "/calls", []byte(`{"toolName":`), h, false); r.status != 400 {
		t.Fatalf("bad body: %d %s", r.status, r.body)
	}
	found := false
	for _, m := range lines() {
		if m["msg"] == "http request" && m["requestId"] == "req-bad-body" && m["status"] == float64(400) && m["route"] == "/calls" {
			found = true
		}
	}
	if !found {
		t.Errorf("no access line for a call refused with 400:\n%s", logs)
	}
}

// What a client writes into a span's attributes is bounded: a span keeps
// them until it is exported, so a slow collector would otherwise hold
// every request's headers whole.
func TestRequestAttributesBounded(t *testing.T) {
	e, exp, _ := tracedEnv(t)
	long := strings.Repeat("é", 100000) // 200 KB, cut on a character boundary
	e.do("GET", "/no/"+strings.Repeat("p", 100000), nil, map[string]string{"User-Agent": long, "X-Forwarded-For": long + ", 10.0.0.1"}, false)
	s := findSpan(t, exp.GetSpans(), "GET "+UnmatchedRoute)
	for _, k := range []string{"user_agent.original", "client.address", "url.path"} {
		v := spanAttrs(s)[k].AsString()
		if len(v) == 0 || len(v) > maxAttrBytes || !utf8.ValidString(v) {
			t.Errorf("%s: %d bytes (valid UTF-8: %v), want 1 to %d", k, len(v), utf8.ValidString(v), maxAttrBytes)
		}
	}
	if ua := spanAttrs(s)["user_agent.original"].AsString(); !strings.HasPrefix(long, ua) {
		t.Errorf("user agent is not a prefix of the header: %.40q", ua)
	}
}
