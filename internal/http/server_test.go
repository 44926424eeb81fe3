package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	legacyrouter "github.com/getkin/kin-openapi/routers/legacy"
	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/api"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	resulttool "github.com/toolsvc/toolsvc/internal/tools/result"
	"github.com/toolsvc/toolsvc/internal/tools/text"
)

// contract validates exchanges against api/openapi.yaml.
type contract struct {
	doc    *openapi3.T
	router routers.Router
}

func loadContract(t testing.TB) *contract {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatalf("openapi.yaml does not load: %v", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatalf("openapi.yaml is not valid: %v", err)
	}
	doc.Servers = nil // match paths on any host
	router, err := legacyrouter.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{doc: doc, router: router}
}

// env is a toolsvc HTTP server on loopback with test tools.
type env struct {
	t        testing.TB
	srv      *Server
	ts       *httptest.Server
	contract *contract
	metrics  *prometheus.Registry
}

func testTools() []*registry.Tool {
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
	mk := func(name string, tier registry.Tier, timeout time.Duration, f registry.Func) *registry.Tool {
		return &registry.Tool{Definition: registry.Definition{Name: name, Description: "test " + name, Tier: tier, Parameters: schema, Timeout: timeout}, Handler: f}
	}
	return []*registry.Tool{
		mk("test__sleep", registry.ReadOnly, 100*time.Millisecond, func(ctx context.Context, r *registry.Request) (any, error) {
			select {
			case <-time.After(10 * time.Second):
				return "woke", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
		mk("test__big", registry.ReadOnly, 0, func(ctx context.Context, r *registry.Request) (any, error) {
			return map[string]string{"data": strings.Repeat("x€", 10<<20/4)}, nil
		}),
		mk("test__panic", registry.ReadOnly, 0, func(ctx context.Context, r *registry.Request) (any, error) {
			panic("boom")
		}),
		mk("test__priv", registry.Privileged, 0, func(ctx context.Context, r *registry.Request) (any, error) { return "ran", nil }),
	}
}

func newEnv(t testing.TB, mutate ...func(*Deps, *registry.Options)) *env {
	t.Helper()
	readOn, binder := resulttool.Tools(resulttool.Options{})
	tools := append(append(append(text.Tools(), jsonq.Tools()...), testTools()...), readOn...)
	reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	metrics := prometheus.NewRegistry()
	opts := registry.Options{Registry: reg, Metrics: registry.NewMetrics(metrics)}
	deps := Deps{OpenAPI: api.OpenAPI(), Gatherer: metrics, Limits: Limits{MaxRequestBytes: 1 << 20, MaxJSONDepth: 32}}
	for _, m := range mutate {
		m(&deps, &opts)
	}
	exec := registry.NewExecutor(opts)
	binder.Bind(exec)
	deps.Executor = exec
	srv := NewServer(deps)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &env{t: t, srv: srv, ts: ts, contract: loadContract(t), metrics: metrics}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("response is not JSON: %v: %s", err, r.body)
	}
}

// do sends a request and checks the response (and, when validRequest, the
// request) against the contract.
func (e *env) do(method, path string, body []byte, header map[string]string, validRequest bool) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(resp.Body)
	out := response{resp.StatusCode, resp.Header, respBody}

	vreq, _ := http.NewRequest(method, e.ts.URL+path, bytes.NewReader(body))
	for k, v := range header {
		vreq.Header.Set(k, v)
	}
	route, params, err := e.contract.router.FindRoute(vreq)
	if err != nil {
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return out // unrouted on purpose
		}
		e.t.Fatalf("%s %s is not in openapi.yaml: %v", method, path, err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	if validRequest {
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			e.t.Errorf("%s %s: request does not match openapi.yaml: %v", method, path, err)
		}
	}
	rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(respBody)), Options: opts}
	if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
		e.t.Errorf("%s %s → %d: response does not match openapi.yaml: %v\n%s", method, path, resp.StatusCode, err, respBody)
	}
	return out
}

var jsonCT = map[string]string{"Content-Type": "application/json"}

func (e *env) call(path, body string) (response, *registry.Result) {
	e.t.Helper()
	r := e.do("POST", path, []byte(body), jsonCT, true)
	var res registry.Result
	if r.status == 200 || r.status == 202 {
		r.json(e.t, &res)
	}
	return r, &res
}

// askApproval calls test__priv with toolCallId id and returns the id of
// the approval request it files.
func (e *env) askApproval(id string) string {
	e.t.Helper()
	r, res := e.call("/calls", `{"toolName":"test__priv","toolCallId":"`+id+`","arguments":{"n":1}}`)
	if r.status != 202 || res.Approval == nil {
		e.t.Fatalf("privileged call: %d %s", r.status, r.body)
	}
	return res.Approval.ID
}

func TestRoutesMatchContract(t *testing.T) {
	e := newEnv(t)
	routed := map[string]bool{}
	err := chi.Walk(e.srv.handler.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[strings.ToLower(method)+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, item := range e.contract.doc.Paths.Map() {
		for method := range item.Operations() {
			documented[strings.ToLower(method)+" "+path] = true
		}
	}
	for r := range routed {
		if !documented[r] {
			t.Errorf("route %s is not in openapi.yaml", r)
		}
	}
	for d := range documented {
		if !routed[d] {
			t.Errorf("openapi.yaml documents %s, which is not routed", d)
		}
	}
}

func TestErrorCodesMatchContract(t *testing.T) {
	c := loadContract(t)
	var documented []string
	for _, v := range c.doc.Components.Schemas["ErrorCode"].Value.Enum {
		documented = append(documented, v.(string))
	}
	var codes []string
	for _, c := range registry.Codes() {
		codes = append(codes, string(c))
	}
	if !slices.Equal(documented, codes) {
		t.Errorf("openapi.yaml ErrorCode enum %v\n!= registry.Codes() %v", documented, codes)
	}
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	inDoc := regexp.MustCompile("\\| `(E_[A-Z_]+)` \\|").FindAllStringSubmatch(string(doc), -1)
	var docCodes []string
	for _, m := range inDoc {
		docCodes = append(docCodes, m[1])
	}
	if !slices.Equal(docCodes, codes) {
		t.Errorf("docs/api.md error code table %v\n!= registry.Codes() %v", docCodes, codes)
	}
}

func TestCatalog(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/tools", nil, nil, true)
	var cat struct{ Tools []registry.Definition }
	r.json(t, &cat)
	if r.status != 200 || len(cat.Tools) != 7 {
		t.Fatalf("GET /tools: %d, %d tools", r.status, len(cat.Tools))
	}
	for i := 1; i < len(cat.Tools); i++ {
		if cat.Tools[i-1].Name >= cat.Tools[i].Name {
			t.Errorf("catalog not sorted: %s before %s", cat.Tools[i-1].Name, cat.Tools[i].Name)
		}
	}
	if !bytes.Contains(r.body, []byte(`"timeoutMs":`)) || !bytes.Contains(r.body, []byte("select(.price > 10)")) {
		t.Errorf("definition lacks timeoutMs or escapes HTML: %.300s", r.body)
	}
	etag := r.header.Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	if r := e.do("GET", "/tools", nil, map[string]string{"If-None-Match": etag}, true); r.status != 304 || len(r.body) != 0 {
		t.Errorf("If-None-Match: %d %q", r.status, r.body)
	}
	if r := e.do("GET", "/tools?tier=privileged", nil, map[string]string{"If-None-Match": etag}, true); r.status != 200 || r.header.Get("ETag") == etag {
		t.Errorf("filtered catalog reused the ETag")
	}
	for q, want := range map[string]string{"?tier=privileged": "test__priv", "?q=JQ": "json__query", "?names=test__big,text__transform": "test__big,text__transform", "?names=test__big&names=text__transform": "test__big,text__transform", "?tag=text": "text__transform"} {
		var c struct{ Tools []registry.Definition }
		e.do("GET", "/tools"+q, nil, nil, true).json(t, &c)
		var names []string
		for _, d := range c.Tools {
			names = append(names, d.Name)
		}
		if strings.Join(names, ",") != want {
			t.Errorf("GET /tools%s = %v, want %s", q, names, want)
		}
	}
	for _, f := range []string{"openai", "openai-responses", "anthropic", "gemini", "mcp"} {
		r := e.do("GET", "/tools?format="+f, nil, nil, true)
		if r.status != 200 || !bytes.Contains(r.body, []byte("text__transform")) {
			t.Errorf("format %s: %d %.200s", f, r.status, r.body)
		}
	}
	if r := e.do("GET", "/tools?format=xml", nil, nil, false); r.status != 400 {
		t.Errorf("bad format: %d", r.status)
	}
	if r := e.do("GET", "/tools?tier=root", nil, nil, false); r.status != 400 {
		t.Errorf("bad tier: %d", r.status)
	}
	// A parameter given twice would be read as its first value.
	for _, q := range []string{"?tier=read_only&tier=bogus", "?format=openai&format=anthropic", "?q=a&q=b"} {
		if r := e.do("GET", "/tools"+q, nil, nil, false); r.status != 400 || !bytes.Contains(r.body, []byte("given 2 times")) {
			t.Errorf("GET /tools%s: %d %s", q, r.status, r.body)
		}
	}
	if r := e.do("GET", "/tools/json__query", nil, nil, true); r.status != 200 || !bytes.Contains(r.body, []byte(`"name":"json__query"`)) {
		t.Errorf("GET /tools/json__query: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/tools/json__query?format=anthropic", nil, nil, true); !bytes.Contains(r.body, []byte(`"input_schema"`)) {
		t.Errorf("anthropic single tool: %s", r.body)
	}
	if r := e.do("GET", "/tools/nope__nope", nil, nil, true); r.status != 404 || r.header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("unknown tool: %d %s", r.status, r.header.Get("Content-Type"))
	}
}

func TestCalls(t *testing.T) {
	e := newEnv(t)
	r, res := e.call("/calls", `{"toolCallId":"c1","toolName":"text__transform","arguments":{"operation":"upper","text":"abc"}}`)
	if r.status != 200 || res.Status != registry.StatusOK || string(res.Output) != `{"result":"ABC"}` || res.ToolCallID != "c1" {
		t.Fatalf("ok call: %d %s", r.status, r.body)
	}
	r, res = e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":5,"extra":true}}`)
	if r.status != 200 || res.Code() != registry.CodeInvalidArguments || len(res.Error.Details) != 2 || res.Error.Suggestion == "" {
		t.Errorf("invalid arguments: %d %s", r.status, r.body)
	}
	if res.Error != nil && !slices.ContainsFunc(res.Error.Details, func(d registry.Detail) bool { return d.Path == "/text" && d.Message == "expected string, got number" }) {
		t.Errorf("details: %+v", res.Error.Details)
	}
	r, res = e.call("/calls", `{"toolName":"text__transfrom","arguments":{}}`)
	if res.Code() != registry.CodeToolNotFound || !strings.Contains(res.Error.Suggestion, "text__transform") {
		t.Errorf("not found: %s", r.body)
	}
	// OpenAI and Anthropic shapes, and results in their shapes.
	r = e.do("POST", "/calls?format=openai", []byte(`{"id":"call_7","type":"function","function":{"name":"json__query","arguments":"{\"program\":\".a\",\"input\":{\"a\":1}}"}}`), jsonCT, true)
	var oai struct {
		Role, ToolCallID, Content string
	}
	r.json(t, &oai)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"tool_call_id":"call_7"`)) || !bytes.Contains(r.body, []byte(`"role":"tool"`)) {
		t.Errorf("openai: %s", r.body)
	}
	r = e.do("POST", "/calls?format=anthropic", []byte(`{"type":"tool_use","id":"toolu_1","name":"text__transform","input":{"operation":"nope"}}`), jsonCT, true)
	var ant struct {
		ToolUseID string `json:"tool_use_id"`
		Content   []struct{ Type, Text string }
		IsError   bool `json:"is_error"`
	}
	r.json(t, &ant)
	if ant.ToolUseID != "toolu_1" || !ant.IsError || len(ant.Content) != 1 || !strings.HasPrefix(ant.Content[0].Text, "Error E_INVALID_ARGUMENTS") || !strings.Contains(ant.Content[0].Text, "Suggestion: ") {
		t.Errorf("anthropic: %s", r.body)
	}
	r = e.do("POST", "/calls?format=mcp", []byte(`{"toolName":"text__transform","arguments":{"operation":"lower","text":"Q"}}`), jsonCT, true)
	if !bytes.Contains(r.body, []byte(`"structuredContent":{"result":"q"}`)) || !bytes.Contains(r.body, []byte(`"isError":false`)) {
		t.Errorf("mcp: %s", r.body)
	}
	// Timeouts, huge outputs and panics are results, and the server lives on.
	r, res = e.call("/calls", `{"toolName":"test__sleep"}`)
	if res.Code() != registry.CodeTimeout {
		t.Errorf("timeout: %s", r.body)
	}
	r, res = e.call("/calls", `{"toolName":"test__big"}`)
	if !res.Truncated || res.OriginalBytes < 10<<20 || !utf8.Valid(r.body) || len(res.Output) > 16384+128 {
		t.Errorf("big output: truncated=%v originalBytes=%d len=%d", res.Truncated, res.OriginalBytes, len(res.Output))
	}
	var s string
	if err := json.Unmarshal(res.Output, &s); err != nil || !strings.Contains(s, " bytes total, ") || !strings.HasSuffix(s, " omitted; the full output was not kept]") {
		t.Errorf("truncated output is not a marked string: %v", err)
	}
	r, res = e.call("/calls", `{"toolName":"test__panic"}`)
	if res.Code() != registry.CodeInternal || res.Error.Message != "internal error" || bytes.Contains(r.body, []byte("boom")) {
		t.Errorf("panic: %s", r.body)
	}
	r, res = e.call("/calls", `{"toolName":"test__priv"}`)
	if res.Code() != registry.CodePolicyDenied {
		t.Errorf("privileged tool without approval: %s", r.body)
	}
	if r := e.do("GET", "/healthz", nil, nil, true); r.status != 200 {
		t.Errorf("server died: %d", r.status)
	}
}

func TestBadRequests(t *testing.T) {
	e := newEnv(t)
	deep := strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40)
	// OpenAI sends arguments as a string: 100,000 levels inside one.
	deepString := `"{\"a\":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}"`
	cases := []struct {
		name, body string
		header     map[string]string
		status     int
		code       string
	}{
		{"not json", "{nope", jsonCT, 400, "invalid_json"},
		{"empty", "", jsonCT, 400, "invalid_json"},
		{"array", "[1]", jsonCT, 400, "invalid_call"},
		{"no tool", `{"arguments":{}}`, jsonCT, 400, "missing_tool_name"},
		{"wrong type", `{"toolName":5}`, jsonCT, 400, "invalid_call"},
		{"too deep", `{"toolName":"json__query","arguments":` + deep + `}`, jsonCT, 400, "too_deep"},
		{"too deep in an arguments string", `{"id":"call_1","type":"function","function":{"name":"json__query","arguments":` + deepString + `}}`, jsonCT, 400, "too_deep"},
		{"too big", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"` + strings.Repeat("a", 2<<20) + `"}}`, jsonCT, 413, "payload_too_large"},
		{"form", `toolName=x`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"no type", `{}`, nil, 415, "unsupported_media_type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/calls", []byte(c.body), c.header, false)
			var p Problem
			r.json(t, &p)
			if r.status != c.status || p.Code != c.code || p.Status != c.status || p.Detail == "" || r.header.Get("Content-Type") != "application/problem+json" {
				t.Errorf("got %d %s, want %d %s", r.status, r.body, c.status, c.code)
			}
			if r := e.do("GET", "/healthz", nil, nil, true); r.status != 200 {
				t.Errorf("server stopped answering: %d", r.status)
			}
		})
	}
	if r := e.do("DELETE", "/tools", nil, nil, false); r.status != 405 {
		t.Errorf("DELETE /tools: %d", r.status)
	}
	if r := e.do("GET", "/nope", nil, nil, false); r.status != 404 || !bytes.Contains(r.body, []byte(`"code":"not_found"`)) {
		t.Errorf("GET /nope: %d %s", r.status, r.body)
	}
}

func TestOverloadAndDrain(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		o.MaxConcurrency = 1
		reg, _ := registry.New(registry.Defaults{Timeout: 10 * time.Second}, &registry.Tool{
			Definition: registry.Definition{Name: "test__hold", Description: "holds", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
			Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
				started <- struct{}{}
				<-release
				return "done", nil
			}),
		})
		o.Registry = reg
	})
	var wg sync.WaitGroup
	var first *registry.Result
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := http.Post(e.ts.URL+"/calls", "application/json", strings.NewReader(`{"toolName":"test__hold"}`))
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		first = new(registry.Result)
		_ = json.NewDecoder(resp.Body).Decode(first)
	}()
	<-started
	r := e.do("POST", "/calls", []byte(`{"toolName":"test__hold"}`), jsonCT, true)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("over the limit: %d %s", r.status, r.body)
	}
	e.srv.Drain()
	if r := e.do("GET", "/readyz", nil, nil, true); r.status != 503 || !bytes.Contains(r.body, []byte("draining")) {
		t.Errorf("readyz while draining: %d %s", r.status, r.body)
	}
	if r := e.do("POST", "/calls", []byte(`{"toolName":"test__hold"}`), jsonCT, true); r.status != 503 {
		t.Errorf("new call while draining: %d", r.status)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if e.srv.WaitIdle(ctx) {
		t.Error("idle while a call runs")
	}
	cancel()
	close(release)
	if !e.srv.WaitIdle(context.Background()) {
		t.Error("never idle")
	}
	wg.Wait()
	if first == nil || first.Status != registry.StatusOK {
		t.Errorf("in-flight call did not finish: %+v", first)
	}
}

func TestOperationalRoutes(t *testing.T) {
	failing := errors.New("store unreachable")
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Ready = map[string]Check{"store": func(context.Context) error { return failing }}
	})
	if r := e.do("GET", "/healthz", nil, nil, true); r.status != 200 {
		t.Errorf("healthz: %d", r.status)
	}
	if r := e.do("GET", "/readyz", nil, nil, true); r.status != 503 || !bytes.Contains(r.body, []byte("store unreachable")) {
		t.Errorf("readyz with a failing check: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/openapi.yaml", nil, nil, true); r.status != 200 || !bytes.HasPrefix(r.body, []byte("openapi: 3.1")) {
		t.Errorf("openapi.yaml: %d", r.status)
	}
	e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"trim","text":" x "}}`)
	r := e.do("GET", "/metrics", nil, nil, true)
	for _, m := range []string{`toolsvc_tool_calls_total{code="",status="ok",tier="read_only",tool="text__transform"} 1`, "toolsvc_tool_call_duration_seconds_bucket"} {
		if !bytes.Contains(r.body, []byte(m)) {
			t.Errorf("metrics lack %s", m)
		}
	}
	if id := e.do("GET", "/healthz", nil, map[string]string{"X-Request-Id": "abc-123"}, true).header.Get("X-Request-Id"); id != "abc-123" {
		t.Errorf("request id not echoed: %q", id)
	}
	if id := e.do("GET", "/healthz", nil, map[string]string{"X-Request-Id": "bad id <script>"}, true).header.Get("X-Request-Id"); id == "" || strings.Contains(id, " ") {
		t.Errorf("insane request id kept: %q", id)
	}
}

type staticAuth map[string]*registry.Caller

func (a staticAuth) Authenticate(token string) (*registry.Caller, bool) {
	c, ok := a[token]
	return c, ok
}

// TestLoopbackHost: a service without credentials on loopback answers only
// requests that name a loopback host, so a page rebound to 127.0.0.1 under
// its own name cannot run (or approve) calls; with credentials, any name
// reaches authentication.
func TestLoopbackHost(t *testing.T) {
	call := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`)
	e := newEnv(t)
	for _, host := range []string{"rebind.example.com", "rebind.example.com:8080", "127.0.0.1.example.com", "[::2]:80", "0.0.0.0:8080"} {
		r := e.do("POST", "/calls", call, map[string]string{"Content-Type": "application/json", "Host": host}, true)
		var p struct{ Code, Detail string }
		r.json(t, &p)
		if r.status != 403 || p.Code != "foreign_host" || !strings.Contains(p.Detail, host) {
			t.Errorf("Host %s: %d %s", host, r.status, r.body)
		}
	}
	req, _ := http.NewRequest("GET", e.ts.URL+"/healthz", nil)
	req.Host = "rebind.example.com"
	if resp, err := e.ts.Client().Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("any route under a foreign name: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	_, port, _ := net.SplitHostPort(e.ts.Listener.Addr().String())
	for _, host := range []string{"localhost:" + port, "LOCALHOST", "127.0.0.1:" + port, "127.0.0.2", "[::1]:" + port, "[::ffff:127.0.0.1]"} {
		if r := e.do("POST", "/calls", call, map[string]string{"Content-Type": "application/json", "Host": host}, true); r.status != 200 {
			t.Errorf("Host %s: %d %s", host, r.status, r.body)
		}
	}

	authed := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"caller": {ID: "caller", Scopes: []registry.Scope{registry.ScopeCall}}}
	})
	if r := authed.do("POST", "/calls", call, map[string]string{"Content-Type": "application/json", "Host": "tools.example.com", "Authorization": "Bearer caller"}, true); r.status != 200 {
		t.Errorf("with credentials, a proxy's name: %d %s", r.status, r.body)
	}
	if r := authed.do("POST", "/calls", call, map[string]string{"Content-Type": "application/json", "Host": "tools.example.com"}, false); r.status != 401 {
		t.Errorf("with credentials, no token: %d %s", r.status, r.body)
	}
	// /mcp follows the same rule (the MCP SDK's own check would refuse
	// the proxy's name even with credentials).
	for _, c := range []struct {
		env    *env
		token  string
		status int
	}{{e, "", 403}, {authed, "caller", 200}} {
		req, _ := http.NewRequest("POST", c.env.ts.URL+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Host = "tools.example.com"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.env.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.status == 403 && !strings.Contains(string(body), "foreign_host")) {
			t.Errorf("/mcp under a foreign name, token %q: %d %s", c.token, resp.StatusCode, body)
		}
	}
}

func TestAuthentication(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{
			"reader": {ID: "reader", MaxTier: registry.ReadOnly},
			"caller": {ID: "caller", Scopes: []registry.Scope{registry.ScopeCall}, Tools: []string{"text__*"}},
		}
	})
	if r := e.do("GET", "/tools", nil, nil, false); r.status != 401 || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("no token: %d", r.status)
	}
	if r := e.do("GET", "/tools", nil, map[string]string{"Authorization": "Bearer wrong"}, false); r.status != 401 || bytes.Contains(r.body, []byte("wrong")) {
		t.Errorf("bad token: %d %s", r.status, r.body)
	}
	r := e.do("GET", "/tools", nil, map[string]string{"Authorization": "Bearer caller"}, true)
	if r.status != 200 || !bytes.Contains(r.body, []byte("text__transform")) || bytes.Contains(r.body, []byte("json__query")) {
		t.Errorf("caller's catalog: %s", r.body)
	}
	if r := e.do("GET", "/tools/json__query", nil, map[string]string{"Authorization": "Bearer caller"}, true); r.status != 404 {
		t.Errorf("hidden tool: %d", r.status)
	}
	r = e.do("POST", "/calls", []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`), map[string]string{"Authorization": "Bearer reader", "Content-Type": "application/json"}, true)
	if r.status != 403 {
		t.Errorf("caller without call scope: %d", r.status)
	}
	r = e.do("POST", "/calls", []byte(`{"toolName":"json__query","arguments":{"program":"."}}`), map[string]string{"Authorization": "Bearer caller", "Content-Type": "application/json"}, true)
	if !bytes.Contains(r.body, []byte("E_TOOL_NOT_IN_CATALOG")) {
		t.Errorf("call outside the catalog: %s", r.body)
	}
	if e.do("GET", "/healthz", nil, nil, true).status != 200 {
		t.Error("healthz needs no credentials")
	}
}

func TestCheckDepth(t *testing.T) {
	if err := checkDepth([]byte(`{"a":"[[[[[[[[","b":"\"{{{{"}`), 2); err != nil {
		t.Errorf("brackets inside strings counted: %v", err)
	}
	if err := checkDepth([]byte(`[[[1]]]`), 2); err == nil {
		t.Error("depth 3 passed a limit of 2")
	}
}

// openStore opens an embedded store in a temporary directory, closed when
// the test ends.
func openStore(t testing.TB) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
