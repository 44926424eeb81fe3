package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// TestCutOutputIsReadOn: a cut result's marker says how to read on, and
// GET /calls/{id}/output pages through the whole output, for its caller
// only and only while the tool is in the caller's catalog.
func TestCutOutputIsReadOn(t *testing.T) {
	st := openStore(t)
	call := []registry.Scope{registry.ScopeCall}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		o.Spill = registry.NewSpiller(registry.SpillOptions{Store: st, Registerer: prometheus.NewRegistry()})
		d.Auth = staticAuth{
			"alice":  {ID: "alice", Scopes: call},
			"bob":    {ID: "bob", Scopes: call},
			"alice2": {ID: "alice", Scopes: call, Tools: []string{"text__*"}},
			"carol":  {ID: "carol", Scopes: call, Tools: []string{"test__*"}},
		}
	})
	as := func(token string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	}
	r := e.do("POST", "/calls", []byte(`{"toolCallId":"big1","toolName":"test__big"}`), as("alice"), true)
	var res registry.Result
	r.json(t, &res)
	if !res.Truncated || len(res.Output) > 16384+400 {
		t.Fatalf("truncated=%v, %d bytes of output", res.Truncated, len(res.Output))
	}
	var text string
	if err := json.Unmarshal(res.Output, &text); err != nil {
		t.Fatalf("cut output is not a JSON string: %v", err)
	}
	m := regexp.MustCompile(`\[output truncated: (\d+) bytes total, (\d+) omitted; read on with result__read \{"toolCallId":"big1","offset":(\d+)\}\]$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no read-on marker in %q", text[max(0, len(text)-300):])
	}
	want, _ := json.Marshal(map[string]string{"data": strings.Repeat("x€", 10<<20/4)})
	if m[1] != strconv.Itoa(len(want)) || res.OriginalBytes != int64(len(want)) {
		t.Errorf("marker total %s, originalBytes %d; the output is %d bytes", m[1], res.OriginalBytes, len(want))
	}
	kept, _ := strconv.Atoi(m[3])
	if !strings.HasPrefix(text, string(want[:kept])) {
		t.Errorf("the marker's offset %d is not where the shown text ends", kept)
	}

	// Page through it all, 1 MiB at a time, from where the marker says.
	got := append([]byte(nil), want[:kept]...)
	for off := kept; ; {
		r := e.do("GET", fmt.Sprintf("/calls/big1/output?offset=%d&limit=%d", off, 1<<20), nil, as("alice"), true)
		if r.status != 200 {
			t.Fatalf("GET output at %d: %d %s", off, r.status, r.body)
		}
		if len(r.body) == 0 {
			break
		}
		got = append(got, r.body...)
		next, _ := strconv.Atoi(r.header.Get("Toolsvc-Next-Offset"))
		if next != off+len(r.body) || r.header.Get("Toolsvc-Total-Bytes") != strconv.Itoa(len(want)) {
			t.Fatalf("headers %v at offset %d", r.header, off)
		}
		off = next
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, want the %d of the output", len(got), len(want))
	}
	// Ranges longer than one piece the server reads at a time, at an
	// offset and a length that are not whole pieces, come back whole.
	for _, c := range []struct{ off, limit int }{{kept, 16 << 20}, {kept + 7, 1<<20 + 3}, {1, 3<<20 - 1}} {
		r := e.do("GET", fmt.Sprintf("/calls/big1/output?offset=%d&limit=%d", c.off, c.limit), nil, as("alice"), true)
		end := min(c.off+c.limit, len(want))
		if r.status != 200 || !bytes.Equal(r.body, want[c.off:end]) || r.header.Get("Toolsvc-Next-Offset") != strconv.Itoa(end) {
			t.Errorf("offset %d limit %d: %d, %d bytes, next %s; want %d bytes", c.off, c.limit, r.status, len(r.body), r.header.Get("Toolsvc-Next-Offset"), end-c.off)
		}
	}

	for _, c := range []struct{ token, path string }{
		{"bob", "/calls/big1/output"},                 // another caller
		{"alice2", "/calls/big1/output"},              // the tool is not in this caller's catalog
		{"alice", "/calls/big1/output?stream=stdout"}, // no such stream
		{"alice", "/calls/nope/output"},
	} {
		if r := e.do("GET", c.path, nil, as(c.token), true); r.status != 404 {
			t.Errorf("%s GET %s: %d %s, want 404", c.token, c.path, r.status, r.body)
		}
	}
	for _, q := range []string{"offset=-1", "limit=0", "limit=99999999999", "stream=x"} {
		if r := e.do("GET", "/calls/big1/output?"+q, nil, as("alice"), false); r.status != 400 {
			t.Errorf("?%s: %d, want 400", q, r.status)
		}
	}

	// A caller without result__read in its catalog is not told to call it;
	// the marker names the route, which serves it.
	r = e.do("POST", "/calls", []byte(`{"toolCallId":"big/2","toolName":"test__big"}`), as("carol"), true)
	r.json(t, &res)
	_ = json.Unmarshal(res.Output, &text)
	m = regexp.MustCompile(`; the full output is kept, and the operator can read it with GET /calls/big%2F2/output\?offset=(\d+)\]$`).FindStringSubmatch(text)
	if m == nil || strings.Contains(text, "result__read") {
		t.Fatalf("marker for a caller without result__read: %q", text[max(0, len(text)-300):])
	}
	// (Sent past the contract check, whose router does not match an
	// escaped "/" in a path parameter.)
	req, _ := http.NewRequest("GET", e.ts.URL+"/calls/big%2F2/output?offset="+m[1]+"&limit=10", nil)
	req.Header.Set("Authorization", "Bearer carol")
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, want[kept:kept+10]) {
		t.Errorf("GET the route the marker names: %d %q", resp.StatusCode, body)
	}
}

// spillEnv is an env whose executor keeps cut outputs in a SQLite store.
func spillEnv(t *testing.T) (*env, *sqlite.Store) {
	t.Helper()
	st := openStore(t)
	return newEnv(t, func(d *Deps, o *registry.Options) {
		o.Spill = registry.NewSpiller(registry.SpillOptions{Store: st})
	}), st
}

// rerunning reads outputs through a real executor, and runs the call
// again (replacing its kept output) after the first read.
type rerunning struct {
	*registry.Executor
	once  sync.Once
	rerun func()
}

func (r *rerunning) ReadOutput(ctx context.Context, caller *registry.Caller, catalog []string, id, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	info, data, err := r.Executor.ReadOutput(ctx, caller, catalog, id, stream, offset, limit)
	r.once.Do(r.rerun)
	return info, data, err
}

// TestReplacedOutputBreaksTheRead: a range read while its call runs again
// under the same id (replacing the kept output) ends short, so the client
// never takes the spliced bytes of two outputs for one.
func TestReplacedOutputBreaksTheRead(t *testing.T) {
	e, _ := spillEnv(t)
	if r, res := e.call("/calls", `{"toolCallId":"again","toolName":"test__big"}`); r.status != 200 || !res.Truncated {
		t.Fatalf("first run: %d %s", r.status, r.body)
	}
	exec := e.srv.deps.Executor.(*registry.Executor)
	e.srv.deps.Executor = &rerunning{Executor: exec, rerun: func() {
		if _, err := exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolCallID: "again", ToolName: "test__big"}); err != nil {
			t.Error(err)
		}
	}}
	resp, err := e.ts.Client().Get(e.ts.URL + "/calls/again/output?limit=4194304")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("a read across the replacement ended normally with %d of %s bytes", len(body), resp.Header.Get("Content-Length"))
	}
}

// TestMCPCutOutputLinksToIt: over /mcp a cut result carries a
// resource_link that fetches the whole output.
func TestMCPCutOutputLinksToIt(t *testing.T) {
	e, st := spillEnv(t)
	cs, err := mcpSession(t, e, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "test__big", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var link *mcp.ResourceLink
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	if res.IsError || link == nil || !strings.HasPrefix(link.URI, e.ts.URL+"/calls/call_") || !strings.HasSuffix(link.URI, "/output?stream=output") {
		t.Fatalf("no resource_link to the output: %+v", res.Content)
	}
	r := e.do("GET", strings.TrimPrefix(link.URI, e.ts.URL)+"&limit=16777216", nil, nil, true)
	want, _ := json.Marshal(map[string]string{"data": strings.Repeat("x€", 10<<20/4)})
	if r.status != 200 || !bytes.Equal(r.body, want) {
		t.Errorf("GET %s: %d, %d bytes; want the %d of the output", link.URI, r.status, len(r.body), len(want))
	}
	// A result that was not cut has no link.
	res, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "text__transform", Arguments: map[string]any{"operation": "upper", "text": "hi"}})
	if err != nil || len(res.Content) != 1 {
		t.Errorf("uncut result: %v, %+v", err, res)
	}

	// A caller that may not call result__read gets the link as well.
	narrow := newEnv(t, func(d *Deps, o *registry.Options) {
		o.Spill = registry.NewSpiller(registry.SpillOptions{Store: st})
		d.Auth = staticAuth{"carol": {ID: "carol", Scopes: []registry.Scope{registry.ScopeCall}, Tools: []string{"test__*"}}}
	})
	cs2, err := mcpSession(t, narrow, "carol")
	if err != nil {
		t.Fatal(err)
	}
	defer cs2.Close()
	res, err = cs2.CallTool(context.Background(), &mcp.CallToolParams{Name: "test__big", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	link = nil
	for _, c := range res.Content {
		if l, ok := c.(*mcp.ResourceLink); ok {
			link = l
		}
	}
	if text := res.Content[0].(*mcp.TextContent).Text; res.IsError || link == nil || !strings.HasSuffix(link.URI, "/output?stream=output") || strings.Contains(text, "result__read") {
		t.Fatalf("no resource_link for a caller without result__read: %+v", res.Content)
	}
}

// TestOutputOfACallNotEnded: the output of a call that has not ended is
// not kept yet; the answer says so, rather than that it expired.
func TestOutputOfACallNotEnded(t *testing.T) {
	st := openStore(t)
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		o.Store = st
		o.Spill = registry.NewSpiller(registry.SpillOptions{Store: st, Registerer: prometheus.NewRegistry()})
	})
	if r, res := e.call("/calls", `{"toolName":"test__priv","toolCallId":"waits","arguments":{"n":1}}`); r.status != 202 || res.Approval == nil {
		t.Fatalf("filing: %d %s", r.status, r.body)
	}
	r := e.do("GET", "/calls/waits/output", nil, nil, true)
	if r.status != 404 || !bytes.Contains(r.body, []byte("has not ended")) {
		t.Errorf("the output of a pending call: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/calls/nosuch/output", nil, nil, true); r.status != 404 || bytes.Contains(r.body, []byte("has not ended")) {
		t.Errorf("the output of no call: %d %s", r.status, r.body)
	}
}
