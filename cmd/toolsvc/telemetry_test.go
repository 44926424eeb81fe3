package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// startTraced runs toolsvc with the console span exporter and returns its
// base URL, its stdout (the spans) and its stderr (the log).
func startTraced(t *testing.T, extra ...string) (string, *logtest.Buffer, *logtest.Buffer) {
	t.Helper()
	addr := freeAddr(t)
	environ := append([]string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_LOG_FLUSH_INTERVAL=0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(), "OTEL_TRACES_EXPORTER=console"}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	stdout, stderr := &logtest.Buffer{}, &logtest.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"toolsvc"}, environ, stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return after cancel")
		}
	})
	for i := 0; ; i++ {
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if i > 500 {
			t.Fatalf("not healthy:\n%s", stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return "http://" + addr, stdout, stderr
}

type consoleSpan struct {
	Name        string
	SpanKind    int
	SpanContext struct{ TraceID, SpanID string }
	Parent      struct{ TraceID, SpanID string }
	Attributes  []struct {
		Key   string
		Value struct{ Value any }
	}
	Events []struct{ Name string }
	Status struct{ Code string }
}

func (s consoleSpan) attr(k string) any {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value.Value
		}
	}
	return nil
}

func spansByName(t *testing.T, out string) map[string]consoleSpan {
	t.Helper()
	spans := map[string]consoleSpan{}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s consoleSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("console output line is not a span: %v\n%s", err, sc.Text())
		}
		spans[s.Name] = s
	}
	return spans
}

func TestConsoleTracing(t *testing.T) {
	base, stdout, stderr := startTraced(t, "TOOLSVC_TRACE_CONTENT=true")
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	req, _ := http.NewRequest("POST", base+"/calls", strings.NewReader(`{"toolName":"text__transform","toolCallId":"call_42","arguments":{"operation":"upper","text":"hi"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+traceID+"-b7ad6b7169203331-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var spans map[string]consoleSpan
	for i := 0; ; i++ {
		spans = spansByName(t, stdout.String())
		if _, ok := spans["POST /calls"]; ok {
			break
		}
		if i > 500 {
			t.Fatalf("no server span printed:\n%s", stdout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	server, tool := spans["POST /calls"], spans["execute_tool text__transform"]
	if server.SpanContext.TraceID != traceID || server.Parent.SpanID != "b7ad6b7169203331" {
		t.Errorf("server span does not continue the traceparent: %+v", server)
	}
	if tool.Parent.SpanID != server.SpanContext.SpanID {
		t.Errorf("execute_tool parent %s, want %s", tool.Parent.SpanID, server.SpanContext.SpanID)
	}
	for k, want := range map[string]any{
		"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "text__transform", "gen_ai.tool.call.id": "call_42",
		"gen_ai.tool.type": "builtin", "toolsvc.tool.tier": "read_only", "toolsvc.policy.decision": "allow",
		"toolsvc.output.truncated": false, "gen_ai.tool.call.arguments": `{"operation":"upper","text":"hi"}`,
		"gen_ai.tool.call.result": `{"result":"HI"}`,
	} {
		if got := tool.attr(k); got != want {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	var audit map[string]any
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, `"msg":"tool call"`) {
			_ = json.Unmarshal([]byte(line), &audit)
		}
	}
	if audit["trace_id"] != traceID || audit["span_id"] != tool.SpanContext.SpanID {
		t.Errorf("audit line: %v", audit)
	}
}

// TestMetricsOfSpec checks that /metrics shows every metric of SPEC §10
// after a few calls.
func TestMetricsOfSpec(t *testing.T) {
	base, _, _ := startTraced(t, "OTEL_TRACES_EXPORTER=none", "TOOLSVC_MAX_OUTPUT_BYTES=256")
	for _, body := range []string{
		`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hi"}}`,
		`{"toolName":"text__transform","arguments":{"operation":"upper","text":"` + strings.Repeat("x", 600) + `"}}`,
		`{"toolName":"no__such","arguments":{}}`,
	} {
		resp, err := http.Post(base+"/calls", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{
		"toolsvc_tool_calls_total", "toolsvc_tool_call_duration_seconds_bucket", "toolsvc_tool_calls_in_flight",
		"toolsvc_tool_output_truncated_total", "toolsvc_policy_decisions_total", "toolsvc_approvals_pending",
		"toolsvc_http_requests_total", "toolsvc_http_request_duration_seconds_bucket", "toolsvc_http_requests_in_flight",
		"toolsvc_build_info", "go_goroutines", "process_resident_memory_bytes",
	} {
		if !strings.Contains(string(b), "\n"+name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(string(b), `toolsvc_http_requests_total{code="200",method="POST",route="/calls"} 3`) {
		t.Errorf("HTTP requests by route:\n%s", b)
	}
}

func TestTracingSettingsValidated(t *testing.T) {
	ws := "TOOLSVC_WORKSPACE=" + t.TempDir()
	for _, bad := range []string{"OTEL_TRACES_EXPORTER=zipkin", "OTEL_TRACES_SAMPLER=sometimes", "OTEL_TRACES_SAMPLER=traceidratio OTEL_TRACES_SAMPLER_ARG=2", "TOOLSVC_TRACE_CONTENT=perhaps"} {
		if err := run(context.Background(), []string{"toolsvc", "validate"}, append(strings.Fields(bad), ws), io.Discard, io.Discard); err == nil {
			t.Errorf("validate with %s: no error", bad)
		}
	}
	if err := run(context.Background(), []string{"toolsvc", "validate"}, []string{ws, "OTEL_TRACES_EXPORTER=zipkin", "OTEL_SDK_DISABLED=true"}, io.Discard, io.Discard); err != nil {
		t.Errorf("a disabled SDK's settings are not checked: %v", err)
	}
}

// TestApprovalsPendingGauge counts the pending approvals of a real store
// into toolsvc_approvals_pending: all of them (it stopped at 1,000).
func TestApprovalsPendingGauge(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for i := range 1002 {
		a := &registry.Approval{ID: fmt.Sprintf("apr_%d", i), CallerID: "c", ToolCallID: fmt.Sprintf("call_%d", i), ToolName: "fs__delete",
			ArgumentsDigest: "d", Arguments: []byte(`{}`), Status: registry.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		if err := st.CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	m := registry.NewMetrics(reg)
	done := make(chan struct{})
	go func() { countApprovals(ctx, st, m, 10*time.Millisecond, slog.New(slog.DiscardHandler)); close(done) }()
	waitGauge := func(want float64) {
		t.Helper()
		for i := 0; ; i++ {
			families, _ := reg.Gather()
			for _, f := range families {
				if f.GetName() == "toolsvc_approvals_pending" && f.GetMetric()[0].GetGauge().GetValue() == want {
					return
				}
			}
			if i > 500 {
				t.Fatalf("toolsvc_approvals_pending never reached %v", want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitGauge(1002)
	if _, _, err := st.DecideApproval(ctx, "apr_1", registry.VerdictApprove, "alice", "ok", time.Now()); err != nil {
		t.Fatal(err)
	}
	waitGauge(1001)
	cancel()
	<-done
}
