package http

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/telemetry"
)

// logLines returns the JSON lines of logs.
func logLines(t *testing.T, logs *logtest.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %.200q", line)
		}
		out = append(out, m)
	}
	return out
}

// findLogLine waits for a line of logs that match accepts and returns
// it: a line written after the answer (the access line) may come after
// the client has read an answer larger than the server's write buffer.
func findLogLine(t *testing.T, logs *logtest.Buffer, match func(map[string]any) bool) map[string]any {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, m := range logLines(t, logs) {
			if match(m) {
				return m
			}
		}
	}
	t.Fatalf("no such log line in:\n%.2000s", logs)
	return nil
}

// infoEnv is newEnv with the service's logger at info level into logs.
func infoEnv(t *testing.T, mutate ...func(*Deps, *registry.Options)) (*env, *logtest.Buffer) {
	t.Helper()
	logs := &logtest.Buffer{}
	log := telemetry.NewLogger(logs, telemetry.LogOptions{Level: slog.LevelInfo})
	e := newEnv(t, append([]func(*Deps, *registry.Options){func(d *Deps, o *registry.Options) {
		d.Logger = log
		o.Logger = log
	}}, mutate...)...)
	return e, logs
}

// TestAccessLogClipsMethod: a request line's method is the client's, read
// before authentication; a megabyte of it is answered 405 and logged as
// the metrics count it, _OTHER, with its first KiB, not a 1 MB line.
func TestAccessLogClipsMethod(t *testing.T) {
	e, logs := infoEnv(t)
	method := strings.Repeat("M", 1_000_000)
	req, err := http.NewRequest(method, e.ts.URL+"/calls", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Request-Id", "req-long-method")
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("status %d, want 405", resp.StatusCode)
	}
	line := findLogLine(t, logs, func(m map[string]any) bool {
		return m["msg"] == "http request" && m["requestId"] == "req-long-method"
	})
	if n := logs.Len(); n > 4<<10 {
		t.Errorf("the log holds %d bytes for one request", n)
	}
	if orig, _ := line["methodOriginal"].(string); line["method"] != "_OTHER" || orig != method[:maxAttrBytes] {
		t.Errorf("method %.40v, methodOriginal of %d bytes; want _OTHER and the first %d bytes", line["method"], len(orig), maxAttrBytes)
	}

	// A standard method is logged as it is, with nothing beside it.
	logs.Reset()
	if r := e.do("GET", "/tools", nil, map[string]string{"X-Request-Id": "req-get"}, true); r.status != 200 {
		t.Fatalf("GET /tools: %d", r.status)
	}
	for _, m := range logLines(t, logs) {
		if m["requestId"] == "req-get" {
			if _, ok := m["methodOriginal"]; ok || m["method"] != "GET" {
				t.Errorf("access line of a GET: %v", m)
			}
		}
	}
}

// TestErrorLogClipsPath: a request the service fails to answer is logged
// with its path cut to what the answer's instance echoes (1 KiB), not the
// 200 KB of an id a client put in it.
func TestErrorLogClipsPath(t *testing.T) {
	e, logs := infoEnv(t)
	e.srv.Drain() // every call is answered 503, logged with its path
	path := "/approvals/apr_" + strings.Repeat("a", 200_000)
	r := e.do("POST", path, []byte(`{"decision":"approve"}`), jsonCT, false)
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %.300s", r.status, r.body)
	}
	line := findLogLine(t, logs, func(m map[string]any) bool { return m["msg"] == "refused while draining" })
	if p, _ := line["path"].(string); p != path[:maxEchoBytes] {
		t.Errorf("logged path of %d bytes, want its first %d", len(p), maxEchoBytes)
	}
	if n := logs.Len(); n > 8<<10 {
		t.Errorf("the log holds %d bytes for one request", n)
	}
}
