package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
)

type fixture struct {
	t       *testing.T
	m       *Manager
	changes chan struct{}
	dir     string
	env     map[string]string
}

func newFixture(t *testing.T, options ...func(*Options)) *fixture {
	t.Helper()
	f := &fixture{t: t, changes: make(chan struct{}, 16), dir: t.TempDir(), env: map[string]string{}}
	o := Options{
		OnChange:       func() { f.changes <- struct{}{} },
		MinBackoff:     20 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
		ConnectTimeout: 10 * time.Second,
		KeepAlive:      200 * time.Millisecond,
		Version:        "test",
	}
	for _, set := range options {
		set(&o)
	}
	f.m = NewManager(o)
	t.Cleanup(f.m.Close)
	return f
}

func (f *fixture) decode(doc string) (*Server, error) {
	f.t.Helper()
	p := filepath.Join(f.dir, "mcp.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		f.t.Fatal(err)
	}
	rs, err := config.Load(p)
	if err != nil {
		return nil, err
	}
	return Decode(rs[0], func(name string) (string, bool) { v, ok := f.env[name]; return v, ok })
}

func (f *fixture) server(doc string) *Server {
	f.t.Helper()
	s, err := f.decode(doc)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

func stdioDoc(t *testing.T, name, extra string) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: %s}\nspec:\n  stdio:\n    command: %q\n    args: [mcp-stdio-server]\n%s", name, exe, extra)
}

// executor serves the set's tools, allowing every tier.
func (f *fixture) executor(set *Set) *registry.Executor {
	f.t.Helper()
	// 30 s: a call that moves 16 MiB through a race-instrumented server
	// and client takes near 10 s on a loaded machine.
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, f.m.Tools(set)...)
	if err != nil {
		f.t.Fatal(err)
	}
	return registry.NewExecutor(registry.Options{Registry: reg,
		Policy: registry.TierDefaults{registry.ReadOnly: registry.Allow, registry.SideEffecting: registry.Allow, registry.Privileged: registry.Allow}})
}

func execute(t *testing.T, e *registry.Executor, ctx context.Context, name, args string) *registry.Result {
	t.Helper()
	res, err := e.Execute(ctx, registry.Anonymous(), &registry.Call{ToolName: name, Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// eventually polls cond (the machine is shared: generous, not a timing
// assertion).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func names(tools []*registry.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

func traceCtx() context.Context {
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
}

// checkCalls exercises the server's tools through the executor.
func checkCalls(t *testing.T, e *registry.Executor, prefix string) {
	t.Helper()
	ctx := traceCtx()
	if res := execute(t, e, ctx, prefix+"__echo", `{"message": "hi"}`); res.Status != registry.StatusOK || string(res.Output) != `"echo: hi"` {
		t.Errorf("echo: %s %+v", res.Output, res.Error)
	}
	if res := execute(t, e, ctx, prefix+"__echo", `{"message": 5}`); res.Code() != registry.CodeInvalidArguments {
		t.Errorf("echo with a number: %+v", res.Error)
	}
	if res := execute(t, e, ctx, prefix+"__add", `{"a": 2, "b": 40}`); res.Status != registry.StatusOK || string(res.Output) != `{"sum":42}` {
		t.Errorf("add: %s %+v", res.Output, res.Error)
	}
	if res := execute(t, e, ctx, prefix+"__fail", `{}`); res.Code() != registry.CodeTool || res.Error.Message != "the widget is broken" {
		t.Errorf("fail: %+v", res.Error)
	}
	if res := execute(t, e, ctx, prefix+"__files_delete", `{}`); string(res.Output) != `"deleted nothing"` {
		t.Errorf("files_delete: %s %+v", res.Output, res.Error)
	}
	res := execute(t, e, ctx, prefix+"__mixed", `{}`)
	if !strings.Contains(string(res.Output), `"type":"image"`) || strings.Contains(string(res.Output), "AQID") {
		t.Errorf("mixed content: %s", res.Output)
	}
	res = execute(t, e, ctx, prefix+"__meta", `{}`)
	var meta struct{ Traceparent string }
	_ = json.Unmarshal(res.Output, &meta)
	if !strings.Contains(meta.Traceparent, "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("trace context not in _meta: %s %+v", res.Output, res.Error)
	}
	res, _ = e.Execute(ctx, registry.Anonymous(), &registry.Call{ToolName: prefix + "__slow", TimeoutMs: 200})
	if res.Code() != registry.CodeTimeout {
		t.Errorf("slow: %+v", res.Error)
	}
}

func TestStdioServer(t *testing.T) {
	f := newFixture(t)
	s := f.server(stdioDoc(t, "local", `  tools:
    echo: {tier: side_effecting, timeout: 3s}
  exclude: [crash]
`))
	set := f.m.Ensure(context.Background(), []*Server{s})
	if st := f.m.Status()["local"]; st.State != "connected" || st.Transport != "stdio" {
		t.Fatalf("status: %+v", st)
	}
	tools := f.m.Tools(set)
	want := []string{"local__a_b", "local__add", "local__daemon", "local__fail", "local__files_delete", "local__grow", "local__meta", "local__mixed", "local__slow"}
	want = append(want, "local__echo")
	slices.Sort(want)
	if got := names(tools); !slices.Equal(got, want) {
		t.Fatalf("tools: %v\nwant %v", got, want)
	}
	byName := map[string]*registry.Tool{}
	for _, tl := range tools {
		byName[tl.Name] = tl
		if tl.Type != Type || !strings.HasSuffix(tl.Source, "mcp.yaml:1") {
			t.Errorf("%s: type %q source %q", tl.Name, tl.Type, tl.Source)
		}
	}
	if tl := byName["local__echo"]; tl.Tier != registry.SideEffecting || tl.Timeout != 3*time.Second {
		t.Errorf("echo override: %s %s", tl.Tier, tl.Timeout)
	}
	if tl := byName["local__files_delete"]; tl.Tier != registry.Privileged || tl.Annotations == nil || !*tl.Annotations.DestructiveHint {
		t.Errorf("destructive tool: %s %+v", tl.Tier, tl.Annotations)
	}
	if tl := byName["local__add"]; tl.Tier != registry.SideEffecting || !strings.Contains(string(tl.Parameters), `"a"`) {
		t.Errorf("add: %s %s", tl.Tier, tl.Parameters)
	}
	checkCalls(t, f.executor(set), "local")
}

func TestStdioListChangedAndReconnect(t *testing.T) {
	f := newFixture(t)
	s := f.server(stdioDoc(t, "local", ""))
	set := f.m.Ensure(context.Background(), []*Server{s})
	e := f.executor(set)
	pid := func(e *registry.Executor) float64 {
		res := execute(t, e, context.Background(), "local__meta", `{}`)
		var out struct{ Pid float64 }
		_ = json.Unmarshal(res.Output, &out)
		return out.Pid
	}
	first := pid(e)
	if res := execute(t, e, context.Background(), "local__grow", `{}`); res.Status != registry.StatusOK {
		t.Fatalf("grow: %+v", res.Error)
	}
	<-f.changes // list_changed
	if !slices.Contains(names(f.m.Tools(set)), "local__late") {
		t.Fatalf("the new tool is not listed: %v", names(f.m.Tools(set)))
	}
	e = f.executor(set)
	if res := execute(t, e, context.Background(), "local__late", `{}`); string(res.Output) != `"late but here"` {
		t.Errorf("late: %s %+v", res.Output, res.Error)
	}

	// The server dies: calls fail with a clear error until it is back.
	if res := execute(t, e, context.Background(), "local__crash", `{}`); res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "local") ||
		!strings.Contains(res.Error.Suggestion, "try the call again in a few seconds") {
		t.Errorf("crash: %+v", res.Error)
	}
	<-f.changes // reconnected: a new process, without the late tool
	eventually(t, "reconnection", func() bool { return f.m.Status()["local"].State == "connected" })
	if slices.Contains(names(f.m.Tools(set)), "local__late") {
		t.Error("the restarted server still lists the late tool")
	}
	e = f.executor(set)
	if second := pid(e); second == first || second == 0 {
		t.Errorf("pid after reconnection %v, before %v", second, first)
	}
}

// httpServer is an MCP server over streamable HTTP on loopback that can
// be stopped and started again on the same address.
type httpServer struct {
	t    *testing.T
	addr string
	srv  *mcp.Server
	mu   sync.Mutex
	hs   *http.Server
	auth []string // Authorization headers seen
}

func newHTTPServer(t *testing.T, addr string) *httpServer {
	h := &httpServer{t: t, addr: addr, srv: newTestServer(func() {})}
	h.start()
	t.Cleanup(h.stop)
	return h
}

func (h *httpServer) start() {
	ln, err := net.Listen("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.srv }, nil)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.auth = append(h.auth, r.Header.Get("Authorization"))
		h.mu.Unlock()
		mcpHandler.ServeHTTP(w, r)
	})}
	h.mu.Lock()
	h.hs = hs
	h.mu.Unlock()
	go hs.Serve(ln)
}

func (h *httpServer) stop() {
	h.mu.Lock()
	hs := h.hs
	h.mu.Unlock()
	if hs != nil {
		hs.Close()
	}
}

func (h *httpServer) url() string { return "http://" + h.addr + "/mcp" }

func httpDoc(name, url string) string {
	return fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: %s}\nspec:\n  http:\n    url: %s\n    headers:\n      Authorization: {valueFrom: {env: MCP_TOKEN}}\n  include: ['*']\n  exclude: [crash]\n", name, url)
}

func TestHTTPServer(t *testing.T) {
	h := newHTTPServer(t, "127.0.0.1:0")
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer mcp-secret"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("remote", h.url()))})
	if st := f.m.Status()["remote"]; st.State != "connected" || st.Transport != "http" {
		t.Fatalf("status: %+v", st)
	}
	checkCalls(t, f.executor(set), "remote")
	h.mu.Lock()
	auth := slices.Clone(h.auth)
	h.mu.Unlock()
	if len(auth) == 0 || slices.ContainsFunc(auth, func(a string) bool { return a != "Bearer mcp-secret" }) {
		t.Errorf("Authorization headers seen: %q", auth)
	}

	// list_changed from the server.
	mcp.AddTool(h.srv, &mcp.Tool{Name: "extra", Description: "Added while connected."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "extra"}}}, nil, nil
		})
	<-f.changes
	if !slices.Contains(names(f.m.Tools(set)), "remote__extra") {
		t.Fatalf("extra not listed: %v", names(f.m.Tools(set)))
	}

	// The server goes away: the tools stay, calls fail clearly, and the
	// status says so; when it is back, calls work again.
	e := f.executor(set)
	h.stop()
	res := execute(t, e, context.Background(), "remote__echo", `{"message": "x"}`)
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "remote") {
		t.Errorf("call while down: %+v", res.Error)
	}
	eventually(t, "the status to show the server down", func() bool {
		st := f.m.Status()["remote"]
		return st.State == "reconnecting" && st.Error != ""
	})
	res = execute(t, e, context.Background(), "remote__echo", `{"message": "x"}`)
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "MCP server remote is unreachable") {
		t.Errorf("call while reconnecting: %+v", res.Error)
	}
	h.start()
	eventually(t, "reconnection", func() bool { return f.m.Status()["remote"].State == "connected" })
	if res := execute(t, e, context.Background(), "remote__echo", `{"message": "back"}`); string(res.Output) != `"echo: back"` {
		t.Errorf("call after reconnection: %s %+v", res.Output, res.Error)
	}
}

func TestUnreachableAtStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there yet
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("later", "http://"+addr+"/mcp"))})
	st := f.m.Status()["later"]
	if st.State != "unreachable" || !strings.Contains(st.Error, "connect") {
		t.Fatalf("status: %+v", st)
	}
	if tools := f.m.Tools(set); len(tools) != 0 {
		t.Fatalf("tools of a server never reached: %v", names(tools))
	}
	b, err := json.Marshal(f.m.Readiness())
	if err != nil || !strings.Contains(string(b), `"later":{"state":"unreachable"`) {
		t.Errorf("readiness: %s %v", b, err)
	}
	newHTTPServer(t, addr)
	<-f.changes
	if !slices.Contains(names(f.m.Tools(set)), "later__echo") {
		t.Fatalf("tools after the server came up: %v", names(f.m.Tools(set)))
	}
}

func TestReloadKeepsUnchangedConnections(t *testing.T) {
	f := newFixture(t)
	pidOf := func(set *Set, prefix string) float64 {
		res := execute(t, f.executor(set), context.Background(), prefix+"__meta", `{}`)
		var out struct{ Pid float64 }
		_ = json.Unmarshal(res.Output, &out)
		return out.Pid
	}
	a := f.server(stdioDoc(t, "keep", ""))
	b := f.server(stdioDoc(t, "drop", ""))
	set1 := f.m.Ensure(context.Background(), []*Server{a, b})
	f.m.Retain(set1)
	keepPid, dropPid := pidOf(set1, "keep"), pidOf(set1, "drop")

	// Same transport, other filters: the same connection.
	a2 := f.server(stdioDoc(t, "keep", "  include: [echo, meta]\n"))
	// Same name, other environment: a new connection.
	c := f.server(stdioDoc(t, "drop", "    env: [MODE=other]\n"))
	slow := make(chan *registry.Result, 1)
	go func() {
		res, _ := f.executor(set1).Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "drop__slow", TimeoutMs: 1500})
		slow <- res
	}()
	eventually(t, "the slow call to start", func() bool {
		f.m.mu.Lock()
		defer f.m.mu.Unlock()
		for _, cn := range f.m.conns {
			if cn.srv.name == "drop" {
				cn.mu.Lock()
				defer cn.mu.Unlock()
				return cn.session != nil
			}
		}
		return false
	})
	set2 := f.m.Ensure(context.Background(), []*Server{a2, c})
	f.m.Retain(set2)
	if got := names(f.m.Tools(set2)); !slices.Equal(got[:2], []string{"drop__a_b", "drop__add"}) || !slices.Contains(got, "keep__echo") || slices.Contains(got, "keep__add") {
		t.Errorf("tools after reload: %v", got)
	}
	if p := pidOf(set2, "keep"); p != keepPid {
		t.Errorf("unchanged server reconnected: pid %v, was %v", p, keepPid)
	}
	if p := pidOf(set2, "drop"); p == dropPid || p == 0 {
		t.Errorf("changed server kept its connection: pid %v", p)
	}
	// The call that started before the reload finished on its old
	// connection (here: it ran into its own timeout, not a closed
	// connection).
	if res := <-slow; res.Code() != registry.CodeTimeout {
		t.Errorf("in-flight call across the reload: %+v", res.Error)
	}
	if len(f.m.Status()) != 2 {
		t.Errorf("status after reload: %v", f.m.Status())
	}
}

func TestExportNames(t *testing.T) {
	tool := func(n string) *mcp.Tool { return &mcp.Tool{Name: n} }
	long := strings.Repeat("x", 80)
	got := exportNames("srv", []*mcp.Tool{tool("read_file"), tool("files.read"), tool("files/read"), tool("__weird__"), tool("a__b"), tool(long), tool("...")})
	if got["read_file"] != "read_file" || got["a__b"] != "a_b" || got["__weird__"] != "weird" || got["..."] != "tool" {
		t.Errorf("names: %v", got)
	}
	// files.read and files/read both sanitise to files_read: the first in
	// name order keeps it, the other gets a hash.
	if got["files.read"] != "files_read" || !strings.HasPrefix(got["files/read"], "files_read-") {
		t.Errorf("collision: %q %q", got["files.read"], got["files/read"])
	}
	for remote, export := range got {
		if err := registry.ValidateName(registry.JoinName("srv", export)); err != nil {
			t.Errorf("%s -> %s: %v", remote, export, err)
		}
	}
	again := exportNames("srv", []*mcp.Tool{tool(long), tool("files/read"), tool("files.read")})
	if again[long] != got[long] || again["files/read"] != got["files/read"] {
		t.Error("the mapping is not deterministic")
	}
}

func TestDecodeErrors(t *testing.T) {
	f := newFixture(t)
	head := "apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: s}\nspec:\n"
	for _, tc := range []struct{ doc, want string }{
		{head + "  include: ['*']\n", "has no transport"},
		{head + "  stdio: {command: no-such-program-xyz}\n", "not installed"},
		{head + "  stdio: {command: /bin/true}\n  http: {url: http://127.0.0.1:1/mcp}\n", "not both"},
		{head + "  http: {url: ftp://x}\n", "absolute http or https URL"},
		{head + "  http: {url: http://127.0.0.1:1/mcp, headers: {Authorization: {valueFrom: {env: NOPE}}}}\n", "NOPE is not set"},
		{head + "  http: {url: http://127.0.0.1:1/mcp}\n  tier: harmless\n", "unknown tier"},
		{head + "  http: {url: http://127.0.0.1:1/mcp}\n  tools: {x: {tier: nope}}\n", "tools.x.tier"},
		{head + "  http: {url: http://127.0.0.1:1/mcp}\n  include: ['[']\n", "glob"},
		{head + "  http: {url: http://127.0.0.1:1/mcp}\n  bogus: 1\n", "line 6: field bogus not found"},
		{strings.Replace(head, "name: s}", "name: a__b}", 1) + "  http: {url: http://127.0.0.1:1/mcp}\n", "metadata.name"},
	} {
		if _, err := f.decode(tc.doc); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "mcp.yaml") {
			t.Errorf("%q: got %v, want %q", tc.doc, err, tc.want)
		}
	}
}

type forecastArgs struct {
	City   string `json:"city"`
	Broken bool   `json:"broken,omitempty"`
}

// addOutputSchemaTools gives srv tools that declare output schemas: one
// whose structured content breaks its schema when asked to, one whose
// schema is not an object (MCP allows that since 2026-07-28; toolsvc
// imports the tool without it).
func addOutputSchemaTools(srv *mcp.Server) {
	srv.AddTool(&mcp.Tool{Name: "forecast", Description: "Tomorrow's forecast.",
		InputSchema:  json.RawMessage(`{"type":"object","required":["city"],"properties":{"city":{"type":"string"},"broken":{"type":"boolean"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","required":["city","celsius"],"properties":{"city":{"type":"string"},"celsius":{"type":"number"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in forecastArgs
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			out := map[string]any{"city": in.City, "celsius": 21.5}
			if in.Broken {
				out["celsius"] = "warm" // not a number: the server is faulty
			}
			b, _ := json.Marshal(out)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: out}, nil
		})
	srv.AddTool(&mcp.Tool{Name: "sizes", Description: "A list of sizes.",
		InputSchema:  json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"array","items":{"type":"integer"}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "[1,2]"}}, StructuredContent: []int{1, 2}}, nil
		})
}

// TestOutputSchemas: a bridged tool takes its server's outputSchema,
// compiled like every custom tool's; its structured content is its
// output, checked against the schema: a mismatch is E_TOOL naming the
// tool as faulty. A schema toolsvc cannot use is left out, the tool kept.
func TestOutputSchemas(t *testing.T) {
	h := newHTTPServer(t, "127.0.0.1:0")
	addOutputSchemaTools(h.srv)
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer mcp-secret"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("remote", h.url()))})
	byName := map[string]*registry.Tool{}
	for _, tl := range f.m.Tools(set) {
		byName[tl.Name] = tl
	}
	forecast, sizes := byName["remote__forecast"], byName["remote__sizes"]
	if forecast == nil || sizes == nil {
		t.Fatalf("tools: %v", slices.Collect(maps.Keys(byName)))
	}
	var schema struct {
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(forecast.OutputSchema, &schema); err != nil || !slices.Equal(schema.Required, []string{"city", "celsius"}) {
		t.Errorf("forecast outputSchema: %s %v", forecast.OutputSchema, err)
	}
	if len(sizes.OutputSchema) != 0 {
		t.Errorf("sizes kept an output schema toolsvc cannot serve: %s", sizes.OutputSchema)
	}
	// The SDK infers add's schema from its Go output type.
	if add := byName["remote__add"]; add == nil || !strings.Contains(string(add.OutputSchema), `"sum"`) {
		t.Errorf("add: no output schema from the server")
	}

	e := f.executor(set)
	ctx := context.Background()
	res := execute(t, e, ctx, "remote__forecast", `{"city": "Oslo"}`)
	if res.Status != registry.StatusOK || string(res.Output) != `{"celsius":21.5,"city":"Oslo"}` {
		t.Errorf("forecast: %s %+v", res.Output, res.Error)
	}
	registered, _ := e.Registry().Lookup("remote__forecast")
	if registered == nil || !registered.HasOutputSchema() {
		t.Fatal("forecast has no compiled output schema")
	}
	res = execute(t, e, ctx, "remote__forecast", `{"city": "Oslo", "broken": true}`)
	if res.Code() != registry.CodeTool || res.Error.Name != "remote__forecast" ||
		!strings.Contains(res.Error.Message, "the tool remote__forecast is faulty") || !strings.Contains(res.Error.Message, "/celsius") {
		t.Errorf("mismatch: %s %+v", res.Output, res.Error)
	}
	if res := execute(t, e, ctx, "remote__sizes", `{}`); res.Status != registry.StatusOK || string(res.Output) != `[1,2]` {
		t.Errorf("sizes: %s %+v", res.Output, res.Error)
	}
}

// TestStdioServerDaemonsDie: a stdio server started under its reaper
// (Options.Launcher) takes what it started with it when its connection
// closes, a daemon in a session of its own included.
func TestStdioServerDaemonsDie(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(o *Options) { o.Launcher = exe })
	set := f.m.Ensure(context.Background(), []*Server{f.server(stdioDoc(t, "reaped", ""))})
	f.m.Retain(set)
	res := execute(t, f.executor(set), context.Background(), "reaped__daemon", `{}`)
	var out struct{ Pid int }
	if err := json.Unmarshal(res.Output, &out); err != nil || out.Pid == 0 {
		t.Fatalf("daemon call: %s (%v)", res.Output, err)
	}
	if res := execute(t, f.executor(set), context.Background(), "reaped__echo", `{"message":"hi"}`); res.Status != registry.StatusOK {
		t.Fatalf("echo under the reaper: %+v", res.Error)
	}
	f.m.Close()
	eventually(t, fmt.Sprintf("the server's daemon (pid %d) to be gone", out.Pid), func() bool {
		return syscall.Kill(out.Pid, 0) == syscall.ESRCH
	})
}

// TestStdioServerNotExecutable: a stdio server under its reaper whose
// program cannot be executed is unreachable with the reason, as it was
// when the service executed it itself, not with the EOF the reaper's
// exit leaves; a relative launcher works from the server's directory.
func TestStdioServerNotExecutable(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(exe))
	rel := "./" + filepath.Base(exe)
	f := newFixture(t, func(o *Options) { o.Launcher = rel })
	foreign := filepath.Join(f.dir, "foreign")
	if err := os.WriteFile(foreign, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: foreign}\nspec:\n  stdio:\n    command: %q\n", foreign)
	servers := []*Server{f.server(doc), f.server(stdioDoc(t, "elsewhere", fmt.Sprintf("    dir: %q\n", f.dir)))}
	set := f.m.Ensure(context.Background(), servers)
	f.m.Retain(set)
	if st := f.m.Status()["foreign"]; st.State != "unreachable" || !strings.Contains(st.Error, "exec "+foreign+": exec format error") {
		t.Errorf("status: %+v", st)
	}
	if res := execute(t, f.executor(set), context.Background(), "elsewhere__echo", `{"message":"hi"}`); res.Status != registry.StatusOK {
		t.Errorf("echo from another directory: %+v", res.Error)
	}
}
