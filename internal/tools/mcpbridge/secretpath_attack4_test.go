package mcpbridge

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestSecretInURLPathIsNotShown: hosted MCP servers put a key in the path
// of their URL (https://host/mcp/<key>/sse), which the failures of
// requests quote: it was in the status, which the unauthenticated /readyz
// serves, in the log, and in the message of a call that failed. Of the
// server's URL only the scheme and host are shown.
func TestSecretInURLPathIsNotShown(t *testing.T) {
	const key = "sk-Path0Key1Secret"
	h := newHTTPServer(t, "127.0.0.1:0")
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	f.env["MCP_TOKEN"] = "Bearer x"
	u := "http://" + h.addr + "/mcp/" + key + "/sse"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("hosted", u))})
	if st := f.m.Status()["hosted"]; st.State != stateConnected {
		t.Fatalf("status %+v", st)
	}
	e := f.executor(set)
	h.stop()
	res := execute(t, e, context.Background(), "hosted__echo", `{"message": "x"}`)
	if res.Code() != registry.CodeTool || strings.Contains(res.Error.Message, key) {
		t.Errorf("call while down: %+v", res.Error)
	}
	eventually(t, "the status to show the server down", func() bool {
		st := f.m.Status()["hosted"]
		return st.State == "reconnecting" && strings.Contains(st.Error, "connection refused")
	})
	if st := f.m.Status()["hosted"]; strings.Contains(st.Error, key) || !strings.Contains(st.Error, "http://"+h.addr+"/.../sse") {
		t.Errorf("status: %s", st.Error)
	}
	if out := logs.String(); strings.Contains(out, key) || !strings.Contains(out, "mcp: connection lost; reconnecting") {
		t.Errorf("the log shows the key, or not the loss:\n%s", out)
	}
}

func TestEndpointShowsNoKey(t *testing.T) {
	for in, want := range map[string]string{
		"https://mcp.example.com":                                      "https://mcp.example.com",
		"https://mcp.example.com/":                                     "https://mcp.example.com",
		"https://mcp.example.com/mcp":                                  "https://mcp.example.com/mcp",
		"https://mcp.example.com/v1/mcp":                               "https://mcp.example.com/.../mcp",
		"https://mcp.example.com/api/mcp/s/MTIzNDU2Nzg5MGFiY2Rl/mcp":   "https://mcp.example.com/.../mcp",
		"https://mcp.example.com/mcp/sk-0123456789abcdef/sse":          "https://mcp.example.com/.../sse",
		"https://mcp.example.com/0f8fad5b-d9cb-469f-a165-70867728950e": "https://mcp.example.com/...",
		"http://u:pw@mcp.example.com:8080/mcp?api_key=k#frag":          "http://REDACTED@mcp.example.com:8080/mcp?REDACTED",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := endpoint(u); got != want {
			t.Errorf("endpoint(%s) = %s; want %s", in, got, want)
		}
	}
}
