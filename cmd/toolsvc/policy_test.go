package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func (in *instance) as(token, method, path, body string) (int, result) {
	in.t.Helper()
	req, err := http.NewRequest(method, in.base+path, strings.NewReader(body))
	if err != nil {
		in.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r result
	if resp.Header.Get("Content-Type") == "application/problem+json" {
		var p struct{ Code string }
		_ = json.Unmarshal(b, &p)
		return resp.StatusCode, result{Code: p.Code}
	}
	if strings.HasPrefix(path, "/tools") {
		return resp.StatusCode, result{Output: b}
	}
	if err := json.Unmarshal(b, &r); err != nil {
		in.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode, r
}

// TestPolicyAndCallers runs the shipped example policy and callers.
func TestPolicyAndCallers(t *testing.T) {
	ws := t.TempDir()
	in := start(t, "TOOLSVC_WORKSPACE="+ws, "TOOLSVC_CONFIG=../../examples/policy", "TOOLSVC_API_KEY=root-key")
	// No or bad credentials: 401 that names no token.
	for _, tok := range []string{"", "wrong", "agent-tokenx", "eb47b9ce4840a5b3ea138b8691253b78035b9289d9014409067e9844c272ef99"} {
		if status, r := in.as(tok, "GET", "/tools", ""); status != 401 || r.Code != "unauthorized" {
			t.Errorf("token %q: %d %s", tok, status, r.Code)
		}
	}
	// The agent's catalog is its globs.
	_, cat := in.as("agent-token", "GET", "/tools?format=openai", "")
	for _, want := range []string{"fs__read", "shell__exec", "json__query"} {
		if !strings.Contains(string(cat.Output), `"`+want+`"`) {
			t.Errorf("agent catalog lacks %s", want)
		}
	}
	if strings.Contains(string(cat.Output), "http__get") {
		t.Error("agent catalog shows http__get")
	}
	// The oncall caller sees read_only tools only.
	_, cat = in.as("oncall-token", "GET", "/tools", "")
	if strings.Contains(string(cat.Output), "fs__write") || !strings.Contains(string(cat.Output), "fs__read") {
		t.Errorf("oncall catalog has fs__write or lacks fs__read")
	}
	// A rule denies, naming itself.
	status, r := in.as("agent-token", "POST", "/calls", `{"toolName":"fs__read","arguments":{"path":".env"}}`)
	if status != 200 || r.code() != "E_POLICY_DENIED" || !strings.Contains(r.Error.Message, "example/no-secrets") {
		t.Errorf("denied read: %d %+v", status, r)
	}
	// Outside the caller's catalog.
	if _, r := in.as("agent-token", "POST", "/calls", `{"toolName":"http__get","arguments":{"url":"https://example.com/"}}`); r.code() != "E_TOOL_NOT_IN_CATALOG" {
		t.Errorf("http__get by agent: %+v", r)
	}
	// Privileged: the agent's call waits; its inline approval is ignored.
	status, p := in.as("agent-token", "POST", "/calls", `{"toolCallId":"s1","toolName":"shell__exec","arguments":{"command":"echo hi > hi.txt"},"approval":{"granted":true}}`)
	if status != 202 || p.Approval == nil {
		t.Fatalf("agent shell call: %d status=%s", status, p.Status)
	}
	// The agent cannot approve; the oncall caller can.
	if status, r := in.as("agent-token", "POST", "/approvals/"+p.Approval.ID, `{"decision":"approve"}`); status != 403 || r.Code != "forbidden" {
		t.Errorf("agent approving: %d %+v", status, r)
	}
	if status, r := in.as("oncall-token", "POST", "/approvals/"+p.Approval.ID, `{"decision":"approve","reason":"fine"}`); status != 200 || r.Status != "ok" {
		t.Errorf("oncall approving: %d %+v", status, r)
	}
	if _, err := os.Stat(filepath.Join(ws, "callers/agent/default", "hi.txt")); err != nil {
		t.Errorf("approved call did not run: %v", err)
	}
	// The agent reads its own outcome; another caller's id space is separate.
	if status, r := in.as("agent-token", "GET", "/calls/s1", ""); status != 200 || r.Status != "ok" {
		t.Errorf("agent GET /calls/s1: %d %+v", status, r)
	}
	if status, _ := in.as("root-key", "GET", "/calls/s1", ""); status != 404 {
		t.Errorf("another caller read s1: %d", status)
	}
	// The API key holds every scope, so its inline approval counts.
	if status, r := in.as("root-key", "POST", "/calls", `{"toolName":"shell__exec","arguments":{"command":"echo ok"},"approval":{"granted":true,"by":"ops"}}`); status != 200 || r.Status != "ok" {
		t.Errorf("api key inline approval: %d %+v", status, r)
	}
}

func TestBrokenPolicyStopsStartUp(t *testing.T) {
	dir := t.TempDir()
	broken := `apiVersion: toolsvc/v1
kind: Policy
metadata: {name: broken}
spec:
  rules:
    - name: wrong-example
      tools: ["fs__*"]
      condition: 'args.path == "a"'
      decision: deny
      match:
        - args: {path: b}
`
	path := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"toolsvc", "validate"}, []string{"TOOLSVC_CONFIG=" + path, "TOOLSVC_WORKSPACE=" + t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "p.yaml:") || !strings.Contains(err.Error(), "wrong-example") {
		t.Errorf("broken example: %v, want an error naming the file, line and rule", err)
	}
	var out strings.Builder
	err = run(context.Background(), []string{"toolsvc", "validate"}, []string{"TOOLSVC_CONFIG=../../examples/policy", "TOOLSVC_WORKSPACE=" + t.TempDir()}, &out, io.Discard)
	if err != nil {
		t.Errorf("the shipped example policy does not validate: %v", err)
	}
}
