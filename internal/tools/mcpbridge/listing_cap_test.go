package mcpbridge

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestIncludeCountsKeptTools: the bound of 10,000 tools counted every tool
// listed, before include and exclude, so including 10 tools of a server
// of 12,000 gave none ("the server lists more than 10000 tools"). It
// counts the tools kept.
func TestIncludeCountsKeptTools(t *testing.T) {
	const total, page = 12000, 1000
	u := pagingServer(t, func(cursor string) any {
		n, _ := strconv.Atoi(cursor)
		var tools []map[string]any
		for i := n; i < min(n+page, total); i++ {
			tools = append(tools, map[string]any{"name": fmt.Sprintf("t%05d", i), "description": "A tool.", "inputSchema": object()})
		}
		res := map[string]any{"tools": tools}
		if n+page < total {
			res["nextCursor"] = strconv.Itoa(n + page)
		}
		return res
	})
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	doc := strings.Replace(httpDoc("many", u), "include: ['*']", "include: ['t0000*', 't11999']", 1)
	set := f.m.Ensure(context.Background(), []*Server{f.server(doc)})
	got := names(f.m.Tools(set))
	if st := f.m.Status()["many"]; st.State != stateConnected || st.Tools != 11 || len(got) != 11 || got[10] != "many__t11999" {
		t.Errorf("status %+v, tools %v; want 11 tools", st, got)
	}
}

// TestRepeatedCursor: a server that gave the same nextCursor again was
// asked for the same page 10,000 times an attempt. The second time the
// cursor is given ends the listing, saying so.
func TestRepeatedCursor(t *testing.T) {
	var lists atomic.Int64
	u := pagingServer(t, func(cursor string) any {
		lists.Add(1)
		return map[string]any{"tools": []map[string]any{{"name": "p", "description": "A tool.", "inputSchema": object()}}, "nextCursor": "same"}
	})
	f := newFixture(t, func(o *Options) { o.MinBackoff, o.MaxBackoff = 10e9, 10e9 })
	f.env["MCP_TOKEN"] = "Bearer x"
	f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("loop", u))})
	st := f.m.Status()["loop"]
	if want := `tools/list: the server gave the cursor "same" twice`; st.State != stateUnreachable || !strings.Contains(st.Error, want) {
		t.Errorf("status %+v, want the error %q", st, want)
	}
	if n := lists.Load(); n > 3 {
		t.Errorf("%d pages asked for", n)
	}
}

// TestEndlessPagesAreBounded: a server that gives a new cursor with every
// page, and no tools, was asked until the attempt's timeout.
func TestEndlessPagesAreBounded(t *testing.T) {
	var lists atomic.Int64
	u := pagingServer(t, func(cursor string) any {
		n, _ := strconv.Atoi(cursor)
		lists.Add(1)
		return map[string]any{"tools": []map[string]any{}, "nextCursor": strconv.Itoa(n + 1)}
	})
	f := newFixture(t, func(o *Options) { o.MinBackoff, o.MaxBackoff = 10e9, 10e9 })
	f.env["MCP_TOKEN"] = "Bearer x"
	f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("endless", u))})
	st := f.m.Status()["endless"]
	if want := "tools/list: the server's tools take more than 1,000 pages"; st.State != stateUnreachable || !strings.Contains(st.Error, want) {
		t.Errorf("status %+v, want the error %q", st, want)
	}
	if n := lists.Load(); n > 1000 {
		t.Errorf("%d pages asked for", n)
	}
}

// TestFilterChangeListsAgain: listings keep only the tools include and
// exclude pick, so a reload that keeps a server's connection but picks
// other tools lists them again before its registry is built.
func TestFilterChangeListsAgain(t *testing.T) {
	f := newFixture(t)
	s1 := f.server(stdioDoc(t, "local", "  include: [echo]\n"))
	set := f.m.Ensure(context.Background(), []*Server{s1})
	if got := names(f.m.Tools(set)); !slices.Equal(got, []string{"local__echo"}) {
		t.Fatalf("tools %v", got)
	}
	s2 := f.server(stdioDoc(t, "local", "  include: [echo, add]\n"))
	set = f.m.Ensure(context.Background(), []*Server{s2})
	if got := names(f.m.Tools(set)); !slices.Equal(got, []string{"local__add", "local__echo"}) {
		t.Errorf("tools after the reload %v", got)
	}
	if st := f.m.Status()["local"]; st.Tools != 2 {
		t.Errorf("status %+v", st)
	}
}

// TestPlainNameKept: a tool whose name needs no change keeps it; a tool
// whose name sanitises to it gets the hash suffix, whatever their order.
func TestPlainNameKept(t *testing.T) {
	tool := func(n string) *mcp.Tool { return &mcp.Tool{Name: n} }
	got := exportNames("bombs", []*mcp.Tool{tool("a.b"), tool("a_b"), tool("a/b")})
	if got["a_b"] != "a_b" || got["a.b"] != "a_b-2e7336" || !strings.HasPrefix(got["a/b"], "a_b-") || got["a.b"] == got["a/b"] {
		t.Errorf("names %v", got)
	}
}
