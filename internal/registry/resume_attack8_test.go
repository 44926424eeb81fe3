package registry_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// decider is a policy written as a function.
type decider func(in *registry.PolicyInput) registry.Decision

func (d decider) Decide(_ context.Context, in *registry.PolicyInput) (registry.Decision, error) {
	return d(in), nil
}

// withCallers is a policy whose configuration defines only the callers
// named in known, as they are there (registry.CallerChecker).
type withCallers struct {
	decider
	known map[string]*registry.Caller
}

func (w withCallers) CurrentCaller(c *registry.Caller) (*registry.Caller, bool) {
	now, ok := w.known[c.ID]
	return now, ok
}

// asks asks about every call of the privileged tier and allows the rest.
func asks(in *registry.PolicyInput) registry.Decision {
	if in.Tool.Tier == registry.Privileged {
		return registry.Decision{Effect: registry.Ask, Rule: "p/privileged-ask"}
	}
	return registry.Decision{Effect: registry.Allow, Rule: "p/allow"}
}

// TestApprovalMeetsTheCurrentPolicy: a call approved after a reload added
// a rule that denies it, or removed the caller that filed it or took the
// tool or the call scope from it, ends
// E_POLICY_DENIED without running, recorded and audited as a denial, and
// the approver's answer says why. A policy that still asks lets the
// approval run the call, and a condition on the caller's claims sees the
// claims the call was filed with.
func TestApprovalMeetsTheCurrentPolicy(t *testing.T) {
	tool, runs := privileged()
	reg := newRegistry(t, tool)
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: reg, Policy: decider(asks), Store: st})
	agent := &registry.Caller{ID: "agent", Scopes: []registry.Scope{registry.ScopeCall}, Issuer: "https://idp.example", Subject: "u1",
		Claims: map[string]any{"team": "ops"}}
	oncall := &registry.Caller{ID: "oncall", Scopes: []registry.Scope{registry.ScopeApprove}}
	file := func(c *registry.Caller, id string) string {
		t.Helper()
		res, err := e.Execute(t.Context(), c, &registry.Call{ToolCallID: id, ToolName: "shell__exec"})
		if err != nil || res.Status != registry.StatusPendingApproval {
			t.Fatalf("filing %s: %v %+v", id, err, res)
		}
		return res.Approval.ID
	}
	decide := func(id string) *registry.Result {
		t.Helper()
		_, out, err := e.Decide(t.Context(), oncall, id, registry.VerdictApprove, "")
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	denied := file(agent, "d1")
	e.Load(reg, decider(func(in *registry.PolicyInput) registry.Decision {
		if in.Tool.Name == "shell__exec" {
			return registry.Decision{Effect: registry.Deny, Rule: "p/frozen", Reason: "frozen for the incident"}
		}
		return asks(in)
	}))
	out := decide(denied)
	if out.Code() != registry.CodePolicyDenied || !strings.Contains(out.Error.Message, "denied by policy rule p/frozen: frozen for the incident") ||
		!strings.Contains(out.Error.Message, "changed since this call was filed") || !strings.Contains(out.Error.Message, "nothing ran") {
		t.Fatalf("approved after a deny rule came in: %+v", out.Error)
	}
	rec, err := st.GetCall(t.Context(), "agent", "d1")
	if err != nil || rec.State != registry.CallDone || rec.Result.Code() != registry.CodePolicyDenied {
		t.Fatalf("record: %v %+v", err, rec)
	}
	audit, err := st.ListAudit(t.Context(), registry.AuditFilter{CallerID: "agent"})
	if err != nil {
		t.Fatal(err)
	}
	if last := audit[len(audit)-1]; last.Event != "call" || last.Decision != registry.Deny || last.Rule != "p/frozen" || last.Code != registry.CodePolicyDenied {
		t.Errorf("audit entry of the denied call: %+v", last)
	}

	// The caller is removed.
	e.Load(reg, decider(asks))
	gone := file(&registry.Caller{ID: "bob", Scopes: []registry.Scope{registry.ScopeCall}}, "b1")
	e.Load(reg, withCallers{decider(asks), map[string]*registry.Caller{"agent": agent, "oncall": oncall}})
	if out := decide(gone); out.Code() != registry.CodePolicyDenied || !strings.Contains(out.Error.Message, "caller bob, which filed this call, no longer exists") {
		t.Fatalf("approved after its caller was removed: %+v", out.Error)
	}

	// The caller is narrowed: the tool, or the call scope, taken from it.
	e.Load(reg, decider(asks))
	carol := &registry.Caller{ID: "carol", Scopes: []registry.Scope{registry.ScopeCall}}
	toolGone, scopeGone, tierGone := file(carol, "c1"), file(carol, "c2"), file(carol, "c3")
	for _, c := range []struct {
		id  string
		now *registry.Caller
	}{
		{toolGone, &registry.Caller{ID: "carol", Scopes: []registry.Scope{registry.ScopeCall}, Tools: []string{"fs__*"}}},
		{scopeGone, &registry.Caller{ID: "carol", Scopes: []registry.Scope{registry.ScopeApprove}}},
		{tierGone, &registry.Caller{ID: "carol", Scopes: []registry.Scope{registry.ScopeCall}, MaxTier: registry.SideEffecting}},
	} {
		e.Load(reg, withCallers{decider(asks), map[string]*registry.Caller{"carol": c.now, "oncall": oncall}})
		if out := decide(c.id); out.Code() != registry.CodePolicyDenied || !strings.Contains(out.Error.Message, "caller carol, which filed this call, may no longer call tool shell__exec") {
			t.Fatalf("approved after its caller was narrowed to %+v: %+v", c.now, out.Error)
		}
	}
	if runs.Load() != 0 {
		t.Fatalf("the tool ran %d times; every approval was refused", runs.Load())
	}

	// Still asks, and a condition on the claims the call was filed with.
	e.Load(reg, decider(asks))
	ok := file(agent, "a1")
	e.Load(reg, decider(func(in *registry.PolicyInput) registry.Decision {
		if in.Caller.Claims["team"] != "ops" {
			return registry.Decision{Effect: registry.Deny, Rule: "p/ops-only"}
		}
		return asks(in)
	}))
	if out := decide(ok); out.Status != registry.StatusOK {
		t.Fatalf("approved while the policy still asks: %+v", out.Error)
	}
	if runs.Load() != 1 {
		t.Fatalf("the tool ran %d times, want 1", runs.Load())
	}
}

// TestInlineApprovalOnARepeatDecidesTheRequest: a repeat of a pending call
// that grants its approval inline, from a caller with the approve scope,
// decides the request as POST /approvals/{id} by that caller would: the
// call runs once, the answer is its result, and the request says who
// approved it. From a caller without the scope the grant is ignored, as
// on a first call.
func TestInlineApprovalOnARepeatDecidesTheRequest(t *testing.T) {
	tool, runs := privileged()
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	gateway := &registry.Caller{ID: "gateway", Scopes: []registry.Scope{registry.ScopeCall, registry.ScopeApprove}}
	agent := &registry.Caller{ID: "agent", Scopes: []registry.Scope{registry.ScopeCall}}
	grant := &registry.InlineApproval{Granted: true, By: "user-42"}

	for _, c := range []*registry.Caller{gateway, agent} {
		first, err := e.Execute(t.Context(), c, &registry.Call{ToolCallID: "i1", ToolName: "shell__exec"})
		if err != nil || first.Status != registry.StatusPendingApproval {
			t.Fatalf("%s filing: %v %+v", c.ID, err, first)
		}
		res, err := e.Execute(t.Context(), c, &registry.Call{ToolCallID: "i1", ToolName: "shell__exec", Approval: grant})
		if err != nil {
			t.Fatal(err)
		}
		a, err := st.GetApproval(t.Context(), first.Approval.ID)
		if err != nil {
			t.Fatal(err)
		}
		if c == agent {
			if res.Status != registry.StatusPendingApproval || a.Status != registry.ApprovalPending {
				t.Errorf("a grant from a caller without the approve scope: %+v, request %s; want it ignored", res, a.Status)
			}
			continue
		}
		if res.Status != registry.StatusOK || string(res.Output) != "1" {
			t.Fatalf("a repeat that grants the approval: %+v, want the call's result", res)
		}
		if a.Status != registry.ApprovalApproved || a.DecidedBy != "gateway" || !strings.Contains(a.DecisionReason, "user-42") {
			t.Errorf("request: %s by %q (%q)", a.Status, a.DecidedBy, a.DecisionReason)
		}
		again, err := e.Execute(t.Context(), c, &registry.Call{ToolCallID: "i1", ToolName: "shell__exec", Approval: grant})
		if err != nil || again.Status != registry.StatusOK || string(again.Output) != "1" {
			t.Errorf("a further repeat: %v %+v, want the stored result", err, again)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}

// TestApprovedPlanGoesOnWhereItStopped: a call of a tool that nests (a
// plan) that needed approval is approved while one of its calls itself
// waits for approval. Once that call is approved and has run, a repeat of
// the plan goes on where it stopped and answers with the calls as they
// stand (nothing runs twice), instead of the plan's first answer frozen in
// its record; and the plan's record does not keep a call's pending state
// as final. A plan whose calls all finished keeps its answer.
func TestApprovedPlanGoesOnWhereItStopped(t *testing.T) {
	var e *registry.Executor
	var plainRuns, gatedRuns atomic.Int32
	step := func(name string, tier registry.Tier, runs *atomic.Int32) *registry.Tool {
		return &registry.Tool{
			Definition: registry.Definition{Name: name, Description: "A step.", Tier: tier, Parameters: object},
			Handler:    registry.Func(func(context.Context, *registry.Request) (any, error) { return runs.Add(1), nil }),
		}
	}
	plan := &registry.Tool{
		Definition: registry.Definition{Name: "plan__execute", Description: "Runs steps.", Tier: registry.SideEffecting,
			Parameters: json.RawMessage(`{"type":"object","properties":{"steps":{"type":"array","items":{"type":"string"}}}}`)},
		Nests: true,
		Handler: registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
			var args struct{ Steps []string }
			if err := json.Unmarshal(req.Arguments, &args); err != nil {
				return nil, err
			}
			var out []string
			for i, s := range args.Steps {
				res, err := e.Execute(ctx, req.Caller, &registry.Call{ToolCallID: req.CallID + "-step-" + string(rune('1'+i)), ToolName: s})
				if err != nil {
					return nil, err
				}
				out = append(out, string(res.Status))
			}
			return out, nil
		}),
	}
	st := openSQLite(t)
	e = registry.NewExecutor(registry.Options{Registry: newRegistry(t, plan, step("step__plain", registry.SideEffecting, &plainRuns),
		step("step__gated", registry.Privileged, &gatedRuns)), Store: st,
		Policy: decider(func(in *registry.PolicyInput) registry.Decision {
			if in.Tool.Name == "plan__execute" {
				return registry.Decision{Effect: registry.Ask, Rule: "p/plans-ask"}
			}
			return asks(in)
		})})
	agent := &registry.Caller{ID: "agent", Scopes: []registry.Scope{registry.ScopeCall}}
	oncall := &registry.Caller{ID: "oncall", Scopes: []registry.Scope{registry.ScopeApprove}}
	call := &registry.Call{ToolCallID: "pa1", ToolName: "plan__execute", Arguments: json.RawMessage(`{"steps":["step__plain","step__gated"]}`)}

	filed, err := e.Execute(t.Context(), agent, call)
	if err != nil || filed.Status != registry.StatusPendingApproval {
		t.Fatalf("filing the plan: %v %+v", err, filed)
	}
	_, ran, err := e.Decide(t.Context(), oncall, filed.Approval.ID, registry.VerdictApprove, "")
	if err != nil || ran.Status != registry.StatusOK || string(ran.Output) != `["ok","pending_approval"]` {
		t.Fatalf("approving the plan: %v %+v %s", err, ran, ran.Output)
	}
	stepRec, err := st.GetCall(t.Context(), "agent", "pa1-step-2")
	if err != nil || stepRec.State != registry.CallPendingApproval {
		t.Fatalf("step 2: %v %+v", err, stepRec)
	}
	if _, out, err := e.Decide(t.Context(), oncall, stepRec.ApprovalID, registry.VerdictApprove, ""); err != nil || out.Status != registry.StatusOK {
		t.Fatalf("approving step 2: %v %+v", err, out)
	}
	for i := range 2 {
		again, err := e.Execute(t.Context(), agent, call)
		if err != nil || again.Status != registry.StatusOK || string(again.Output) != `["ok","ok"]` {
			t.Fatalf("repeat %d of the plan: %v %+v %s, want it to go on with both steps ok", i+1, err, again, again.Output)
		}
	}
	rec, err := st.GetCall(t.Context(), "agent", "pa1")
	if err != nil || rec.State != registry.CallDone || strings.Contains(string(rec.Result.Output), "pending_approval") ||
		!strings.Contains(string(rec.Result.Output), "Repeat the call with the same toolCallId") {
		t.Fatalf("the plan's record: %v %+v %s; want no stale step state, and where the outcome is", err, rec, rec.Result.Output)
	}
	if plainRuns.Load() != 1 || gatedRuns.Load() != 1 {
		t.Errorf("steps ran %d and %d times, want once each", plainRuns.Load(), gatedRuns.Load())
	}

	// Every step finished: the record keeps the plan's answer.
	done := &registry.Call{ToolCallID: "pa2", ToolName: "plan__execute", Arguments: json.RawMessage(`{"steps":["step__plain"]}`)}
	filed, err = e.Execute(t.Context(), agent, done)
	if err != nil || filed.Status != registry.StatusPendingApproval {
		t.Fatalf("filing: %v %+v", err, filed)
	}
	if _, ran, err = e.Decide(t.Context(), oncall, filed.Approval.ID, registry.VerdictApprove, ""); err != nil || string(ran.Output) != `["ok"]` {
		t.Fatalf("approving: %v %+v", err, ran)
	}
	if rec, err := st.GetCall(t.Context(), "agent", "pa2"); err != nil || string(rec.Result.Output) != `["ok"]` {
		t.Fatalf("the record of a plan whose steps all finished: %v %+v", err, rec)
	}

	// A denied plan stays denied.
	denied := &registry.Call{ToolCallID: "pa3", ToolName: "plan__execute", Arguments: json.RawMessage(`{"steps":["step__plain"]}`)}
	filed, _ = e.Execute(t.Context(), agent, denied)
	if _, _, err := e.Decide(t.Context(), oncall, filed.Approval.ID, registry.VerdictDeny, "no"); err != nil {
		t.Fatal(err)
	}
	if res, err := e.Execute(t.Context(), agent, denied); err != nil || res.Code() != registry.CodeApprovalDenied {
		t.Fatalf("a repeat of a denied plan: %v %+v", err, res)
	}
	if plainRuns.Load() != 2 {
		t.Errorf("step__plain ran %d times, want 2", plainRuns.Load())
	}
}
