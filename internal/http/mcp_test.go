package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
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
	if len(list.Tools) != e.srv.deps.Executor.Registry().Len() || transform == nil || !strings.HasPrefix(strings.Join(names, ","), "json__query,result__read,test__big") {
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
	// An error result carries no structuredContent: it would have to
	// match the tool's outputSchema.
	if res.StructuredContent != nil {
		t.Errorf("structured content on an error result: %v", res.StructuredContent)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__priv", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(resultText(res), "Error E_POLICY_DENIED: ") {
		t.Errorf("policy: %s", resultText(res))
	}

	// An unknown tool is a protocol error (-32602), not a result.
	if _, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "text__transfrom", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), `unknown tool "text__transfrom"`) {
		t.Errorf("unknown tool: %v", err)
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
	// A tool outside the caller's catalog is not in its server at all.
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "json__query", Arguments: map[string]any{"program": "."}}); err == nil || !strings.Contains(err.Error(), `unknown tool "json__query"`) {
		t.Errorf("call outside the catalog: %v", err)
	}
	reader, err := mcpSession(t, e, "reader")
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	res, err := reader.CallTool(ctx, &mcp.CallToolParams{Name: "text__transform", Arguments: map[string]any{"operation": "upper", "text": "a"}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), `lacks the "call" scope`) {
		t.Errorf("caller without the call scope: %v %s", err, resultText(res))
	}
}

// TestMCPPendingApproval: a privileged call over /mcp waits for a human;
// the error result carries the approval id, and once approved the result
// is at GET /calls/{toolCallId}.
func TestMCPPendingApproval(t *testing.T) {
	st := openStore(t)
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
	text := resultText(res)
	m := regexp.MustCompile(`Approval id: (apr_\w+) .* Tool call id: (call_\w+)\.`).FindStringSubmatch(text)
	if !res.IsError || res.StructuredContent != nil || m == nil || !strings.Contains(text, "wait") {
		t.Fatalf("pending approval over MCP: %s", text)
	}
	r := e.do("POST", "/approvals/"+m[1], []byte(`{"decision":"approve","reason":"ok"}`), jsonCT, true)
	if r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	r = e.do("GET", "/calls/"+m[2], nil, nil, true)
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

// recordingTransport keeps the requests' MCP headers and the answers'
// bodies of an MCP client; with a token, it sends it as the bearer.
type recordingTransport struct {
	token   string
	mu      sync.Mutex
	headers []http.Header
	bodies  []string
}

func (rt *recordingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if rt.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+rt.token)
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	rt.mu.Lock()
	rt.headers = append(rt.headers, r.Header.Clone())
	rt.bodies = append(rt.bodies, string(body))
	rt.mu.Unlock()
	return resp, nil
}

// String is the answers' bodies, one a line.
func (rt *recordingTransport) String() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return strings.Join(rt.bodies, "\n")
}

// TestMCPRevision20260728: the Go SDK client negotiates 2026-07-28 with
// server/discover and sends Mcp-Method/Mcp-Name; tools/list is private
// to the caller with a ttl; a bogus cursor is -32602; a tool's result
// carries structuredContent that matches its outputSchema.
func TestMCPRevision20260728(t *testing.T) {
	e := newEnv(t)
	rt := &recordingTransport{}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.ts.URL + "/mcp", HTTPClient: &http.Client{Transport: rt}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if list.CacheScope != "private" || list.TTLMs <= 0 {
		t.Errorf("tools/list cache fields: %q %d", list.CacheScope, list.TTLMs)
	}
	var transform *mcp.Tool
	for _, tl := range list.Tools {
		if tl.Name == "text__transform" {
			transform = tl
		}
	}
	if transform == nil || transform.OutputSchema == nil {
		t.Fatalf("text__transform without outputSchema: %+v", transform)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "text__transform", Arguments: map[string]any{"operation": "lower", "text": "HI"}})
	if err != nil || res.IsError || !strings.Contains(string(mustJSON(t, res.StructuredContent)), `"result":"hi"`) {
		t.Fatalf("call: %v %+v", err, res)
	}
	if _, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: "bogus"}); err == nil || !strings.Contains(err.Error(), "invalid") {
		t.Errorf("bogus cursor: %v", err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var methods []string
	sawVersion, sawName := false, false
	for _, h := range rt.headers {
		methods = append(methods, h.Get("Mcp-Method"))
		sawVersion = sawVersion || h.Get("Mcp-Protocol-Version") == "2026-07-28"
		sawName = sawName || h.Get("Mcp-Name") == "text__transform"
	}
	if len(methods) == 0 || methods[0] != "server/discover" || !sawVersion || !sawName {
		t.Errorf("the client did not speak 2026-07-28: methods %v, version %v, name %v", methods, sawVersion, sawName)
	}
	joined := strings.Join(rt.bodies, "\n")
	if !strings.Contains(joined, `"resultType":"complete"`) || !strings.Contains(joined, `"version":"`) {
		t.Errorf("answers lack resultType or serverInfo.version: %s", joined)
	}
}

// TestMCPWireErrors: what the SDK would answer in text/plain is a
// JSON-RPC error; an unknown method is -32601 with the request's id; a
// batch over 50 messages is refused whole; 405s carry Allow.
func TestMCPWireErrors(t *testing.T) {
	e := newEnv(t)
	mcpHeaders := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Mcp-Protocol-Version": "2025-11-25"}
	batchHeaders := maps.Clone(mcpHeaders)
	batchHeaders["Mcp-Protocol-Version"] = "2025-03-26" // the last revision with batches
	var batch []string
	for i := range 51 {
		batch = append(batch, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, i))
	}
	for _, c := range []struct {
		name, body string
		header     map[string]string
		status     int
		code       int
		id         string
	}{
		{"wrong content type", `{}`, map[string]string{"Content-Type": "text/plain", "Accept": "application/json, text/event-stream"}, 415, -32600, "null"},
		{"not JSON", `{`, mcpHeaders, 400, -32700, "null"},
		{"unknown method", `{"jsonrpc":"2.0","id":"q7","method":"foo/bar"}`, mcpHeaders, 400, -32601, `"q7"`},
		{"batch of 51", "[" + strings.Join(batch, ",") + "]", map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}, 400, -32600, "null"},
		{"over the body limit", `{"jsonrpc":"2.0","id":"q8","method":"ping"}` + strings.Repeat(" ", 2<<20), mcpHeaders, 413, -32600, "null"},
		// Ids the SDK would answer with another id (it reads them as doubles).
		{"id past 2^53", `{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}`, mcpHeaders, 400, -32600, "null"},
		{"id 2^53", `{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}`, mcpHeaders, 400, -32600, "null"},
		{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, mcpHeaders, 400, -32600, "null"},
		{"ids read as one", `[{"jsonrpc":"2.0","id":8.1,"method":"ping"},{"jsonrpc":"2.0","id":8.9,"method":"ping"}]`, batchHeaders, 400, -32600, "null"},
		{"an id twice", `[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":3,"method":"ping"}]`, batchHeaders, 400, -32600, "null"},
		{"a string id twice", `[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","id":"a","method":"ping"}]`, batchHeaders, 400, -32600, "null"},
	} {
		r := e.do("POST", "/mcp", []byte(c.body), c.header, false)
		var msg struct {
			ID    json.RawMessage `json:"id"`
			Error struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(r.body, &msg); err != nil || r.status != c.status || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") ||
			msg.Error.Code != c.code || string(msg.ID) != c.id || msg.Error.Message == "" {
			t.Errorf("%s: %d %s %s", c.name, r.status, r.header.Get("Content-Type"), r.body)
		}
	}
	// The largest ids that stay exact are answered as sent; a string and a
	// number of the same digits are two ids.
	for body, want := range map[string]string{
		`{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}`:                               `"id":9007199254740991`,
		`{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}`:                              `"id":-9007199254740991`,
		`[{"jsonrpc":"2.0","id":3,"method":"ping"},{"jsonrpc":"2.0","id":"3","method":"ping"}]`: `"id":"3"`,
	} {
		h := mcpHeaders
		if strings.HasPrefix(body, "[") {
			h = batchHeaders
		}
		if r := e.do("POST", "/mcp", []byte(body), h, false); r.status != 200 || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d %s", body, r.status, r.body)
		}
	}
	for _, c := range []struct{ method, path, allow string }{
		{"GET", "/mcp", "POST"}, {"DELETE", "/tools", "GET, HEAD"}, {"PUT", "/calls", "POST"}, {"DELETE", "/approvals/apr_1", "GET, HEAD, POST"},
		{"HEAD", "/mcp", "POST"},
	} {
		r := e.do(c.method, c.path, nil, nil, false)
		if r.status != 405 || r.header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want %q", c.method, c.path, r.status, r.header.Get("Allow"), c.allow)
		}
	}
	// HEAD is served wherever GET is (RFC 9110, section 9.3.2).
	for _, path := range []string{"/healthz", "/tools", "/openapi.yaml"} {
		resp, err := e.ts.Client().Head(e.ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(body) != 0 || resp.Header.Get("Content-Type") == "" {
			t.Errorf("HEAD %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
}
