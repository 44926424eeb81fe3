package mcpbridge

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestNextCallAfterABadAnswer: an answer that ends a session (over 16 MiB,
// nested deeper than the SDK reads) left the session in place while it
// was closed, which took two seconds for a server that did not exit when
// its stdin closed: the next call, made at once, waited for that and got
// the previous call's error and advice ("larger than 16 MiB", "Ask the
// tool for less"; or it quoted the previous call's line). The session is
// let go first, so the next call waits for the one made anew and runs.
func TestNextCallAfterABadAnswer(t *testing.T) {
	f := newFixture(t)
	set := f.m.Ensure(context.Background(), []*Server{f.server(evilDoc(t, "evil"))})
	e := f.executor(set)
	for _, tc := range []struct{ mode, want string }{
		{"huge", "the MCP server's answer is larger than 16 MiB"},
		{"nest", "wrote a message nested deeper than 1,000 levels (the most toolsvc reads) to its standard output"},
	} {
		res, _ := callMode(t, e, "evil__echo", tc.mode, 20*time.Second)
		if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, tc.want) {
			t.Errorf("%s: %+v, want E_TOOL mentioning %q", tc.mode, res.Error, tc.want)
		}
		res, took := callMode(t, e, "evil__echo", "ok", 20*time.Second)
		t.Logf("the call after %s took %v", tc.mode, took)
		if res.Status != registry.StatusOK || string(res.Output) != `"hello"` {
			t.Errorf("the call after %s: %s %+v (after %v)", tc.mode, res.Output, res.Error, took)
		}
	}
}

// TestNextHTTPCallAfterAHugeAnswer: the same over HTTP, where one answer
// over 16 MiB ends the session and calls made before it was made again
// got "client is closing: … larger than 16 MiB".
func TestNextHTTPCallAfterAHugeAnswer(t *testing.T) {
	h := newHugeServer(t, "json")
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("huge", h.url))})
	e := f.executor(set)
	res := execute(t, e, context.Background(), "huge__echo", `{"message": "x"}`)
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "larger than 16 MiB") {
		t.Fatalf("huge: %+v", res.Error)
	}
	if res := execute(t, e, context.Background(), "huge__add", `{"a": 2, "b": 40}`); string(res.Output) != `{"sum":42}` {
		t.Errorf("the call after it: %s %+v", res.Output, res.Error)
	}
}

// TestAnotherCallsAnswerIsNotThisCallsError: a call in flight when the
// answer of another call ended the session got that call's error and
// advice ("Ask the tool for less"). It is told that the session ended
// because of something else the server sent.
func TestAnotherCallsAnswerIsNotThisCallsError(t *testing.T) {
	f := newFixture(t)
	doc := strings.Replace(stdioDoc(t, "local", ""), "args: [mcp-stdio-server]", "args: [mcp-stdio-server, huge]", 1)
	set := f.m.Ensure(context.Background(), []*Server{f.server(doc)})
	e := f.executor(set)
	var wg sync.WaitGroup
	var slow *registry.Result
	wg.Go(func() {
		res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "local__slow", TimeoutMs: 20000})
		if err != nil {
			t.Error(err)
		}
		slow = res
	})
	time.Sleep(300 * time.Millisecond) // slow is sent first
	res := execute(t, e, context.Background(), "local__huge", `{}`)
	wg.Wait()
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "larger than 16 MiB") || !strings.Contains(res.Error.Suggestion, "Ask the tool for less") {
		t.Errorf("huge: %+v", res.Error)
	}
	if slow.Code() != registry.CodeTool || !strings.Contains(slow.Error.Message, "the session ended while this call was running, when the server sent a message larger than 16 MiB (the most toolsvc reads) in answer to something else") ||
		strings.Contains(slow.Error.Suggestion, "Ask the tool for less") || !strings.Contains(slow.Error.Suggestion, "Your request is not the cause") {
		t.Errorf("the call in flight: %+v", slow.Error)
	}
}

// TestClosingCodeIsNotRetried: a call whose request found the session
// ended is sent again, since the server never saw it; the SDK says the
// same ("connection closed") of an error answer with the code of "client
// is closing", which the server did see. That call is not sent again,
// nor said not to have been sent, and the session goes on.
func TestClosingCodeIsNotRetried(t *testing.T) {
	f := newFixture(t)
	set := f.m.Ensure(context.Background(), []*Server{f.server(evilDoc(t, "evil"))})
	e := f.executor(set)
	since := f.m.Status()["evil"].Since
	res, _ := callMode(t, e, "evil__echo", "closing", 10*time.Second)
	if res.Code() != registry.CodeTool || strings.Contains(res.Error.Message, "not sent") {
		t.Errorf("a call answered with -32003: %s %+v; want E_TOOL, not the call sent again", res.Output, res.Error)
	}
	if res, _ := callMode(t, e, "evil__echo", "closing", 10*time.Second); string(res.Output) != `"called again"` {
		t.Errorf("the next call: %s %+v", res.Output, res.Error)
	}
	if st := f.m.Status()["evil"]; st.State != stateConnected || !st.Since.Equal(since) {
		t.Errorf("the session was made again: %+v", st)
	}
}

// TestUnreadableResults: a server whose result is not what MCP says a
// tools/call result is (data that is not base64, a result that is not an
// object, a content type MCP does not define) was reported as a lost
// connection ("try the call again in a few seconds"), with the SDK's Go
// types in the message, though its session went on. It is E_TOOL saying
// what was wrong, and that trying again will most likely get the same.
func TestUnreadableResults(t *testing.T) {
	f := newFixture(t)
	set := f.m.Ensure(context.Background(), []*Server{f.server(evilDoc(t, "evil"))})
	e := f.executor(set)
	since := f.m.Status()["evil"].Since
	for _, tc := range []struct{ mode, want string }{
		{"image", "MCP server evil gave an answer toolsvc cannot read: a content item's data (an image, audio or blob) is not valid base64"},
		{"badresult", "MCP server evil gave an answer toolsvc cannot read: the result is not a JSON object"},
		{"badcontent", `MCP server evil gave an answer toolsvc cannot read: a content item has the type "weird", which MCP does not define`},
	} {
		res, _ := callMode(t, e, "evil__echo", tc.mode, 10*time.Second)
		if res.Code() != registry.CodeTool || res.Error.Message != tc.want || goTypes(res.Error.Message) ||
			strings.Contains(res.Error.Suggestion, "lost") || !strings.Contains(res.Error.Suggestion, "most likely get the same answer") {
			t.Errorf("%s: %+v\nwant the message %q", tc.mode, res.Error, tc.want)
		}
	}
	if res, _ := callMode(t, e, "evil__echo", "ok", 10*time.Second); res.Status != registry.StatusOK {
		t.Errorf("ok: %+v", res.Error)
	}
	if st := f.m.Status()["evil"]; st.State != stateConnected || !st.Since.Equal(since) {
		t.Errorf("the session was made again: %+v", st)
	}
}

// TestUnreadableHTTPAnswers: over HTTP, a redirect and a body that is not
// JSON were reported as a lost connection; they are answers toolsvc
// cannot read, and the next call runs.
func TestUnreadableHTTPAnswers(t *testing.T) {
	var mode string
	var mu sync.Mutex
	sdk := newHugeServer(t, "json").mcp
	u := serveMCP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var params struct {
			Name string `json:"name"`
		}
		mu.Lock()
		m := mode
		mu.Unlock()
		if msg, ok := peekRPC(r, &params); ok && msg.Method == "tools/call" && params.Name == "echo" {
			switch m {
			case "redirect":
				http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
				return
			case "badjson":
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte("{not json"))
				return
			}
		}
		sdk.ServeHTTP(w, r)
	}))
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("h", u))})
	e := f.executor(set)
	for _, tc := range []struct{ mode, want string }{
		{"redirect", "MCP server h answered the call with the HTTP status 307 Temporary Redirect (redirects are not followed), which toolsvc cannot read"},
		{"badjson", "MCP server h answered the call with text that is not JSON, which toolsvc cannot read"},
	} {
		mu.Lock()
		mode = tc.mode
		mu.Unlock()
		res := execute(t, e, context.Background(), "h__echo", `{"message": "x"}`)
		if res.Code() != registry.CodeTool || res.Error.Message != tc.want || strings.Contains(res.Error.Suggestion, "lost") {
			t.Errorf("%s: %+v\nwant the message %q", tc.mode, res.Error, tc.want)
		}
		mu.Lock()
		mode = ""
		mu.Unlock()
		if res := execute(t, e, context.Background(), "h__echo", `{"message": "x"}`); string(res.Output) != `"echo: x"` {
			t.Errorf("the call after %s: %s %+v", tc.mode, res.Output, res.Error)
		}
	}
}

// TestDeepListingSaysSo: one input schema nested deeper than 1,000 levels
// makes the SDK refuse the whole tools/list answer, and the server's
// status said it "wrote JSON that is not a JSON-RPC 2.0 message … (logs
// belong on standard error)". It says the listing is nested too deep and
// what that means.
func TestDeepListingSaysSo(t *testing.T) {
	f := newFixture(t)
	f.m.Ensure(context.Background(), []*Server{f.server(evilDoc(t, "deep", "deep-list"))})
	st := f.m.Status()["deep"]
	for _, want := range []string{"tools/list: the server's answer is nested deeper than 1,000 levels", "the MCP SDK refuses any message nested deeper than 1,000 levels, so none of the server's tools can be read"} {
		if st.State != stateUnreachable || !strings.Contains(st.Error, want) || strings.Contains(st.Error, "logs belong") {
			t.Errorf("status %+v\nwant it to say %q", st, want)
		}
	}
}

// TestProgressBurstDoesNotOutlastItsCall: 100,000 progress notifications
// before one answer were read at 100 a second, and every later call of
// the server timed out behind them for 17 minutes. toolsvc asks for no
// progress: they are dropped before the SDK decodes them, at a pace of
// their own, and the next call is answered.
func TestProgressBurstDoesNotOutlastItsCall(t *testing.T) {
	f := newFixture(t)
	set := f.m.Ensure(context.Background(), []*Server{f.server(evilDoc(t, "evil"))})
	e := f.executor(set)
	res, _ := callMode(t, e, "evil__echo", "progress", 2*time.Second)
	if res.Status == registry.StatusOK {
		t.Logf("the burst's own call was answered: %s", res.Output)
	} else if res.Code() != registry.CodeTimeout || !strings.Contains(res.Error.Message, "progress notifications, which toolsvc did not ask for, faster than toolsvc drops them (10,000 a second)") {
		t.Errorf("the burst's call: %+v", res.Error)
	}
	res, took := callMode(t, e, "evil__echo", "ok", 5*time.Second)
	if res.Status != registry.StatusOK {
		t.Errorf("the call after the burst: %+v (after %v)", res.Error, took)
	}
}
