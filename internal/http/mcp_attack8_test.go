package http

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// rpcReply is one answer of a JSON-RPC batch to /mcp.
type rpcReply struct {
	ID     json.RawMessage `json:"id"`
	Result *struct {
		IsError bool `json:"isError"`
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	} `json:"result"`
	Error *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

func (r rpcReply) text() string {
	if r.Result == nil || len(r.Result.Content) == 0 {
		return ""
	}
	return r.Result.Content[0].Text
}

// mcpBatchOf posts a JSON-RPC batch (revision 2025-03-26, which has them)
// of the messages to /mcp.
func mcpBatchOf(t *testing.T, e *env, msgs []string) []rpcReply {
	t.Helper()
	r := e.do("POST", "/mcp", []byte("["+strings.Join(msgs, ",")+"]"), mcpPost("2025-03-26"), false)
	var out []rpcReply
	r.json(t, &out)
	if len(out) != len(msgs) {
		t.Fatalf("%d answers to %d messages: %.500s", len(out), len(msgs), r.body)
	}
	return out
}

func toolCallMsg(id int, name string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, id, name)
}

// running counts the calls of some tools running at once.
type running struct {
	now, peak atomic.Int64
	// alone is false once a call of another tier than read_only ran
	// beside another call.
	mu       sync.Mutex
	notAlone []string
}

func (c *running) tool(name string, tier registry.Tier, limit int, d time.Duration) *registry.Tool {
	return &registry.Tool{Definition: registry.Definition{Name: name, Description: "takes a while", Tier: tier, Parameters: json.RawMessage(`{"type":"object"}`), MaxConcurrency: limit},
		Handler: registry.Func(func(ctx context.Context, _ *registry.Request) (any, error) {
			n := c.now.Add(1)
			defer c.now.Add(-1)
			for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
			}
			check := func() {
				if tier != registry.ReadOnly && c.now.Load() != 1 {
					c.mu.Lock()
					c.notAlone = append(c.notAlone, name)
					c.mu.Unlock()
				}
			}
			check()
			time.Sleep(d)
			check()
			return map[string]any{"ok": true}, nil
		})}
}

// The calls of a JSON-RPC batch on /mcp are admitted as those of
// POST /calls/batch are: beyond a tool's own limit they wait for the
// batch's own calls to end. The SDK runs a batch's messages at once, so a
// batch of 20 calls of a tool that runs 8 at once had 12 answered "The
// service is busy". A call of another tier runs alone.
func TestMCPBatchCallsWaitForTheBatchsOwnCalls(t *testing.T) {
	c := &running{}
	e := mcpEnvWith(t, nil,
		c.tool("slow__read", registry.ReadOnly, 2, 50*time.Millisecond),
		c.tool("slow__write", registry.SideEffecting, 0, 50*time.Millisecond))
	var msgs []string
	for i := range 7 {
		msgs = append(msgs, toolCallMsg(i+1, "slow__read"))
	}
	for _, r := range mcpBatchOf(t, e, msgs) {
		if r.Result == nil || r.Result.IsError {
			t.Errorf("call %s of the batch: %s %+v", r.ID, r.text(), r.Error)
		}
	}
	if p := c.peak.Load(); p != 2 {
		t.Errorf("%d calls of a tool limited to 2 ran at once", p)
	}

	c.peak.Store(0)
	msgs = nil
	for i := range 9 {
		name := "slow__read"
		if i%3 == 1 {
			name = "slow__write"
		}
		msgs = append(msgs, toolCallMsg(i+1, name))
	}
	for _, r := range mcpBatchOf(t, e, msgs) {
		if r.Result == nil || r.Result.IsError {
			t.Errorf("call %s of the mixed batch: %s %+v", r.ID, r.text(), r.Error)
		}
	}
	if len(c.notAlone) > 0 {
		t.Errorf("calls of a side_effecting tool ran beside other calls of the batch: %v", c.notAlone)
	}
}

// holdTool is a tool whose calls run until release is closed; started
// gets a value as each starts.
func holdTool(name string, limit int, started chan<- struct{}, release <-chan struct{}) *registry.Tool {
	return &registry.Tool{Definition: registry.Definition{Name: name, Description: "holds its slot", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`), MaxConcurrency: limit},
		Handler: registry.Func(func(ctx context.Context, _ *registry.Request) (any, error) {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return "held", nil
		})}
}

// A call refused for want of capacity says whose limit refused it: the
// tool's own or the service's; one of a batch, that it waited.
func TestMCPOverloadNamesTheLimit(t *testing.T) {
	call := func(t *testing.T, e *env, body string) rpcReply {
		r := e.do("POST", "/mcp", []byte(body), mcpPost("2025-03-26"), false)
		var one rpcReply
		if strings.HasPrefix(string(r.body), "[") {
			var all []rpcReply
			r.json(t, &all)
			one = all[0]
		} else {
			r.json(t, &one)
		}
		return one
	}
	hold := func(t *testing.T, e *env, started chan struct{}) {
		r := httptest.NewRequest("POST", "/calls", strings.NewReader(`{"toolName":"hold__one","arguments":{}}`))
		r.Header.Set("Content-Type", "application/json")
		go e.srv.ServeHTTP(httptest.NewRecorder(), r)
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("the holding call did not start")
		}
	}

	t.Run("tool", func(t *testing.T) {
		started, release := make(chan struct{}, 4), make(chan struct{})
		defer close(release)
		e := newEnv(t, func(d *Deps, o *registry.Options) {
			d.Batch.CapacityWait = 50 * time.Millisecond
			reg, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384}, holdTool("hold__one", 1, started, release))
			if err != nil {
				t.Fatal(err)
			}
			o.Registry = reg
		})
		hold(t, e, started)
		got := call(t, e, toolCallMsg(1, "hold__one")).text()
		if want := "Tool hold__one is busy: it runs at most 1 calls at once, and that many are running; this call did not run"; !strings.HasPrefix(got, want) {
			t.Errorf("a call over the tool's limit:\n got %q\nwant %q…", got, want)
		}
		got = call(t, e, "["+toolCallMsg(1, "hold__one")+"]").text()
		if want := "Tool hold__one is busy: it runs at most 1 calls at once, and that many are running, and none ended within 50ms; this call did not run"; !strings.HasPrefix(got, want) {
			t.Errorf("a call of a batch over the tool's limit:\n got %q\nwant %q…", got, want)
		}
	})
	t.Run("service", func(t *testing.T) {
		started, release := make(chan struct{}, 4), make(chan struct{})
		defer close(release)
		e := newEnv(t, func(d *Deps, o *registry.Options) {
			o.MaxConcurrency = 1
			reg, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384}, append(o.Registry.List(nil, registry.Filter{}), holdTool("hold__one", 0, started, release))...)
			if err != nil {
				t.Fatal(err)
			}
			o.Registry = reg
		})
		hold(t, e, started)
		got := call(t, e, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"text__transform","arguments":{"operation":"upper","text":"a"}}}`).text()
		if want := "The service is busy: it is at its limit of tool calls running at once; this call did not run"; !strings.HasPrefix(got, want) {
			t.Errorf("a call over the service's limit:\n got %q\nwant %q…", got, want)
		}
	})
}

// The id check reads a message as the SDK does: by the member "id"
// exactly. It read a struct field, which encoding/json fills from "Id"
// too (the last of them), so two requests numbered 8.1 and 8.9 got one
// answer, with id 8, and a request with id 1 was refused for its "Id".
func TestMCPIdCheckReadsTheIdTheSDKReads(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		name, body, want string
	}{
		{"batch", `[{"jsonrpc":"2.0","id":8.1,"Id":1,"method":"ping"},{"jsonrpc":"2.0","id":8.9,"Id":2,"method":"ping"}]`, "message 1 of the batch: the id 8.1 is not an integer"},
		{"single", `{"jsonrpc":"2.0","id":1.5,"Id":2,"method":"ping"}`, "the id 1.5 is not an integer"},
		{"single, lower case last", `{"jsonrpc":"2.0","Id":2,"id":1.5,"method":"ping"}`, "the id 1.5 is not an integer"},
		{"the same id twice in a batch", `[{"jsonrpc":"2.0","id":3,"Id":1,"method":"ping"},{"jsonrpc":"2.0","id":3,"Id":2,"method":"ping"}]`, "messages 1 and 2 of the batch have the same id 3"},
	} {
		r := e.do("POST", "/mcp", []byte(c.body), mcpPost("2025-03-26"), false)
		id, code, msg := rpcErrorOf(t, r)
		if r.status != http.StatusBadRequest || id != "null" || code != -32600 || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d id %s code %d %q; want -32600 %q", c.name, r.status, id, code, msg, c.want)
		}
	}
	// A member "Id" is not the id: the request with id 1 is answered.
	r := e.do("POST", "/mcp", []byte(`{"jsonrpc":"2.0","id":1,"Id":1.5,"method":"ping"}`), mcpPost("2025-03-26"), false)
	if r.status != 200 || string(r.body) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Errorf(`{"id":1,"Id":1.5}: %d %s`, r.status, r.body)
	}
}

// manyTools is n read_only tools with a few typed parameters each.
func manyTools(n int) []*registry.Tool {
	var props []string
	for j := range 10 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string","description":"parameter %d","maxLength":100}`, j, j))
	}
	var out []*registry.Tool
	for i := range n {
		out = append(out, echoTool(fmt.Sprintf("big__e%03d", i), `{"type":"object","properties":{`+strings.Join(props, ",")+`}}`))
	}
	return out
}

func postMCP(h http.Handler, body string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
	for k, v := range mcpPost("2025-11-25") {
		r.Header.Set(k, v)
	}
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

const toolsListMsg = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`

// tools/list answers from a server kept per catalog view and registry,
// rather than one built for every request: giving the SDK 514 tools cost
// 64 ms of CPU per list, nine times what GET /tools?format=mcp costs. A
// list costs about what that catalog costs, each caller sees their own
// catalog, and a reload shows at once.
func TestMCPToolsListIsKept(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{
			"reader": {ID: "reader", MaxTier: registry.ReadOnly},
			"texts":  {ID: "texts", Tools: []string{"text__*"}},
		}
		reg, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384}, append(o.Registry.List(nil, registry.Filter{}), manyTools(300)...)...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
	names := func(token string) []string {
		w := postMCP(e.srv, toolsListMsg, map[string]string{"Authorization": "Bearer " + token})
		var list struct {
			Result struct {
				Tools []struct{ Name string } `json:"tools"`
			} `json:"result"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
			t.Fatalf("tools/list as %s: %v %.300s", token, err, w.Body)
		}
		var out []string
		for _, tl := range list.Result.Tools {
			out = append(out, tl.Name)
		}
		return out
	}
	reg := e.srv.deps.Executor.Registry()
	want := func(c *registry.Caller) int { return len(reg.List(c, registry.Filter{})) }
	for range 2 {
		if got := names("texts"); len(got) != 1 || got[0] != "text__transform" {
			t.Errorf("texts sees %v", got)
		}
		if got := names("reader"); len(got) != want(&registry.Caller{MaxTier: registry.ReadOnly}) {
			t.Errorf("reader sees %d tools", len(got))
		}
	}

	auth := map[string]string{"Authorization": "Bearer reader"}
	allocs := func(f func()) float64 { return testing.AllocsPerRun(5, f) }
	list := allocs(func() { postMCP(e.srv, toolsListMsg, auth) })
	catalog := allocs(func() {
		r := httptest.NewRequest("GET", "/tools?format=mcp", nil)
		r.Header.Set("Authorization", "Bearer reader")
		e.srv.ServeHTTP(httptest.NewRecorder(), r)
	})
	// Building the list took 50,000 allocations for 300 tools; rendering
	// it takes about 800 (1,700 under the race detector).
	if list > 10_000 {
		t.Errorf("tools/list of 300 tools took %.0f allocations (GET /tools?format=mcp %.0f): the list is built again for every request", list, catalog)
	}

	// A reload shows in the next list.
	exec := e.srv.deps.Executor.(*registry.Executor)
	next, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384}, append(reg.List(nil, registry.Filter{}), echoTool("text__new", `{"type":"object"}`))...)
	if err != nil {
		t.Fatal(err)
	}
	exec.Load(next, nil)
	if got := names("texts"); strings.Join(got, ",") != "text__new,text__transform" {
		t.Errorf("after a reload texts sees %v", got)
	}
}

// The servers kept are bounded: a caller of a new catalog view each time
// (say, JWTs with tool globs of their own) does not grow them.
func TestMCPKeptServersAreBounded(t *testing.T) {
	callers := staticAuth{}
	for i := range 3 * maxMCPServers {
		callers[fmt.Sprint("c", i)] = &registry.Caller{ID: fmt.Sprint("c", i), Tools: []string{fmt.Sprintf("nothing%d__*", i), "text__*"}}
	}
	e := newEnv(t, func(d *Deps, o *registry.Options) { d.Auth = callers })
	m := newMCPServers(e.srv)
	reg := e.srv.deps.Executor.Registry()
	for _, c := range callers {
		m.whole(reg, c)
	}
	if n := len(m.views); n > maxMCPServers {
		t.Errorf("%d servers kept; at most %d may be", n, maxMCPServers)
	}
	// The view used last is kept.
	last := callers["c0"]
	m.whole(reg, last)
	m.whole(reg, callers["c1"])
	if m.views[catalogView(last)] == nil {
		t.Error("a view just used was dropped")
	}
}

// BenchmarkMCPToolsList measures a tools/list of 515 tools over /mcp
// against GET /tools?format=mcp of the same catalog.
func BenchmarkMCPToolsList(b *testing.B) {
	e := newEnv(b, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384}, append(o.Registry.List(nil, registry.Filter{}), manyTools(515-o.Registry.Len())...)...)
		if err != nil {
			b.Fatal(err)
		}
		o.Registry = reg
	})
	b.Run("mcp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if w := postMCP(e.srv, toolsListMsg, nil); w.Code != 200 {
				b.Fatal(w.Code)
			}
		}
	})
	b.Run("format=mcp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := httptest.NewRecorder()
			e.srv.ServeHTTP(w, httptest.NewRequest("GET", "/tools?format=mcp", nil))
			if w.Code != 200 {
				b.Fatal(w.Code)
			}
		}
	})
}

// /mcp quotes back what the client sent cut, as problem details do: the
// SDK answered a tools/call of a 1 MB name with the whole name, and a
// header that does not match the body with the whole header, and an
// approval's answer echoed a 500 KB requestState whole.
func TestMCPErrorsQuoteTheClientCut(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("a", 200_000)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	for _, c := range []struct {
		name, body, want string
		code             int
		header           map[string]string
	}{
		{"tool name", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + long + `","arguments":{}}}`, "unknown tool \"aaa", -32602, nil},
		{"requestState", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"text__transform","arguments":{},"requestState":"` + long + `","inputResponses":{"approval":{"action":"accept"}}}}`, "requestState \"aaa", -32602, nil},
		{"method", `{"jsonrpc":"2.0","id":1,"method":"` + long + `"}`, "aaa", -32601, nil},
		{"Mcp-Name header", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"text__transform","arguments":{},` + meta + `}}`, "Mcp-Name header value 'aaa", -32020,
			map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": long}},
	} {
		w := postMCP(e.srv, c.body, c.header)
		var r rpcReply
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || r.Error == nil {
			t.Errorf("%s: %d %v %.200s", c.name, w.Code, err, w.Body)
			continue
		}
		if w.Body.Len() > maxDetailBytes+200 || r.Error.Code != c.code || !strings.Contains(r.Error.Message, c.want) {
			t.Errorf("%s: %d bytes, code %d, %.200s…", c.name, w.Body.Len(), r.Error.Code, r.Error.Message)
		}
	}
}

// An Mcp-Protocol-Version the server does not speak is answered naming
// the header and the revisions it does; the SDK called a future one
// "missing or invalid _meta field".
func TestMCPUnknownVersionNamesTheHeader(t *testing.T) {
	e := newEnv(t)
	for _, v := range []string{"2099-01-01", "2024-01-01", strings.Repeat("9", 5000)} {
		w := postMCP(e.srv, toolsListMsg, map[string]string{"Mcp-Protocol-Version": v})
		var r rpcReply
		if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || r.Error == nil {
			t.Fatalf("%.20s: %d %v %s", v, w.Code, err, w.Body)
		}
		var data struct {
			Supported []string `json:"supported"`
		}
		_ = json.Unmarshal(r.Error.Data, &data)
		if w.Code != 400 || r.Error.Code != -32022 || string(r.ID) != "1" || !strings.Contains(r.Error.Message, "Mcp-Protocol-Version header names") ||
			!strings.Contains(r.Error.Message, "2025-11-25") || !strings.Contains(r.Error.Message, "2026-07-28") || len(data.Supported) == 0 || w.Body.Len() > 2*maxEchoBytes+500 {
			t.Errorf("%.20s: %d %.600s", v, w.Code, w.Body)
		}
	}
}

// The access line of a request no route matched names the route as the
// metrics and the span do, "unmatched": a 405 was logged with route "".
func TestAccessLogNamesUnmatchedRoutes(t *testing.T) {
	logs := &logtest.Buffer{}
	e := newEnv(t, func(d *Deps, o *registry.Options) { d.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	for _, c := range []struct{ method, path string }{{"PUT", "/tools"}, {"GET", "/nowhere"}} {
		r := e.do(c.method, c.path, nil, nil, false)
		var line map[string]any
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"msg":"http request"`) && strings.Contains(l, `"method":"`+c.method+`"`) && strings.Contains(l, fmt.Sprintf(`"status":%d`, r.status)) {
				_ = json.Unmarshal([]byte(l), &line)
			}
		}
		if line["route"] != UnmatchedRoute {
			t.Errorf("%s %s (%d): access line %v", c.method, c.path, r.status, line)
		}
	}
}
