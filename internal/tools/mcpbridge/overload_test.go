package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestFloodingServerCallTimesOutAsOverloaded: the answer of a stdio
// server that floods waits behind its own notifications, which are read
// at a bounded pace, so its calls time out however small they are; their
// E_TIMEOUT told the model to "try a smaller or simpler request". Such a
// call now says the server is overloaded and that a retry later may work,
// while a call that times out for its own sake keeps the executor's
// suggestion.
func TestFloodingServerCallTimesOutAsOverloaded(t *testing.T) {
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	flood := fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: flood}\nspec:\n  stdio:\n    command: %q\n    args: [mcp-stdio-flood]\n", exe)
	set := f.m.Ensure(context.Background(), []*Server{f.server(flood), f.server(stdioDoc(t, "calm", ""))})
	waitSlowed(t, &logs, "flood")
	e := f.executor(set)
	call := func(name string) *registry.Result {
		t.Helper()
		res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: name, Arguments: json.RawMessage(`{}`), TimeoutMs: 3000})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := call("flood__echo")
	if res.Code() != registry.CodeTimeout {
		t.Fatalf("a call of the flooding server: %s %+v", res.Output, res.Error)
	}
	if s := res.Error.Suggestion; !strings.Contains(s, "server is overloaded") || !strings.Contains(s, "Try the call again later") || strings.Contains(s, "smaller") && !strings.Contains(s, "do not make it smaller") {
		t.Errorf("suggestion %q; want it to say the server is overloaded and to try again later", s)
	}
	if m := res.Error.Message; !strings.Contains(m, "MCP server flood did not answer in time: it sends messages of its own accord") {
		t.Errorf("message %q", m)
	}
	// echo is not read-only: the server may have run it.
	if !strings.Contains(res.Error.Suggestion, "check whether its change took effect") {
		t.Errorf("suggestion %q", res.Error.Suggestion)
	}
	res = call("calm__slow")
	if res.Code() != registry.CodeTimeout || !strings.Contains(res.Error.Suggestion, "Try a smaller or simpler request") {
		t.Errorf("a call that times out for its own sake: %+v", res.Error)
	}
}
