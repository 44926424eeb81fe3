package http

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// bearerTransport adds a token to every request of an MCP client.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func mcpSession(t *testing.T, e *env, token string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	return client.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   e.ts.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token}},
	}, nil)
}

func resultText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func TestMCPEndpoint(t *testing.T) {
	e := newEnv(t)
	cs, err := mcpSession(t, e, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var transform *mcp.Tool
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
		if tl.Name == "text__transform" {
			transform = tl
		}
	}
	if len(list.Tools) != e.srv.deps.Executor.Registry().Len() || transform == nil || !strings.HasPrefix(strings.Join(names, ","), "json__query,test__big") {
		t.Fatalf("tools/list: %v", names)
	}
	if transform.Annotations == nil || !transform.Annotations.ReadOnlyHint || !strings.Contains(string(mustJSON(t, transform.InputSchema)), `"operation"`) {
		t.Errorf("text__transform as listed: %+v", transform)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "text__transform", Arguments: map[string]any{"operation": "upper", "text": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || resultText(res) != `{"result":"HELLO"}` || !strings.Contains(string(mustJSON(t, res.StructuredContent)), `"HELLO"`) {
		t.Errorf("call: %s %v", resultText(res), res.StructuredContent)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "text__transform", Arguments: map[string]any{"operation": "upper", "text": 5}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(resultText(res), "Error E_INVALID_ARGUMENTS: ") || !strings.Contains(resultText(res), "at /text: ") {
		t.Errorf("validation error: %s", resultText(res))
	}
	var structured registry.Result
	if err := json.Unmarshal(mustJSON(t, res.StructuredContent), &structured); err != nil || structured.Code() != registry.CodeInvalidArguments {
		t.Errorf("structured error: %v %+v", err, structured)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__priv", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(resultText(res), "Error E_POLICY_DENIED: ") {
		t.Errorf("policy: %s", resultText(res))
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "text__transfrom", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.Contains(resultText(res), "E_TOOL_NOT_FOUND") || !strings.Contains(resultText(res), "text__transform") {
		t.Errorf("unknown tool: %s", resultText(res))
	}
	if n := counterValue(t, e, "toolsvc_tool_calls_total", `tool="text__transform"`); n < 2 {
		t.Errorf("calls over /mcp are not counted: %v", n)
	}
}

func TestMCPAuthentication(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{
			"reader": {ID: "reader", MaxTier: registry.ReadOnly},
			"caller": {ID: "caller", Scopes: []registry.Scope{registry.ScopeCall}, Tools: []string{"text__*"}},
		}
	})
	if _, err := mcpSession(t, e, ""); err == nil {
		t.Error("connected without a token")
	}
	if _, err := mcpSession(t, e, "wrong"); err == nil {
		t.Error("connected with a bad token")
	}
	cs, err := mcpSession(t, e, "caller")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil || len(list.Tools) != 1 || list.Tools[0].Name != "text__transform" {
		t.Fatalf("caller's catalog: %v %+v", err, list)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "json__query", Arguments: map[string]any{"program": "."}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "E_TOOL_NOT_IN_CATALOG") {
		t.Errorf("call outside the catalog: %v %s", err, resultText(res))
	}
	reader, err := mcpSession(t, e, "reader")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	res, err = reader.CallTool(ctx, &mcp.CallToolParams{Name: "text__transform", Arguments: map[string]any{"operation": "upper", "text": "a"}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), `lacks the "call" scope`) {
		t.Errorf("caller without the call scope: %v %s", err, resultText(res))
	}
}

// TestMCPPendingApproval: a privileged call over /mcp waits for a human;
// the error result carries the approval id, and once approved the result
// is at GET /calls/{toolCallId}.
func TestMCPPendingApproval(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	cs, err := mcpSession(t, e, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "test__priv", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var pending registry.Result
	if err := json.Unmarshal(mustJSON(t, res.StructuredContent), &pending); err != nil || pending.Approval == nil {
		t.Fatalf("pending result: %v %s", err, resultText(res))
	}
	text := resultText(res)
	if !res.IsError || pending.Status != registry.StatusPendingApproval || !strings.Contains(text, pending.Approval.ID) || !strings.Contains(text, "wait") {
		t.Fatalf("pending approval over MCP: %s", text)
	}
	r := e.do("POST", "/approvals/"+pending.Approval.ID, []byte(`{"decision":"approve","reason":"ok"}`), jsonCT, true)
	if r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/calls/"+pending.ToolCallID, nil, nil, true)
	if r.status != 200 || !strings.Contains(string(r.body), `"output":"ran"`) {
		t.Errorf("result after approval: %d %s", r.status, r.body)
	}
}

func TestMCPPendingApprovalText(t *testing.T) {
	res := &registry.Result{ToolCallID: "call_7", Status: registry.StatusPendingApproval,
		Approval: &registry.ApprovalTicket{ID: "apr_1"}}
	text := renderText(res)
	for _, want := range []string{"apr_1", "call_7", "has not run", "Do not call the tool again", "wait"} {
		if !strings.Contains(text, want) {
			t.Errorf("pending text lacks %q: %s", want, text)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// counterValue sums the counter name over the series whose labels
// include label (`key="value"`).
func counterValue(t *testing.T, e *env, name, label string) float64 {
	t.Helper()
	families, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	key, value, _ := strings.Cut(label, "=")
	value = strings.Trim(value, `"`)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// BenchmarkMCPCall measures one tools/call over /mcp (a fresh stateless
// MCP server per request) against the same call over POST /calls.
func BenchmarkMCPCall(b *testing.B) {
	e := newEnv(b)
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.ts.URL + "/mcp", HTTPClient: e.ts.Client()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cs.Close()
	params := &mcp.CallToolParams{Name: "text__transform", Arguments: map[string]any{"operation": "upper", "text": "hello"}}
	b.Run("mcp", func(b *testing.B) {
		for b.Loop() {
			res, err := cs.CallTool(context.Background(), params)
			if err != nil || res.IsError {
				b.Fatal(err, res)
			}
		}
	})
	b.Run("rest", func(b *testing.B) {
		body := `{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`
		for b.Loop() {
			resp, err := e.ts.Client().Post(e.ts.URL+"/calls", "application/json", strings.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
		}
	})
}
