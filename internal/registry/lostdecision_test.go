package registry_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// lostDecision is a real store whose DecideApproval, while lose is set,
// commits and then answers with an error, as a decision whose answer the
// network lost: the call's record is then running under this store, and
// nothing leases it.
type lostDecision struct {
	*sqlite.Store
	lose atomic.Bool
}

func (s *lostDecision) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	a, won, err := s.Store.DecideApproval(ctx, id, v, by, reason, now)
	if err != nil || !s.lose.Load() {
		return a, won, err
	}
	if won {
		s.Store.ReleaseCall(a.CallerID, a.ToolCallID)
	}
	return nil, false, errDown
}

// TestApprovalWhoseAnswerWasLostRuns: an approval that committed though
// its approver was answered with an error (the store's answer was lost)
// runs its call, once, instead of leaving it running under this replica
// with nothing to run it until it lapses to E_INTERRUPTED. The approval's
// audit entry comes before the call's, and the approver's retry gets the
// call's result.
func TestApprovalWhoseAnswerWasLostRuns(t *testing.T) {
	tool, runs := privileged()
	st := &lostDecision{Store: openSQLite(t)}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	t.Cleanup(e.Drain)
	caller := registry.Anonymous()
	oncall := &registry.Caller{ID: "oncall", Scopes: []registry.Scope{registry.ScopeApprove}}
	res, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "lost-1", ToolName: "shell__exec"})
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing: %v %+v", err, res)
	}
	id := res.Approval.ID

	st.lose.Store(true)
	if _, _, err := e.Decide(t.Context(), oncall, id, registry.VerdictApprove, ""); err == nil {
		t.Fatal("Decide answered though the store's answer was lost")
	}
	st.lose.Store(false)

	wctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	rec, err := st.WaitCall(wctx, caller.ID, "lost-1")
	if err != nil || rec.Result == nil || rec.Result.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("record of the approved call = %+v, %v (runs %d); want it run once, ok", rec, err, runs.Load())
	}
	_, out, err := e.Decide(t.Context(), oncall, id, registry.VerdictApprove, "")
	if err != nil || out == nil || out.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("the approver's retry: %v %+v (runs %d); want the call's result", err, out, runs.Load())
	}
	audit, err := st.ListAudit(t.Context(), registry.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range audit {
		got = append(got, a.Event+" "+a.CallerID+" "+string(a.Status))
	}
	if want := "call anonymous pending_approval,approval oncall ,call anonymous ok"; strings.Join(got, ",") != want {
		t.Errorf("audit trail %q, want %q", strings.Join(got, ","), want)
	}
}
