package mcpbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// hugeServer is an MCP server over streamable HTTP on loopback whose
// answers to calls of its tool echo do not end: the SDK's handler answers
// everything else (initialize, tools/list, other tools), so the connection
// is made as usual.
type hugeServer struct {
	// kind is the answer: "json" (200, application/json), "status" (400
	// with a JSON body), "sse" (200, one event that never ends) or "drip"
	// (200, application/json, a little at a time).
	kind string
	url  string
	mcp  http.Handler
	// served counts the bytes of tools/call answers written; ended is
	// closed when an answer stopped before the ceiling: the client hung up.
	served atomic.Int64
	ended  chan struct{}
}

// hugeCeiling is where an answer stops anyway, so that a client without a
// bound takes a few hundred megabytes, not the machine.
const hugeCeiling = 160 << 20

func newHugeServer(t *testing.T, kind string) *hugeServer {
	t.Helper()
	h := &hugeServer{kind: kind, ended: make(chan struct{}),
		mcp: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newTestServer(func() {}) }, nil)}
	h.url = serveMCP(t, h)
	return h
}

// serveMCP serves h on a loopback port until the test ends and returns
// its MCP endpoint.
func serveMCP(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String() + "/mcp"
}

func (h *hugeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var params struct {
		Name string `json:"name"`
	}
	if msg, ok := peekRPC(r, &params); ok && msg.Method == "tools/call" && params.Name == "echo" {
		h.answer(w, msg.ID)
		return
	}
	h.mcp.ServeHTTP(w, r)
}

// rpcRequest is what a test server reads of a JSON-RPC request it may
// answer itself rather than pass on to the SDK's handler.
type rpcRequest struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// peekRPC reads the JSON-RPC request a POST carries, with its params into
// params, and puts the body back for the handler that serves it if the
// test server does not; ok is false for anything else.
func peekRPC(r *http.Request, params any) (rpcRequest, bool) {
	var msg rpcRequest
	if r.Method != http.MethodPost {
		return msg, false
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	r.Body = io.NopCloser(bytes.NewReader(b))
	if json.Unmarshal(b, &msg) != nil {
		return msg, false
	}
	if params != nil {
		_ = json.Unmarshal(msg.Params, params)
	}
	return msg, true
}

// answer writes a tools/call result whose text never ends.
func (h *hugeServer) answer(w http.ResponseWriter, id json.RawMessage) {
	head := `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"content":[{"type":"text","text":"`
	status, chunk, pause := http.StatusOK, bytes.Repeat([]byte("x"), 64<<10), time.Duration(0)
	w.Header().Set("Content-Type", "application/json")
	switch h.kind {
	case "status":
		status = http.StatusBadRequest
	case "sse":
		w.Header().Set("Content-Type", "text/event-stream")
		head = "data: " + head
	case "drip":
		chunk, pause = chunk[:4<<10], 20*time.Millisecond
	}
	w.WriteHeader(status)
	io.WriteString(w, head)
	for h.served.Load() < hugeCeiling {
		n, err := w.Write(chunk)
		h.served.Add(int64(n))
		if err != nil {
			close(h.ended)
			return
		}
		if pause > 0 {
			w.(http.Flusher).Flush()
			time.Sleep(pause)
		}
	}
}

// heapAllocs returns the bytes allocated on the heap so far: how much the
// heap grew between two readings is at most their difference.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHugeAnswersAreBounded: an HTTP server's answer to tools/call that
// does not end is read only up to 16 MiB, as a stdio frame is: a JSON
// answer, the body of a failed request, and a single server-sent event.
// The call fails with E_TOOL and the memory it takes stays bounded.
func TestHugeAnswersAreBounded(t *testing.T) {
	for _, tc := range []struct{ kind, want string }{
		{"json", "MCP server huge: the MCP server's answer is larger than 16 MiB"},
		{"status", "Bad Request"},
		{"sse", "MCP server huge: the MCP server's answer is larger than 16 MiB"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			h := newHugeServer(t, tc.kind)
			f := newFixture(t)
			f.env["MCP_TOKEN"] = "Bearer x"
			set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("huge", h.url))})
			e := f.executor(set)
			before := heapAllocs()
			res := execute(t, e, context.Background(), "huge__echo", `{"message": "x"}`)
			allocated := heapAllocs() - before
			if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, tc.want) {
				t.Errorf("result %s %+v, want E_TOOL mentioning %q", res.Status, res.Error, tc.want)
			}
			if allocated > 150<<20 {
				t.Errorf("the call allocated %d MiB; the answer was not bounded", allocated>>20)
			}
			select {
			case <-h.ended:
			case <-time.After(30 * time.Second):
				t.Fatalf("the client read the whole answer (%d MiB)", h.served.Load()>>20)
			}
			if n := h.served.Load(); n > 64<<20 {
				t.Errorf("the client read %d MiB of the answer", n>>20)
			}
			// The service recovers: the connection is made again.
			eventually(t, "the other tools to answer again", func() bool {
				res := execute(t, e, context.Background(), "huge__add", `{"a": 2, "b": 40}`)
				return string(res.Output) == `{"sum":42}`
			})
			t.Logf("%s: %q; the call allocated %d MiB; the server wrote %d MiB before the client hung up", tc.kind, res.Error.Message, allocated>>20, h.served.Load()>>20)
		})
	}
}

// TestSlowAnswerStopsAtTheDeadline: an answer that trickles in is not read
// past the call's deadline; the client hangs up.
func TestSlowAnswerStopsAtTheDeadline(t *testing.T) {
	h := newHugeServer(t, "drip")
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("slow", h.url))})
	res, err := f.executor(set).Execute(context.Background(), registry.Anonymous(),
		&registry.Call{ToolName: "slow__echo", Arguments: json.RawMessage(`{"message": "x"}`), TimeoutMs: 300})
	if err != nil {
		t.Fatal(err)
	}
	if res.Code() != registry.CodeTimeout {
		t.Errorf("result %s %+v, want E_TIMEOUT", res.Status, res.Error)
	}
	select {
	case <-h.ended:
	case <-time.After(30 * time.Second):
		t.Fatalf("the answer was still being read 30s after the call's deadline (%d KiB)", h.served.Load()>>10)
	}
}

// addHugeTool gives srv the tool huge, whose answer is a 17 MiB text.
func addHugeTool(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{Name: "huge", Description: "Answer with 17 MiB of text."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", 17<<20)}}}, nil, nil
		})
}

// TestHugeStdioAnswer: a stdio frame is bounded at the same 16 MiB (by the
// SDK), and the call says so the same way.
func TestHugeStdioAnswer(t *testing.T) {
	f := newFixture(t)
	doc := strings.Replace(stdioDoc(t, "local", ""), "args: [mcp-stdio-server]", "args: [mcp-stdio-server, huge]", 1)
	set := f.m.Ensure(context.Background(), []*Server{f.server(doc)})
	e := f.executor(set)
	res := execute(t, e, context.Background(), "local__huge", `{}`)
	if want := "MCP server local: the MCP server's answer is larger than 16 MiB"; res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, want) {
		t.Errorf("result %s %+v, want E_TOOL mentioning %q", res.Status, res.Error, want)
	}
	eventually(t, "the other tools to answer again", func() bool {
		res := execute(t, e, context.Background(), "local__add", `{"a": 2, "b": 40}`)
		return string(res.Output) == `{"sum":42}`
	})
}
