package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// listSpy is the embedded store, counting the requests its lists return.
type listSpy struct {
	*sqlite.Store
	listed atomic.Int64
}

func (s *listSpy) ListApprovals(ctx context.Context, f registry.ApprovalFilter) ([]*registry.Approval, error) {
	list, err := s.Store.ListApprovals(ctx, f)
	s.listed.Add(int64(len(list)))
	return list, err
}

// tokenCaller is a token caller whose claims hold n groups of 1,000
// bytes each.
func tokenCaller(id string, n int) *registry.Caller {
	groups := make([]any, n)
	for i := range groups {
		groups[i] = fmt.Sprintf("%04d", i) + strings.Repeat("g", 996)
	}
	return &registry.Caller{ID: id, Scopes: []registry.Scope{registry.ScopeCall}, Issuer: "https://idp.example", Subject: id,
		Claims: map[string]any{"team": "ops", "groups": groups}}
}

// TestPendingBoundReadsNoRequests: the bound on a caller's waiting
// requests is counted, not listed: a list read every request waiting,
// with the claims filed with it, so each filing of a token caller with
// large claims took longer than the one before.
func TestPendingBoundReadsNoRequests(t *testing.T) {
	tool, runs := privileged()
	st := &listSpy{Store: openSQLite(t)}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Policy: decider(asks), Store: st, MaxPendingApprovals: 5})
	agent := tokenCaller("agent", 100)
	for i := range 6 {
		res, err := e.Execute(t.Context(), agent, &registry.Call{ToolCallID: fmt.Sprint("p", i), ToolName: "shell__exec"})
		if err != nil {
			t.Fatal(err)
		}
		if i < 5 && res.Status != registry.StatusPendingApproval {
			t.Fatalf("request %d: %+v, want it filed", i, res.Error)
		}
		if i == 5 && (res.Code() != registry.CodePolicyDenied || !strings.Contains(res.Error.Message, "already has 5 approval requests waiting")) {
			t.Fatalf("the sixth request: %+v, want E_POLICY_DENIED naming the bound", res.Error)
		}
	}
	if n := st.listed.Load(); n != 0 {
		t.Errorf("filing six requests listed %d requests (their filings and claims with them); the bound is a count", n)
	}
	if runs.Load() != 0 {
		t.Errorf("the tool ran %d times; nothing was approved", runs.Load())
	}
}

// TestFiledClaimsAreBounded: a request keeps its caller's claims whole up
// to MaxFiledClaimsBytes, and the approved call is decided with them. A
// call whose caller's claims are larger is not filed (it fails closed: a
// condition could not tell a dropped claim from one the token never had)
// and says why; it leaves no record and no request.
func TestFiledClaimsAreBounded(t *testing.T) {
	tool, runs := privileged()
	st := openSQLite(t)
	fits := registry.MaxFiledClaimsBytes/1003 - 1
	// At approval the policy sees the claims as filed, every group of them.
	policy := decider(func(in *registry.PolicyInput) registry.Decision {
		if g, _ := in.Caller.Claims["groups"].([]any); len(g) != fits && in.Caller.ID == "fits" {
			return registry.Decision{Effect: registry.Deny, Rule: "p/claims", Reason: fmt.Sprintf("%d groups", len(g))}
		}
		return asks(in)
	})
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Policy: policy, Store: st})
	oncall := &registry.Caller{ID: "oncall", Scopes: []registry.Scope{registry.ScopeApprove}}

	under := tokenCaller("fits", fits)
	if b, _ := json.Marshal(under.Claims); len(b) > registry.MaxFiledClaimsBytes || len(b) < registry.MaxFiledClaimsBytes-2048 {
		t.Fatalf("the claims that fit are %d bytes; want just under %d", len(b), registry.MaxFiledClaimsBytes)
	}
	res, err := e.Execute(t.Context(), under, &registry.Call{ToolCallID: "u1", ToolName: "shell__exec"})
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("claims under the bound: %v %+v, want the call filed", err, res.Error)
	}
	if _, out, err := e.Decide(t.Context(), oncall, res.Approval.ID, registry.VerdictApprove, ""); err != nil || out.Status != registry.StatusOK {
		t.Fatalf("approving it: %v %+v, want it run with the claims it was filed with", err, out)
	}

	over := tokenCaller("large", fits+10)
	res, err = e.Execute(t.Context(), over, &registry.Call{ToolCallID: "o1", ToolName: "shell__exec"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Code() != registry.CodePolicyDenied || !strings.Contains(res.Error.Message, "KiB of claims, more than the 256 KiB an approval request keeps") ||
		!strings.Contains(res.Error.Message, "nothing ran") {
		t.Fatalf("claims over the bound: %+v, want E_POLICY_DENIED saying the claims are too large to file", res.Error)
	}
	if _, err := st.GetCall(t.Context(), "large", "o1"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("the refused call left a record: %v", err)
	}
	if n, err := st.CountApprovals(t.Context(), registry.ApprovalFilter{CallerID: "large"}); err != nil || n != 0 {
		t.Errorf("the refused call filed %d requests (%v)", n, err)
	}
	if runs.Load() != 1 {
		t.Errorf("the tool ran %d times, want 1 (the approved call)", runs.Load())
	}
}
