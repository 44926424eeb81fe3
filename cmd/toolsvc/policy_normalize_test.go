package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicySeesTheArgumentsTheToolUses: a policy rule on a path or a URL
// holds for every spelling of it the tool reads as the same. The shipped
// example policy's rules were passed by "./.git/config",
// "./notes/todo.md" and "HTTP://…", which the tools read as the paths and
// URL the rules name.
func TestPolicySeesTheArgumentsTheToolUses(t *testing.T) {
	c := newConfigDir(t)
	policy, err := os.ReadFile("../../examples/policy/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	callers, err := os.ReadFile("../../examples/policy/callers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	callers = append(callers, []byte(`
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: web}
spec:
  tokenSha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 # "test"
  tools: ["http__*"]
  scopes: [call]
`)...)
	c.write("policy.yaml", string(policy), 0o600)
	c.write("callers.yaml", string(callers), 0o600)
	ws := t.TempDir()
	in := start(t, "TOOLSVC_WORKSPACE="+ws, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_API_KEY=root-key")

	for _, path := range []string{"./.git/config", ".git//config", "./.git/./config", ".//a.env"} {
		status, r := in.as("agent-token", "POST", "/calls", `{"toolName":"fs__write","arguments":{"path":"`+path+`","content":"x"}}`)
		if status != 200 || r.code() != "E_POLICY_DENIED" || !strings.Contains(r.Error.Message, "example/no-secrets") {
			t.Errorf("fs__write %s: %d %s %s", path, status, r.code(), r.Output)
		}
	}
	for _, u := range []string{"HTTP://127.0.0.1:1/", "Http://127.0.0.1:1/"} {
		status, r := in.as("test", "POST", "/calls", `{"toolName":"http__get","arguments":{"url":"`+u+`"}}`)
		if status != 200 || r.code() != "E_POLICY_DENIED" || !strings.Contains(r.Error.Message, "example/internal-http-only-for-ops") {
			t.Errorf("http__get %s: %d %s %+v", u, status, r.code(), r.Error)
		}
	}

	// The approver is asked about, and the tool writes, the path the rule
	// names; the client's own spelling still names the call.
	call := `{"toolCallId":"n1","toolName":"fs__write","arguments":{"path":"./notes//todo.md","content":"milk"}}`
	status, p := in.as("agent-token", "POST", "/calls", call)
	if status != 202 || p.Approval == nil {
		t.Fatalf("write to ./notes//todo.md: %d %s %+v", status, p.Status, p.Error)
	}
	req, _ := http.NewRequest("GET", in.base+"/approvals/"+p.Approval.ID, nil)
	req.Header.Set("Authorization", "Bearer oncall-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var filed struct{ Arguments json.RawMessage }
	err = json.NewDecoder(resp.Body).Decode(&filed)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(filed.Arguments) != `{"content":"milk","path":"notes/todo.md"}` {
		t.Errorf("arguments filed for approval: %s", filed.Arguments)
	}
	if status, r := in.as("oncall-token", "POST", "/approvals/"+p.Approval.ID, `{"decision":"approve"}`); status != 200 || r.Status != "ok" {
		t.Fatalf("approving: %d %+v", status, r)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "callers/agent/default/notes/todo.md")); err != nil || string(b) != "milk" {
		t.Errorf("notes/todo.md after approval: %q %v", b, err)
	}
	if status, r := in.as("agent-token", "POST", "/calls", call); status != 200 || r.Status != "ok" {
		t.Errorf("the same call again: %d %s %+v", status, r.Status, r.Error)
	}
	// Filed, approved and run, the call has one digest: its arguments as sent.
	if d := digestsOf(t, in.logs.String(), "n1"); len(d) != 1 || !d[p.Approval.ArgumentsDigest] {
		t.Errorf("digests of n1 in the log: %v, filed as %s", d, p.Approval.ArgumentsDigest)
	}
}

// digestsOf returns the argumentsDigest of every log line about call id.
func digestsOf(t *testing.T, logs, id string) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	for _, line := range strings.Split(logs, "\n") {
		var l struct {
			ToolCallID      string `json:"toolCallId"`
			ArgumentsDigest string `json:"argumentsDigest"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.ToolCallID == id && l.ArgumentsDigest != "" {
			seen[l.ArgumentsDigest] = true
		}
	}
	return seen
}
