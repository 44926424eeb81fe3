package mcpbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// floodNote is a notification a flooding server sends without pause.
const floodNote = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"flood"}}` + "\n"

// runFloodServer is a stdio MCP server ("mcp-stdio-flood", see TestMain)
// that answers initialize, tools/list (one tool, echo), tools/call and
// ping, and once it has listed its tools writes notifications without
// pause until its stdout is closed.
func runFloodServer() {
	var mu sync.Mutex
	send := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := os.Stdout.Write(b)
		return err
	}
	var once sync.Once
	flood := func() {
		batch := []byte(strings.Repeat(floodNote, 1000))
		for send(batch) == nil {
		}
		os.Exit(0)
	}
	handRolled{
		name:   "flood",
		tools:  `[{"name":"echo","description":"Echo.","inputSchema":{"type":"object"}}]`,
		send:   send,
		listed: func() { once.Do(func() { go flood() }) },
	}.serve()
}

// handRolled is a stdio MCP server written by hand, so that tests can
// make it do what no SDK would. It answers initialize, tools/list (tools,
// a JSON array), ping, and tools/call: through call when set (which may
// leave a call unanswered), else with the text "echoed". send writes a
// line (nil: to stdout); listed runs after each tools/list.
type handRolled struct {
	name   string
	tools  string
	send   func([]byte) error
	call   func(name, line string) (answered bool)
	listed func()
}

func (h handRolled) serve() {
	if h.send == nil {
		h.send = func(b []byte) error { _, err := os.Stdout.Write(b); return err }
	}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 4<<20), 4<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Name            string `json:"name"`
				Arguments       struct {
					Line string `json:"line"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil {
			continue
		}
		var res string
		switch m.Method {
		case "initialize":
			res = fmt.Sprintf(`"result":{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":%q,"version":"1"}}`, m.Params.ProtocolVersion, h.name)
		case "tools/list":
			res = `"result":{"tools":` + h.tools + `}`
		case "tools/call":
			if h.call != nil && !h.call(m.Params.Name, m.Params.Arguments.Line) {
				continue
			}
			res = `"result":{"content":[{"type":"text","text":"echoed"}]}`
		case "ping":
			res = `"result":{}`
		default:
			res = `"error":{"code":-32601,"message":"method not found"}`
		}
		if h.send([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,%s}`+"\n", m.ID, res))) != nil {
			return
		}
		if m.Method == "tools/list" && h.listed != nil {
			h.listed()
		}
	}
}

// waitSlowed waits until the log says the server's reading was slowed.
func waitSlowed(t *testing.T, logs *logtest.Buffer, server string) {
	t.Helper()
	eventually(t, "the reading of the flooding server to be slowed", func() bool {
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `"msg":"mcp: server sends requests and notifications faster than toolsvc reads them; reading slowed"`) &&
				strings.Contains(line, `"server":"`+server+`"`) {
				return true
			}
		}
		return false
	})
}

// TestStdioNotificationFloodIsPaced: a stdio server that wrote
// notifications without pause kept a core of the service busy for as long
// as it ran (98%), while it cost the server next to nothing. Its messages
// are read at a bounded rate: the pipe fills, and the server waits.
func TestStdioNotificationFloodIsPaced(t *testing.T) {
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	doc := fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: flood}\nspec:\n  stdio:\n    command: %q\n    args: [mcp-stdio-flood]\n", exe)
	f.m.Ensure(context.Background(), []*Server{f.server(doc)})
	if st := f.m.Status()["flood"]; st.State != stateConnected {
		t.Fatalf("status %+v", st)
	}
	waitSlowed(t, &logs, "flood")
}

// floodingHTTPServer is an MCP server over streamable HTTP whose stream
// of server-sent events (the GET the client opens for the server's own
// messages) carries notifications without pause; the SDK's handler
// answers the rest.
type floodingHTTPServer struct{ mcp http.Handler }

func (h floodingHTTPServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		h.mcp.ServeHTTP(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	var batch bytes.Buffer
	for range 1000 {
		batch.WriteString("event: message\ndata: " + strings.TrimSpace(floodNote) + "\n\n")
	}
	for r.Context().Err() == nil {
		if _, err := w.Write(batch.Bytes()); err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}

// TestHTTPNotificationFloodIsPaced: the same over HTTP (82% of a core):
// the lines of the server's event streams are read at a bounded rate, and
// calls, which have streams of their own, are answered meanwhile.
func TestHTTPNotificationFloodIsPaced(t *testing.T) {
	u := serveMCP(t, floodingHTTPServer{mcp: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newTestServer(func() {}) }, nil)})
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("hflood", u))})
	waitSlowed(t, &logs, "hflood")
	e := f.executor(set)
	if res := execute(t, e, context.Background(), "hflood__echo", `{"message":"hi"}`); res.Status != registry.StatusOK || string(res.Output) != `"echo: hi"` {
		t.Errorf("echo during the flood: %s %+v", res.Output, res.Error)
	}
}

// endingStreamServer is an MCP server over streamable HTTP that ends the
// stream of its own messages (the client's GET) after one event, with an
// SSE retry of 1 ms and a new event id each time, so the SDK opens it again
// at once, without end; the SDK's handler answers the rest.
type endingStreamServer struct {
	mcp  http.Handler
	gets atomic.Int64
}

func (h *endingStreamServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		h.mcp.ServeHTTP(w, r)
		return
	}
	n := h.gets.Add(1)
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "id: %d\nretry: 1\ndata: %s\n\n", n, strings.TrimSpace(floodNote))
}

// TestReopenedStreamsArePaced: a server that ends the stream of its own
// messages at once was asked for it again a thousand times a second (the
// SDK honours the server's retry delay and retries without end while
// event ids advance). Opening a stream counts as streamLines lines of the
// pace, so the pacer slows the GETs after about maxServerLineBurst /
// streamLines of them, not after the thousands of the three-line events
// alone would take.
func TestReopenedStreamsArePaced(t *testing.T) {
	h := &endingStreamServer{mcp: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newTestServer(func() {}) }, nil)}
	u := serveMCP(t, h)
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	f.env["MCP_TOKEN"] = "Bearer x"
	f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("reopen", u))})
	waitSlowed(t, &logs, "reopen")
	// The burst, plus what the pace refills while it is spent: a loaded
	// machine may take seconds for it.
	if n, most := h.gets.Load(), int64(5*maxServerLineBurst/streamLines); n > most {
		t.Errorf("%d GETs before the pace slowed them; want at most %d", n, most)
	}
}
