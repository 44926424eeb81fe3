package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// runRawServer is a stdio MCP server ("mcp-stdio-raw", see TestMain)
// written by hand, so that it can write what no SDK would. It answers
// initialize, tools/list, ping and tools/call of echo; a call of print
// it answers with its argument "line" written as it is, a line of its
// own. With the argument "banner" it writes a banner line before
// anything else, as servers that print to stdout at start do.
func runRawServer(args []string) {
	if len(args) > 0 && args[0] == "banner" {
		fmt.Println("weather-mcp 0.3.1 listening on stdio")
	}
	handRolled{
		name: "raw",
		tools: `[{"name":"echo","description":"Echo.","inputSchema":{"type":"object"}},` +
			`{"name":"print","description":"Write a line to stdout.","inputSchema":{"type":"object","properties":{"line":{"type":"string"}}}}]`,
		call: func(name, line string) bool {
			if name == "print" {
				fmt.Println(line)
				return false
			}
			return true
		},
	}.serve()
}

func rawDoc(t *testing.T, name string, args ...string) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	quoted := []string{`"mcp-stdio-raw"`}
	for _, a := range args {
		quoted = append(quoted, fmt.Sprintf("%q", a))
	}
	return fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: %s}\nspec:\n  stdio:\n    command: %q\n    args: [%s]\n", name, exe, strings.Join(quoted, ", "))
}

// TestStdioServerWritesGarbage: a stdio server that writes a line that is
// not a JSON-RPC message (a log line on stdout) ends its session, and the
// call waiting for an answer got the JSON parser's error ("calling
// \"tools/call\": invalid character 'L' looking for beginning of value")
// with the suggestion for a lost connection. The call's error says what
// the server wrote, quoting the start of the line, and that its session
// is being made again; the log names the server and keeps the parser's
// error; the server's status says the same in plain words.
func TestStdioServerWritesGarbage(t *testing.T) {
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	set := f.m.Ensure(context.Background(), []*Server{f.server(rawDoc(t, "raw"))})
	e := f.executor(set)
	long := "Loading the model weights from /srv/models ... " + strings.Repeat("ü", 100<<10)
	for _, tc := range []struct {
		name, line string
		want       []string
	}{
		{"log line", "Loading the model weights from /srv/models ... done in 3.2 s",
			[]string{`MCP server raw wrote a line that is not JSON to its standard output, where only JSON-RPC messages may go: "Loading the model weights from /srv/models ... done in 3.2 s"; toolsvc ended its session and is starting it again`}},
		{"bracketed log line", "[INFO] cache warmed",
			[]string{`wrote a line that is not JSON to its standard output, where only JSON-RPC messages may go: "[INFO] cache warmed";`}},
		{"long line", long,
			[]string{`where only JSON-RPC messages may go: "Loading the model weights from /srv/models ... üüüüüüüü"…;`}},
		{"JSON that is not a message", `{"status":"ok"}`,
			[]string{`MCP server raw wrote JSON that is not a JSON-RPC 2.0 message to its standard output`}},
		{"two values on a line", `{"a":1} {"b":2}`,
			[]string{`wrote a line with more than one JSON value to its standard output, where only JSON-RPC messages may go: "{\"a\":1} {\"b\":2}";`}},
	} {
		logs.Reset()
		args, _ := json.Marshal(map[string]string{"line": tc.line})
		before := time.Now()
		res := execute(t, e, context.Background(), "raw__print", string(args))
		if res.Code() != registry.CodeTool {
			t.Fatalf("%s: %+v", tc.name, res.Error)
		}
		for _, w := range tc.want {
			if !strings.Contains(res.Error.Message, w) {
				t.Errorf("%s: message %q\nwant it to contain %q", tc.name, res.Error.Message, w)
			}
		}
		if strings.Contains(res.Error.Message, "invalid character") || strings.Contains(res.Error.Message, "calling") || len(res.Error.Message) > 400 {
			t.Errorf("%s: the message quotes the parser or is long (%d bytes): %q", tc.name, len(res.Error.Message), res.Error.Message)
		}
		if !strings.Contains(res.Error.Suggestion, "server is faulty, not your call") {
			t.Errorf("%s: suggestion %q", tc.name, res.Error.Suggestion)
		}
		// The log names the server and keeps the parser's own words, cut.
		var logged struct {
			Server, Wrote, Line, Error string
		}
		eventually(t, "the log line", func() bool {
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, `"msg":"mcp: server wrote something that is not a JSON-RPC message to its standard output; its session ends and is made again"`) {
					return json.Unmarshal([]byte(line), &logged) == nil
				}
			}
			return false
		})
		if logged.Server != "raw" || logged.Error == "" || len(logged.Error) > maxErrorText+64 || len(logged.Line) > maxQuote {
			t.Errorf("%s: logged %+v", tc.name, logged)
		}
		if tc.name == "log line" && !strings.Contains(logged.Error, "invalid character 'L' looking for beginning of value") {
			t.Errorf("%s: the parser's error is not logged: %+v", tc.name, logged)
		}
		if n := logs.Len(); n > 16<<10 {
			t.Errorf("%s: %d bytes logged", tc.name, n)
		}
		// The session is made again (a call before that finds it ended
		// and is told the same).
		eventually(t, "the session to be made again", func() bool {
			st := f.m.Status()["raw"]
			return st.State == stateConnected && st.Since.After(before)
		})
	}
	if res := execute(t, e, context.Background(), "raw__echo", `{}`); res.Status != registry.StatusOK || string(res.Output) != `"echoed"` {
		t.Errorf("echo after the sessions were made again: %s %+v", res.Output, res.Error)
	}
}

// TestStdioServerBanner: a stdio server that prints a banner to stdout
// before anything else is never reached; its status said why in the JSON
// parser's words ("connect: calling \"initialize\": invalid character
// 'w' looking for beginning of value"). It quotes the banner and says
// what an MCP server may write there.
func TestStdioServerBanner(t *testing.T) {
	f := newFixture(t)
	f.m.Ensure(context.Background(), []*Server{f.server(rawDoc(t, "banner", "banner"))})
	st := f.m.Status()["banner"]
	want := `connect: the server wrote a line that is not JSON to its standard output: "weather-mcp 0.3.1 listening on stdio"; an MCP server over stdio may write only JSON-RPC messages there, one a line (logs belong on standard error)`
	if st.State != stateUnreachable || st.Error != want {
		t.Errorf("status %+v\nwant the error %q", st, want)
	}
}
