package custom

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// fakeBackend is a tool backend on loopback that records what it received.
type fakeBackend struct {
	*httptest.Server
	mu       sync.Mutex
	headers  http.Header
	envelope Envelope
	redirect bool // whether the redirect target was requested
}

func newFakeBackend(t *testing.T) *fakeBackend {
	b := &fakeBackend{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tool", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.headers = r.Header.Clone()
		_ = json.Unmarshal(body, &b.envelope)
		env := b.envelope
		b.mu.Unlock()
		switch env.Export {
		case "json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"ok": true, "export": %q}`, env.Export)
		case "text":
			fmt.Fprint(w, "just text")
		case "fail":
			http.Error(w, "the backend refuses: quota exceeded", http.StatusTooManyRequests)
		case "redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "huge":
			chunk := strings.Repeat("y", 1<<16)
			for range 160 { // 10 MiB
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
		case "hang":
			<-r.Context().Done()
		case "control":
			// Text that escapes to six times its length.
			fmt.Fprint(w, "HEAD "+strings.Repeat("\x01", 100000))
		}
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.redirect = true
		b.mu.Unlock()
		fmt.Fprint(w, `"followed"`)
	})
	b.Server = httptest.NewServer(mux)
	t.Cleanup(b.Close)
	return b
}

func httpTool(url string) string {
	var exports strings.Builder
	for _, name := range []string{"json", "text", "fail", "redirect", "huge", "hang", "control"} {
		fmt.Fprintf(&exports, "    - name: %s\n      description: The %s case.\n", name, name)
	}
	return `apiVersion: toolsvc/v1
kind: Tool
metadata: {name: remote}
spec:
  tier: side_effecting
  maxOutputBytes: 4096
  http:
    url: ` + url + `/tool
    headers:
      Authorization: {valueFrom: {env: REMOTE_TOKEN}}
      X-Api-Key: {valueFrom: {file: key.txt}}
      X-Team: platform
  exports:
` + exports.String()
}

func TestHTTPBackend(t *testing.T) {
	b := newFakeBackend(t)
	f := newFixture(t, sandbox.ModeOff)
	f.env["REMOTE_TOKEN"] = "Bearer s3cret"
	if err := os.WriteFile(filepath.Join(f.dir, "key.txt"), []byte("key-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := f.executor(httpTool(b.URL))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))

	res := call(t, e, ctx, &registry.Call{ToolCallID: "call_h", ToolName: "remote__json", Arguments: json.RawMessage(`{}`), Context: registry.CallContext{TurnID: "t1"}})
	if res.Status != registry.StatusOK || string(res.Output) != `{"ok":true,"export":"json"}` {
		t.Fatalf("json: %s %+v", res.Output, res.Error)
	}
	b.mu.Lock()
	h, env := b.headers, b.envelope
	b.mu.Unlock()
	if h.Get("Authorization") != "Bearer s3cret" || h.Get("X-Api-Key") != "key-from-file" || h.Get("X-Team") != "platform" {
		t.Errorf("configured headers: %v", h)
	}
	if h.Get("Content-Type") != "application/json" || h.Get("User-Agent") != "toolsvc-test" {
		t.Errorf("content type / user agent: %v", h)
	}
	if !strings.Contains(h.Get("Traceparent"), "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("trace context not propagated: %q", h.Get("Traceparent"))
	}
	if env.ToolName != "remote__json" || env.Export != "json" || env.ToolCallID != "call_h" || env.Context.TurnID != "t1" {
		t.Errorf("envelope: %+v", env)
	}

	res = call(t, e, ctx, &registry.Call{ToolName: "remote__text"})
	if string(res.Output) != `"just text"` {
		t.Errorf("text: %s %+v", res.Output, res.Error)
	}
	res = call(t, e, ctx, &registry.Call{ToolName: "remote__fail"})
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "429 Too Many Requests: the backend refuses: quota exceeded") {
		t.Errorf("fail: %+v", res.Error)
	}
	res = call(t, e, ctx, &registry.Call{ToolName: "remote__redirect"})
	b.mu.Lock()
	followed := b.redirect
	b.mu.Unlock()
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "redirects are not followed") || followed {
		t.Errorf("redirect: followed=%v %+v", followed, res.Error)
	}
	res = call(t, e, ctx, &registry.Call{ToolName: "remote__huge"})
	if res.Status != registry.StatusOK || !res.Truncated || len(res.Output) > 4096+100 {
		t.Errorf("huge: status %s truncated %v, %d bytes", res.Status, res.Truncated, len(res.Output))
	}
	// An answer that escapes to more than its length keeps its marker
	// (it was cut again from the front, which lost it).
	res = call(t, e, ctx, &registry.Call{ToolName: "remote__control"})
	if out := string(res.Output); res.Status != registry.StatusOK || !res.Truncated || len(res.Output) > 4096 ||
		!strings.HasPrefix(out, `"HEAD \u0001`) || !strings.Contains(out, "[output truncated: 100005 bytes total") {
		t.Errorf("control: status %s truncated %v, %d bytes: %s", res.Status, res.Truncated, len(res.Output), out[max(len(out)-300, 0):])
	}
	res = call(t, e, ctx, &registry.Call{ToolName: "remote__hang", TimeoutMs: 200})
	if res.Code() != registry.CodeTimeout {
		t.Errorf("hang: %+v", res.Error)
	}

	b.Close()
	res = call(t, e, ctx, &registry.Call{ToolName: "remote__json"})
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "could not be reached") || strings.Contains(res.Error.Message, "s3cret") {
		t.Errorf("unreachable backend: %+v", res.Error)
	}
}
