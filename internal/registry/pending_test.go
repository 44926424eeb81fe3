package registry_test

import (
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestPendingApprovalsPerCaller: a caller with MaxPendingApprovals
// requests waiting cannot file another (E_POLICY_DENIED, nothing
// recorded), while a repeat of a waiting call is answered with its ticket,
// another caller still files, and a decision makes room again.
func TestPendingApprovalsPerCaller(t *testing.T) {
	tool, runs := privileged()
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st, MaxPendingApprovals: 2})
	alice, bob := &registry.Caller{ID: "alice"}, &registry.Caller{ID: "bob"}
	call := func(c *registry.Caller, id string) *registry.Result {
		t.Helper()
		res, err := e.Execute(t.Context(), c, &registry.Call{ToolCallID: id, ToolName: "shell__exec"})
		if err != nil {
			t.Fatalf("%s/%s: %v", c.ID, id, err)
		}
		return res
	}
	first := call(alice, "a1")
	if first.Status != registry.StatusPendingApproval || call(alice, "a2").Status != registry.StatusPendingApproval {
		t.Fatalf("the first two requests were not filed: %+v", first)
	}
	over := call(alice, "a3")
	if over.Code() != registry.CodePolicyDenied || !strings.Contains(over.Error.Message, "already has 2 approval requests waiting") {
		t.Fatalf("a third request: %+v, want E_POLICY_DENIED naming the bound", over.Error)
	}
	if _, err := st.GetCall(t.Context(), "alice", "a3"); err == nil {
		t.Error("the refused call left a record")
	}
	if again := call(alice, "a1"); again.Status != registry.StatusPendingApproval || again.Approval.ID != first.Approval.ID {
		t.Errorf("a repeat of a waiting call: %+v, want its ticket %s", again, first.Approval.ID)
	}
	if res := call(bob, "b1"); res.Status != registry.StatusPendingApproval {
		t.Errorf("another caller's request: %+v", res.Error)
	}
	if _, _, err := e.Decide(t.Context(), &registry.Caller{ID: "oncall", Scopes: []registry.Scope{registry.ScopeApprove}}, first.Approval.ID, registry.VerdictDeny, "no"); err != nil {
		t.Fatal(err)
	}
	if res := call(alice, "a4"); res.Status != registry.StatusPendingApproval {
		t.Errorf("a request once one was decided: %+v", res.Error)
	}
	if runs.Load() != 0 {
		t.Errorf("the tool ran %d times; nothing was approved", runs.Load())
	}
}
