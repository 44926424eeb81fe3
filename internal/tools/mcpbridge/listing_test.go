package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/logtest"
)

// listingServer is an MCP server over streamable HTTP on loopback that
// answers tools/list with tools, whatever they are (the SDK's server would
// refuse some), and serves everything else as the test server does.
func listingServer(t *testing.T, tools []map[string]any) string {
	t.Helper()
	return pagingServer(t, func(string) any { return map[string]any{"tools": tools} })
}

// pagingServer is a listingServer whose answer to tools/list is page's
// for the request's cursor.
func pagingServer(t *testing.T, page func(cursor string) any) string {
	t.Helper()
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newTestServer(func() {}) }, nil)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var params struct {
			Cursor string `json:"cursor"`
		}
		if msg, ok := peekRPC(r, &params); ok && msg.Method == "tools/list" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": page(params.Cursor)})
			return
		}
		sdk.ServeHTTP(w, r)
	})
	return serveMCP(t, h)
}

func object() map[string]any { return map[string]any{"type": "object"} }

// TestDuplicateToolNames: a server that lists one name twice gets one
// tool of that name (the first listed). Both used to be mapped onto the
// same registry name, and the registry refused the whole catalog: the
// service did not start.
func TestDuplicateToolNames(t *testing.T) {
	u := listingServer(t, []map[string]any{
		{"name": "echo", "description": "Echo a message.", "inputSchema": map[string]any{"type": "object", "properties": map[string]any{"message": map[string]any{"type": "string"}}}},
		{"name": "other", "description": "Another.", "inputSchema": object()},
		{"name": "echo", "description": "The same name again.", "inputSchema": object()},
	})
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", u))})
	tools := f.m.Tools(set)
	if got := names(tools); !slices.Equal(got, []string{"s__echo", "s__other"}) {
		t.Fatalf("tools %v, want s__echo and s__other", got)
	}
	if tools[0].Description != "Echo a message." {
		t.Errorf("kept %q, want the first listed", tools[0].Description)
	}
	e := f.executor(set) // fails when the registry refuses the tools
	if res := execute(t, e, context.Background(), "s__echo", `{"message":"hi"}`); string(res.Output) != `"echo: hi"` {
		t.Errorf("s__echo: %s %+v", res.Output, res.Error)
	}
}

// flatSchema has n properties.
func flatSchema(n int) map[string]any {
	props := map[string]any{}
	for i := range n {
		props[fmt.Sprintf("p%05d", i)] = map[string]any{"type": "string"}
	}
	return map[string]any{"type": "object", "properties": props}
}

// nestedSchema nests an object property depth levels deep.
func nestedSchema(depth int) map[string]any {
	s := object()
	for range depth {
		s = map[string]any{"type": "object", "properties": map[string]any{"a": s}}
	}
	return s
}

// TestCostlySchemasLeftOut: the JSON Schema compiler's work grows with the
// square of a schema's subschemas and faster with its depth, and a
// registry build cannot be interrupted: a server listing 20,000 properties
// or 1,000 levels kept the service from starting for minutes. Such
// schemas are left out (the tool, or its output schema), and so are the
// tools past a budget for all of a server's schemas.
func TestCostlySchemasLeftOut(t *testing.T) {
	tools := []map[string]any{
		{"name": "wide", "inputSchema": flatSchema(5000)},
		{"name": "deep", "inputSchema": nestedSchema(300)},
		{"name": "long", "inputSchema": map[string]any{"type": "object", "properties": map[string]any{strings.Repeat("k", 300<<10): object()}}},
		{"name": "small", "inputSchema": flatSchema(10)},
		{"name": "deepout", "inputSchema": object(), "outputSchema": nestedSchema(300)},
	}
	// Eight schemas at the bound fit the server's budget, the ninth not.
	for i := range 9 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("big%d", i), "inputSchema": flatSchema(maxSchemaNodes - 8)})
	}
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", listingServer(t, tools)))})
	got := f.m.Tools(set)
	want := []string{"s__big0", "s__big1", "s__big2", "s__big3", "s__big4", "s__big5", "s__big6", "s__big7", "s__deepout", "s__small"}
	if !slices.Equal(names(got), want) {
		t.Fatalf("tools %v, want %v", names(got), want)
	}
	for _, tool := range got {
		if tool.Name == "s__deepout" && tool.OutputSchema != nil {
			t.Errorf("s__deepout kept its output schema")
		}
	}
	for _, tc := range []struct {
		schema map[string]any
		want   string
	}{
		{flatSchema(5000), "parameters schema: 5002 subschemas, more than the 1024"},
		{nestedSchema(300), "parameters schema: nested deeper than 64 levels"},
	} {
		b, _ := json.Marshal(tc.schema)
		if _, err := schemaSize("parameters", b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("schemaSize: %v, want %q", err, tc.want)
		}
	}
}

// laughSchema has $defs that each apply the next one twice, depth deep:
// a value is validated 2^depth times.
func laughSchema(depth int) map[string]any {
	defs := map[string]any{fmt.Sprintf("a%d", depth): map[string]any{"type": "string"}}
	for i := range depth {
		next := map[string]any{"$ref": fmt.Sprintf("#/$defs/a%d", i+1)}
		defs[fmt.Sprintf("a%d", i)] = map[string]any{"allOf": []any{next, next}}
	}
	return map[string]any{"type": "object", "$defs": defs, "properties": map[string]any{"s": map[string]any{"$ref": "#/$defs/a0"}}}
}

// TestRefFanOutLeftOut: a schema of a few dozen nodes whose $refs apply
// the same subschemas along many paths took 11 s of CPU (2^24
// validations) to check the arguments of every call. Such a schema is
// left out; one whose $refs share a few subschemas, as generated schemas
// do, is kept.
func TestRefFanOutLeftOut(t *testing.T) {
	shared := map[string]any{"type": "object", "$defs": map[string]any{
		"common": map[string]any{"properties": map[string]any{"id": map[string]any{"type": "string"}}},
		"a":      map[string]any{"allOf": []any{map[string]any{"$ref": "#/$defs/common"}}},
		"b":      map[string]any{"allOf": []any{map[string]any{"$ref": "#/$defs/common"}}},
	}, "anyOf": []any{map[string]any{"$ref": "#/$defs/a"}, map[string]any{"$ref": "#/$defs/b"}}}
	tools := []map[string]any{
		{"name": "laugh", "inputSchema": laughSchema(24)},
		{"name": "laughout", "inputSchema": object(), "outputSchema": laughSchema(24)},
		{"name": "shared", "inputSchema": shared},
	}
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", listingServer(t, tools)))})
	got := f.m.Tools(set)
	if !slices.Equal(names(got), []string{"s__laughout", "s__shared"}) {
		t.Fatalf("tools %v, want s__laughout and s__shared", names(got))
	}
	if got[0].OutputSchema != nil {
		t.Errorf("s__laughout kept its output schema")
	}
	b, _ := json.Marshal(laughSchema(24))
	if err := refCycle("parameters", b); err == nil || !strings.Contains(err.Error(), "apply more than 1024 subschemas to one value") {
		t.Errorf("refCycle: %v", err)
	}
	// The listing server does not run the tool: the call passes the
	// arguments' check and reaches it.
	res := execute(t, f.executor(set), context.Background(), "s__shared", `{"id": "x"}`)
	if res.Error == nil || !strings.Contains(res.Error.Message, `unknown tool "shared"`) {
		t.Errorf("a call of s__shared: %s %+v", res.Output, res.Error)
	}
}

// TestManySmallSchemasAreBounded: each subschema costs something to
// compile whatever its schema's size, so a server's tools together have
// at most maxServerSchemaNodes of them. 9,990 tools of 28 subschemas each
// (within the bound on the squares) took 16 s of CPU and 2 GB for each
// rebuild of the catalog, which the server could ask for every second.
func TestManySmallSchemasAreBounded(t *testing.T) {
	var tools []map[string]any
	for i := range 1000 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("t%04d", i), "inputSchema": flatSchema(26)})
	}
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", listingServer(t, tools)))})
	fit := maxServerSchemaNodes / 28
	if got := names(f.m.Tools(set)); len(got) != fit || got[fit-1] != fmt.Sprintf("s__t%04d", fit-1) {
		t.Errorf("%d tools, the last %q; want the first %d", len(got), got[len(got)-1], fit)
	}
}

// TestRenamesAreBounded: a server that lists new names on every change
// (each needing a rename) grew the mappings remembered without end, and
// had each logged, 7,000 lines a second. Only the
// latest listing's mappings are kept, and what is logged about one
// listing is bounded.
func TestRenamesAreBounded(t *testing.T) {
	c := &conn{}
	for v := range 50 {
		names := map[string]string{"same": "same"}
		for i := range 100 {
			names[fmt.Sprintf("t.%d.%d", v, i)] = fmt.Sprintf("t_%d_%d", v, i)
		}
		if fresh := c.noteRenames(names); len(fresh) != 100 {
			t.Fatalf("listing %d: %d new mappings, want 100", v, len(fresh))
		}
		if again := c.noteRenames(names); len(again) != 0 {
			t.Fatalf("listing %d again: %v are new", v, again)
		}
	}
	if len(c.renamed) != 100 {
		t.Errorf("%d mappings remembered, want the latest listing's 100", len(c.renamed))
	}

	var tools []map[string]any
	for i := range 200 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("a.b%03d", i), "inputSchema": object()})
	}
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", listingServer(t, tools)))})
	if got := len(f.m.Tools(set)); got != 200 {
		t.Fatalf("%d tools, want 200", got)
	}
	out := logs.String()
	if n := strings.Count(out, "tool renamed"); n != maxListingNotes {
		t.Errorf("%d renames logged, want %d", n, maxListingNotes)
	}
	if !strings.Contains(out, "notes=180") {
		t.Errorf("the renames not logged are not counted:\n%s", out)
	}
}

// logged is what a lineLogger logged, on a clock the test moves.
type logged struct {
	now     time.Time
	lines   []string
	dropped int // as reported with the lines
}

// lineLogger returns a lineLogger that logs into g.
func (g *logged) lineLogger() *lineLogger {
	g.now = time.Unix(1000, 0)
	return &lineLogger{now: func() time.Time { return g.now }, log: func(line string, d int) {
		g.lines = append(g.lines, line)
		g.dropped += d
	}}
}

// TestStderrLinesAreRateLimited: a stdio server that writes to stderr
// without end filled the service's log (9 MB a second); at most
// maxLogLines lines a second are logged, and the next line logged says
// how many were left out.
func TestStderrLinesAreRateLimited(t *testing.T) {
	var g logged
	l := g.lineLogger()
	io.WriteString(l, strings.Repeat("x\n", 10000)+strings.Repeat("y", 5000)+"\n")
	if len(g.lines) != maxLogLines {
		t.Fatalf("%d lines logged in one second, want %d", len(g.lines), maxLogLines)
	}
	g.now = g.now.Add(time.Second)
	io.WriteString(l, "later\n")
	if len(g.lines) != maxLogLines+1 || g.lines[maxLogLines] != "later" || g.dropped != 10001-maxLogLines {
		t.Errorf("after a second: %d lines, last %q, %d reported dropped", len(g.lines), g.lines[len(g.lines)-1], g.dropped)
	}
	g.now = g.now.Add(time.Second)
	io.WriteString(l, strings.Repeat("z", 5000)+"\n")
	if got := g.lines[len(g.lines)-1]; len(got) != maxLogLine {
		t.Errorf("a long line logged as %d bytes, want %d", len(got), maxLogLine)
	}
}

// TestStderrTailIsLogged: a server that dies writing more lines than the
// rate allows (a traceback, whose last line says why) has the count of
// the lines left out and the last of them logged when it has ended; they
// used to wait for a next line that never came. So has a last line
// without its newline.
func TestStderrTailIsLogged(t *testing.T) {
	var g logged
	l := g.lineLogger()
	for i := range 40 {
		fmt.Fprintf(l, "frame %d\n", i)
	}
	io.WriteString(l, "RuntimeError: the reason")
	l.flush()
	want := []string{"frame 35", "frame 36", "frame 37", "frame 38", "frame 39", "RuntimeError: the reason"}
	if got := g.lines[maxLogLines:]; !slices.Equal(got, want) || g.dropped != 40-maxLogLines+1-len(want) {
		t.Errorf("after the flush: %q, %d reported dropped; want %q and %d", got, g.dropped, want, 40-maxLogLines+1-len(want))
	}
	l.flush()
	if len(g.lines) != maxLogLines+len(want) {
		t.Errorf("a second flush logged %q", g.lines[maxLogLines+len(want):])
	}
}

// TestPagedListingIsBounded: each page of a listing is bounded as every
// message is, but the listing, which is kept, was not: 41 pages of 15 MiB
// took 3.8 GB. A listing whose tools take more than maxListingBytes of
// JSON fails, and the server is not connected.
func TestPagedListingIsBounded(t *testing.T) {
	var deepest atomic.Int64 // the last page asked for
	u := pagingServer(t, func(cursor string) any {
		n, _ := strconv.Atoi(cursor)
		for d := deepest.Load(); int64(n) > d && !deepest.CompareAndSwap(d, int64(n)); d = deepest.Load() {
		}
		res := map[string]any{"tools": []map[string]any{{"name": fmt.Sprintf("t%d", n), "description": strings.Repeat("d", 1<<20), "inputSchema": object()}}}
		if n < 40 {
			res["nextCursor"] = strconv.Itoa(n + 1)
		}
		return res
	})
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", u))})
	if got := names(f.m.Tools(set)); len(got) != 0 {
		t.Errorf("tools %v, want none", got)
	}
	st := f.m.Status()["s"]
	if st.State != stateUnreachable || !strings.Contains(st.Error, "the server's tools take more than 16 MiB of JSON") {
		t.Errorf("status %+v", st)
	}
	if d := deepest.Load(); d > 16 {
		t.Errorf("page %d asked for, want the listing given up after 16 MiB", d)
	}
}

// TestListChangedFloodIsCoalesced: every notifications/tools/list_changed
// made the service list the server's tools again, so a server that sent
// them without pause kept a core busy (18% for 1,000 a second of a
// one-tool listing). Listings on notifications are at most one a
// relistInterval, and the last change is still seen.
func TestListChangedFloodIsCoalesced(t *testing.T) {
	srv := newTestServer(func() {})
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var lists atomic.Int64
	endpoint := serveMCP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg, ok := peekRPC(r, nil); ok && msg.Method == "tools/list" {
			lists.Add(1)
		}
		sdk.ServeHTTP(w, r)
	}))
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	go func() {
		for range f.changes { // more than the fixture keeps, without the bound
		}
	}()
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", endpoint))})
	before := lists.Load()
	// The SDK's server sends list_changed 10 ms after a change.
	start := time.Now()
	for i := 0; time.Since(start) < 1500*time.Millisecond; i++ {
		mcp.AddTool(srv, &mcp.Tool{Name: fmt.Sprintf("t%d", i), Description: "Added."},
			func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{}, nil, nil
			})
		time.Sleep(20 * time.Millisecond)
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "last", Description: "Added last."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
	eventually(t, "the last tool listed", func() bool { return slices.Contains(names(f.m.Tools(set)), "s__last") })
	if n := lists.Load() - before; n > 5 {
		t.Errorf("%d listings in about 2 s of notifications, want at most one a second", n)
	}
}
