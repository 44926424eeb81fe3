package mcpbridge

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/logtest"
)

// TestServerErrorTextIsBounded: a server that answers initialize with a
// JSON-RPC error of 8 MiB had its message logged whole on every attempt
// and kept whole in its status, which every /readyz serves. Both are cut.
func TestServerErrorTextIsBounded(t *testing.T) {
	huge := "the server refuses: " + strings.Repeat("z", 8<<20)
	u := serveMCP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		msg, ok := peekRPC(r, nil)
		if !ok || msg.ID == nil {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "error": map[string]any{"code": -32000, "message": huge}})
	}))
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	f.env["MCP_TOKEN"] = "Bearer x"
	f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("refuser", u))})
	st := f.m.Status()["refuser"]
	if st.State != stateUnreachable || !strings.Contains(st.Error, "the server refuses: zzz") {
		t.Fatalf("status %.200v", st)
	}
	if len(st.Error) > maxErrorText+64 || !strings.HasSuffix(st.Error, " bytes in all)") {
		t.Errorf("the status's error has %d bytes, want it cut at %d and its length said: %.100s…%s", len(st.Error), maxErrorText, st.Error, st.Error[max(0, len(st.Error)-100):])
	}
	if n := logs.Len(); n > 16<<10 {
		t.Errorf("%d bytes logged for one failed attempt", n)
	}
}

// TestLongToolNamesAreCutInTheLog: a server chooses its tools' names, and
// names that break the naming rule are logged as renamed: a listing of
// names of 1 MiB each, new every second, wrote 8 MB of log a second. The
// names logged are cut.
func TestLongToolNamesAreCutInTheLog(t *testing.T) {
	var tools []map[string]any
	for i := range 5 {
		tools = append(tools, map[string]any{"name": fmt.Sprintf("long.%d.", i) + strings.Repeat("n", 256<<10), "inputSchema": object()})
	}
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(&logs, nil)) })
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", listingServer(t, tools)))})
	if got := len(f.m.Tools(set)); got != 5 {
		t.Fatalf("%d tools, want 5", got)
	}
	out := logs.String()
	if n := strings.Count(out, "mcp: tool renamed to fit the naming rule"); n != 5 {
		t.Fatalf("%d renames logged, want 5:\n%.2000s", n, out)
	}
	if len(out) > 5*(maxLogSchema+1024) {
		t.Errorf("%d bytes logged for 5 renames", len(out))
	}
}
