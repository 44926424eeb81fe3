package httpfetch

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestRequestEndsBeforeTheCall runs the tools through an executor at their
// own timeout, with no shorter timeoutMs: the request must end before the
// call's deadline, so that a slow body comes back cut with a note and a
// silent server gets the tool's own error, not the executor's E_TIMEOUT
// (which drops what was read and suggests a larger timeoutMs than the
// tool allows).
func TestRequestEndsBeforeTheCall(t *testing.T) {
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/silent" {
			<-r.Context().Done()
			return
		}
		// Headers, then a byte every 50ms until the client goes.
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			w.Write([]byte("x"))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
			}
		}
	}))
	const timeout = 2 * time.Second
	reg, err := registry.New(registry.Defaults{Timeout: time.Minute, MaxOutputBytes: 64 << 10, ErrorMessageLimit: 1000},
		Tools(Options{AllowCIDRs: allowLoopback(), Timeout: timeout})...)
	if err != nil {
		t.Fatal(err)
	}
	ex := registry.NewExecutor(registry.Options{Registry: reg})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound for the test only
	defer cancel()
	run := func(tool, args string) *registry.Result {
		t.Helper()
		res, err := ex.Execute(ctx, registry.Anonymous(), &registry.Call{ToolName: tool, Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	for _, tool := range []string{"http__get", "http__post"} {
		res := run(tool, `{"url": "`+srv.URL+`/trickle"}`)
		var out output
		if res.Status != registry.StatusOK || json.Unmarshal(res.Output, &out) != nil {
			t.Fatalf("%s trickle: %s %s %+v; want ok with the partial body", tool, res.Status, res.Output, res.Error)
		}
		body, _ := out.Body.(string)
		if out.Status != 200 || !out.Truncated || body == "" || strings.Trim(body, "x") != "" || out.Bytes != len(body) ||
			!strings.Contains(out.Note, "reading the body stopped after") || !strings.Contains(out.Note, "timeout expired") {
			t.Errorf("%s trickle: %+v; want the bytes read, truncated, and a note that the timeout expired", tool, out)
		}
	}

	res := run("http__get", `{"url": "`+srv.URL+`/silent"}`)
	if res.Code() != registry.CodeTool || !strings.HasPrefix(res.Error.Message, "no response within") ||
		res.Error.Suggestion == "" || strings.Contains(res.Error.Suggestion, "timeoutMs") {
		t.Errorf("silent server at the tool's timeout: %s %+v; want E_TOOL without a larger timeoutMs to try", res.Status, res.Error)
	}
	// A timeoutMs shorter than the tool's can be raised, and the error
	// says so.
	res = run("http__get", `{"url": "`+srv.URL+`/silent", "timeoutMs": 300}`)
	if res.Code() != registry.CodeTool || res.Error.Message != "no response within 300ms" || !strings.Contains(res.Error.Suggestion, "larger timeoutMs (at most 2000)") {
		t.Errorf("silent server at timeoutMs 300: %s %+v", res.Status, res.Error)
	}
}

// TestRequestTimeout: the request ends a tenth of the call's time before
// the call, at most a second before it.
func TestRequestTimeout(t *testing.T) {
	for _, c := range []struct {
		name   string
		call   time.Duration // 0 is no deadline
		ms     int64
		want   time.Duration
		byArgs bool
	}{
		{"no deadline", 0, 0, 30 * time.Second, false},
		{"no deadline, timeoutMs", 0, 5000, 5 * time.Second, true},
		{"timeoutMs well inside the call", time.Minute, 5000, 5 * time.Second, true},
		{"call of the tool's timeout", 30 * time.Second, 0, 29 * time.Second, false},
		{"timeoutMs of the tool's timeout", 30 * time.Second, 30000, 29 * time.Second, false},
		{"short call", 2 * time.Second, 0, 1800 * time.Millisecond, false},
		{"call shorter than timeoutMs", 2 * time.Second, 5000, 1800 * time.Millisecond, false},
	} {
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if c.call > 0 {
			ctx, cancel = context.WithTimeout(ctx, c.call)
		}
		got, byArgs := requestTimeout(ctx, 30*time.Second, c.ms)
		cancel()
		if got != c.want || byArgs != c.byArgs {
			t.Errorf("%s: %s, byArgs %v; want %s, %v", c.name, got, byArgs, c.want, c.byArgs)
		}
	}
	// Below a second the timeout is cut to the millisecond, not rounded.
	ctx, cancel := context.WithTimeout(context.Background(), 900*time.Millisecond)
	defer cancel()
	if got, _ := requestTimeout(ctx, 30*time.Second, 0); got <= 0 || got > 810*time.Millisecond || got%time.Millisecond != 0 {
		t.Errorf("call of 900ms: request timeout %s", got)
	}
}
