package mcpbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// runEvilServer is a stdio MCP server ("mcp-stdio-evil", see TestMain)
// written by hand, like the servers an outside probe used, that answers
// each tools/call of its tool echo in a goroutine of its own by the
// argument "mode":
//
//	ok          the text "hello"
//	huge        a line of 20 MiB
//	nest        a result nested 100,000 deep
//	badresult   "result": "not an object"
//	image       an image whose data is not base64
//	badcontent  a content item of the type "weird"
//	progress    100,000 progress notifications, then the answer
//	slow        the answer after 300 ms
//	closing     the first time, the JSON-RPC error of code -32003, which
//	            the SDK calls "client is closing"; then "called again"
//
// With the argument "deep-list", its listing holds a tool whose input
// schema is nested 2,000 deep.
func runEvilServer(args []string) {
	deep := len(args) > 0 && args[0] == "deep-list"
	var mu sync.Mutex
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	send := func(b []byte) {
		mu.Lock()
		defer mu.Unlock()
		out.Write(b)
		out.WriteByte('\n')
		out.Flush()
	}
	answer := func(id json.RawMessage, result string) {
		send([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":` + result + `}`))
	}
	tools := `[{"name":"echo","description":"Echo.","inputSchema":{"type":"object","properties":{"mode":{"type":"string"}}}}`
	if deep {
		schema := strings.Repeat(`{"type":"object","properties":{"a":`, 2000) + `{"type":"string"}` + strings.Repeat(`}}`, 2000)
		tools += `,{"name":"deep","description":"Deep.","inputSchema":` + schema + `}`
	}
	tools += `]`
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				ProtocolVersion string `json:"protocolVersion"`
				Arguments       struct {
					Mode string `json:"mode"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.ID == nil {
			continue
		}
		switch m.Method {
		case "initialize":
			answer(m.ID, fmt.Sprintf(`{"protocolVersion":%q,"capabilities":{"tools":{}},"serverInfo":{"name":"evil","version":"1"}}`, m.Params.ProtocolVersion))
		case "tools/list":
			answer(m.ID, `{"tools":`+tools+`}`)
		case "ping":
			answer(m.ID, `{}`)
		case "tools/call":
			go evilCall(m.ID, m.Params.Arguments.Mode, send, answer)
		default:
			send([]byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"error":{"code":-32601,"message":"method not found"}}`))
		}
	}
}

// evilClosing counts the calls of the mode closing.
var evilClosing atomic.Int64

func evilCall(id json.RawMessage, mode string, send func([]byte), answer func(json.RawMessage, string)) {
	switch mode {
	case "closing":
		if evilClosing.Add(1) == 1 {
			send([]byte(`{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":-32003,"message":"client is closing"}}`))
			return
		}
		answer(id, `{"content":[{"type":"text","text":"called again"}]}`)
	case "huge":
		answer(id, `{"content":[{"type":"text","text":"`+strings.Repeat("h", 20<<20)+`"}]}`)
	case "nest":
		answer(id, `{"content":[],"structuredContent":`+strings.Repeat(`{"a":`, 100000)+`1`+strings.Repeat(`}`, 100000)+`}`)
	case "badresult":
		answer(id, `"not an object"`)
	case "image":
		answer(id, `{"content":[{"type":"image","data":"!!!notbase64","mimeType":"image/png"}]}`)
	case "badcontent":
		answer(id, `{"content":[{"type":"weird","foo":1}]}`)
	case "progress":
		for i := range 100000 {
			send([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":%d}}`, i)))
		}
		answer(id, `{"content":[{"type":"text","text":"done"}]}`)
	case "slow":
		time.Sleep(300 * time.Millisecond)
		answer(id, `{"content":[{"type":"text","text":"slow"}]}`)
	default:
		answer(id, `{"content":[{"type":"text","text":"hello"}]}`)
	}
}

func evilDoc(t *testing.T, name string, args ...string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	quoted := []string{`"mcp-stdio-evil"`}
	for _, a := range args {
		quoted = append(quoted, fmt.Sprintf("%q", a))
	}
	return fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: %s}\nspec:\n  stdio:\n    command: %q\n    args: [%s]\n  tier: read_only\n", name, exe, strings.Join(quoted, ", "))
}

// callMode calls the evil server's echo with mode, within timeout.
func callMode(t *testing.T, e *registry.Executor, tool, mode string, timeout time.Duration) (*registry.Result, time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: tool,
		Arguments: json.RawMessage(`{"mode":"` + mode + `"}`), TimeoutMs: int64(timeout / time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	return res, time.Since(start)
}

// goTypes reports whether text names Go types, which a model cannot act on.
func goTypes(text string) bool {
	return strings.Contains(text, "Go value") || strings.Contains(text, "mcp.") || bytes.Contains([]byte(text), []byte("struct {"))
}
