package custom

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// TestLongErrorBodyKeepsItsEnd: the message of an HTTP tool's 500 was the
// first 16 KiB of its body, cut by the executor to the errorMessageLimit,
// with no sign that the body went on (20 MiB more, and its last words).
// It says how long the body was, first, and keeps its beginning and end,
// as an exec tool's stderr.
func TestLongErrorBodyKeepsItsEnd(t *testing.T) {
	body := strings.Repeat("E", 4096) + strings.Repeat("M", 20<<20) + "THE-END"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	f := newFixture(t, sandbox.ModeOff)
	e := f.executor(`apiVersion: toolsvc/v1
kind: Tool
metadata: {name: web}
spec:
  tier: read_only
  http: {url: ` + srv.URL + `}
  exports:
    - {name: run, description: Run.}
`)
	res := call(t, e, context.Background(), &registry.Call{ToolName: "web__run"})
	msg := ""
	if res.Error != nil {
		msg = res.Error.Message
	}
	want := "the tool's backend answered 500 Internal Server Error with a body of 20975623 bytes; its first 4096 and last 12288 bytes: EEEE"
	if res.Code() != registry.CodeTool || !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, "MMMMTHE-END") {
		t.Errorf("message %q…%q\nwant it to begin %q and end with the body's", msg[:min(len(msg), 200)], msg[max(len(msg)-40, 0):], want)
	}
}

// TestExitWithStdoutOnly: a program that wrote its error to stdout (as
// JSON) and exited 1 was reported as having "exited with status 1 and
// wrote nothing to stderr": what it said was thrown away.
func TestExitWithStdoutOnly(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort)
	e := f.executor(helperTool(t, "quota", "stdout-fail", ""))
	res := call(t, e, context.Background(), &registry.Call{ToolName: "quota__run"})
	msg := ""
	if res.Error != nil {
		msg = res.Error.Message
	}
	want := `the program exited with status 1 and wrote nothing to stderr; it wrote to stdout: {"error": "quota exceeded", "detail": "xxx`
	if res.Code() != registry.CodeTool || !strings.HasPrefix(msg, want) || !strings.HasSuffix(msg, `xx THE-END"}`) || !strings.Contains(msg, "omitted") {
		t.Errorf("message %q\nwant it to begin %q and end with the program's last words", msg, want)
	}
}
