package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			var msg struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params struct {
					Cursor string `json:"cursor"`
				} `json:"params"`
			}
			if json.Unmarshal(b, &msg) == nil && msg.Method == "tools/list" {
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": page(msg.Params.Cursor)})
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		sdk.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
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

// TestStderrLinesAreRateLimited: a stdio server that writes to stderr
// without end filled the service's log (9 MB a second); at most
// maxLogLines lines a second are logged, and the next line logged says
// how many were left out.
func TestStderrLinesAreRateLimited(t *testing.T) {
	now := time.Unix(1000, 0)
	var lines []string
	dropped := 0
	l := &lineLogger{now: func() time.Time { return now }, log: func(line string, d int) {
		lines = append(lines, line)
		dropped += d
	}}
	io.WriteString(l, strings.Repeat("x\n", 10000)+strings.Repeat("y", 5000)+"\n")
	if len(lines) != maxLogLines {
		t.Fatalf("%d lines logged in one second, want %d", len(lines), maxLogLines)
	}
	now = now.Add(time.Second)
	io.WriteString(l, "later\n")
	if len(lines) != maxLogLines+1 || lines[maxLogLines] != "later" || dropped != 10001-maxLogLines {
		t.Errorf("after a second: %d lines, last %q, %d reported dropped", len(lines), lines[len(lines)-1], dropped)
	}
	now = now.Add(time.Second)
	io.WriteString(l, strings.Repeat("z", 5000)+"\n")
	if got := lines[len(lines)-1]; len(got) != maxLogLine {
		t.Errorf("a long line logged as %d bytes, want %d", len(got), maxLogLine)
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			if bytes.Contains(b, []byte(`"tools/list"`)) {
				lists.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		sdk.ServeHTTP(w, r)
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	go func() {
		for range f.changes { // more than the fixture keeps, without the bound
		}
	}()
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", "http://"+ln.Addr().String()+"/mcp"))})
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
