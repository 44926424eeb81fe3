package http

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/telemetry"
)

// TestDeniedCallHasOneAuditLine: an approved call has the audit line of
// its run; a denied one had none ("approval decided" only, without the
// call's id or caller), so a call the service answered E_APPROVAL_DENIED
// was missing from the audit log. Its line is now written by the one
// decision that wins the request: with eight denials racing over two
// replicas sharing one store, the call has exactly one line, with the
// attributes of every other audit line, and "approval decided" names
// the call.
func TestDeniedCallHasOneAuditLine(t *testing.T) {
	logs := &logtest.Buffer{}
	log := telemetry.NewLogger(logs, telemetry.LogOptions{Level: slog.LevelInfo})
	st := openStore(t)
	replica := func() *env {
		return newEnv(t, func(d *Deps, o *registry.Options) {
			d.Logger, o.Logger, o.Store = log, log, st
		})
	}
	a, b := replica(), replica()
	denyID, approveID := a.askApproval("den"), a.askApproval("app")
	pending := toolCallLines(t, logs, "den")
	if len(pending) != 1 || pending[0]["status"] != string(registry.StatusPendingApproval) {
		t.Fatalf("the filing's audit line: %v", pending)
	}

	r := a.do("POST", "/approvals/"+approveID, []byte(`{"decision":"approve"}`), map[string]string{"Content-Type": "application/json", "X-Request-Id": "req-approve"}, true)
	if r.status != 200 {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		e := []*env{a, b}[i%2]
		wg.Go(func() {
			h := map[string]string{"Content-Type": "application/json", "X-Request-Id": fmt.Sprintf("req-deny-%d", i)}
			if r := e.do("POST", "/approvals/"+denyID, []byte(`{"decision":"deny","reason":"not now"}`), h, true); r.status != 200 {
				t.Errorf("deny %d: %d %s", i, r.status, r.body)
			}
		})
	}
	wg.Wait()

	approved := toolCallLines(t, logs, "app")
	if len(approved) != 2 || approved[1]["status"] != string(registry.StatusOK) {
		t.Fatalf("the approved call's audit lines: %v", approved)
	}
	lines := toolCallLines(t, logs, "den")[1:]
	if len(lines) != 1 {
		t.Fatalf("the denied call has %d audit lines after its filing's, want 1: %v\n%s", len(lines), lines, logs)
	}
	line := lines[0]
	want := map[string]any{"caller": "anonymous", "tool": "test__priv", "tier": string(registry.Privileged), "decision": string(registry.Deny),
		"rule": pending[0]["rule"], "status": string(registry.StatusError), "code": string(registry.CodeApprovalDenied),
		"argumentsDigest": pending[0]["argumentsDigest"], "level": "INFO"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("the denied call's audit line has %s %v, want %v: %v", k, line[k], v, line)
		}
	}
	if id, _ := line["requestId"].(string); len(id) < len("req-deny-") || id[:len("req-deny-")] != "req-deny-" {
		t.Errorf("the denied call's audit line has requestId %v, want a denial's", line["requestId"])
	}
	if !slices.Equal(auditKeys(line), auditKeys(approved[1])) {
		t.Errorf("the denied call's audit line has %v, the approved one's %v", auditKeys(line), auditKeys(approved[1]))
	}
	var decided []map[string]any
	for _, m := range logLines(t, logs) {
		if m["msg"] == "approval decided" && m["approvalId"] == denyID {
			decided = append(decided, m)
		}
	}
	if len(decided) != 1 || decided[0]["toolCallId"] != "den" || decided[0]["caller"] != "anonymous" {
		t.Errorf("approval decided lines of the denial: %v", decided)
	}
}
