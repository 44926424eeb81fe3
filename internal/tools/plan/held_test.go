package plan

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// TestPlanStepWaitingForApprovalHoldsTheStepsAfterIt: a step that waits
// for approval has not run, so the steps after it do not start (a write
// after it would overtake it, a read after it would read what it has not
// changed yet); the plan repeated with the same toolCallId once the step
// is approved and done runs them, and runs nothing twice.
func TestPlanStepWaitingForApprovalHoldsTheStepsAfterIt(t *testing.T) {
	env := newStoredEnv(t)
	call := func() []StepResult {
		t.Helper()
		res, out := env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "ph", Arguments: json.RawMessage(`{"steps":[
			{"tool":"test__exec","arguments":{}},
			{"tool":"text__transform","arguments":{"operation":"upper","text":"a"}},
			{"tool":"test__write","arguments":{}}]}`)})
		if res.Status != registry.StatusOK || len(out) != 3 {
			t.Fatalf("plan: %+v %+v", res, res.Error)
		}
		return out
	}
	out := call()
	if out[0].Status != registry.StatusPendingApproval || out[0].Approval == nil {
		t.Fatalf("the privileged step: %+v", out[0])
	}
	for _, s := range out[1:] {
		if s.Status != registry.StatusError || s.Error.Code != registry.CodeCanceled ||
			s.Error.Message != "not started: step 1 (toolCallId ph-step-1) waits for approval, and this step would start only after it finished; nothing of this step ran" ||
			!strings.Contains(s.Error.Suggestion, "Once step 1 is approved and done, call plan__execute again with the same toolCallId: the plan goes on where it stopped") {
			t.Errorf("step %d after the pending one: %+v", s.Step, s.Error)
		}
	}
	if n := env.writes(); n != 0 {
		t.Fatalf("%d steps ran after the pending one", n)
	}
	// Repeated before the decision, the plan still holds them.
	if again := call(); again[0].Status != registry.StatusPendingApproval || again[2].Error == nil || again[2].Error.Code != registry.CodeCanceled || env.writes() != 0 {
		t.Fatalf("repeated while the step waits: %+v / %+v", again[0], again[2].Error)
	}
	if _, res, err := env.exec.Decide(t.Context(), registry.Anonymous(), out[0].Approval.ID, registry.VerdictApprove, ""); err != nil || res.Status != registry.StatusOK {
		t.Fatalf("approving step 1: %v %+v", err, res)
	}
	for _, s := range call() {
		if s.Status != registry.StatusOK {
			t.Errorf("step %d once step 1 is done: %+v", s.Step, s.Error)
		}
	}
	env.mu.Lock()
	defer env.mu.Unlock()
	if got := strings.Join(env.log, ";"); got != "exec by anonymous in ;write by anonymous in " {
		t.Errorf("side effects: %q, want the approved step's, then the write after it, once each", got)
	}
}

// TestPlanStepErrorsSayHowToRunAStepAgain: a step's result that the plan
// repeated with the same toolCallId would only give again does not tell
// the model to retry with a new toolCallId (for a plan that runs every
// step again), but to call the step's tool on its own.
func TestPlanStepErrorsSayHowToRunAStepAgain(t *testing.T) {
	results := []*registry.Result{
		registry.InterruptedResult("p-step-2", "test__write"),
		registry.ApprovalExpiredResult("p-step-2", "test__write"),
		registry.ApprovalDeniedResult("p-step-2", "test__write", "oncall", "no"),
	}
	ctx := context.Background()
	for _, res := range results {
		e := *res.Error
		stepError(ctx, ctx, &e, "test__write")
		if !strings.Contains(e.Suggestion, "plan__execute called again with the same toolCallId gives this step this same result") ||
			(e.Code != registry.CodeApprovalDenied && !strings.Contains(e.Suggestion, "call test__write as a call of its own with a new toolCallId")) ||
			strings.Contains(e.Suggestion, "a retry needs a new toolCallId") || strings.Contains(e.Suggestion, "then call again with a new toolCallId") {
			t.Errorf("%s: %s", e.Code, e.Suggestion)
		}
	}
	// Any other suggestion to use a new toolCallId says what that takes.
	e := registry.Error{Code: registry.CodePolicyDenied, Message: "approval apr_1 was filed by an earlier version", Suggestion: "Make the call again with a new toolCallId and have it approved again."}
	stepError(ctx, ctx, &e, "test__exec")
	if !strings.Contains(e.Suggestion, "call test__exec as a call of its own") {
		t.Errorf("another suggestion of a new toolCallId: %s", e.Suggestion)
	}
}

// TestPlanDeniedStepSaysNotToRunItAgain: the denial of a step, read again
// by the plan repeated, tells the model what a repeat gives.
func TestPlanDeniedStepSaysNotToRunItAgain(t *testing.T) {
	env := newStoredEnv(t)
	args := json.RawMessage(`{"steps":[{"tool":"test__exec","arguments":{}}]}`)
	_, out := env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "pd", Arguments: args})
	if out[0].Status != registry.StatusPendingApproval {
		t.Fatalf("step: %+v", out[0])
	}
	if _, _, err := env.exec.Decide(t.Context(), registry.Anonymous(), out[0].Approval.ID, registry.VerdictDeny, "no"); err != nil {
		t.Fatal(err)
	}
	_, out = env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "pd", Arguments: args})
	if e := out[0].Error; e == nil || e.Code != registry.CodeApprovalDenied || !strings.Contains(e.Suggestion, "same toolCallId gives this step this same result") {
		t.Errorf("denied step: %+v", out[0].Error)
	}
}

// TestPlanStepStoppedPartWaySaysItsEffectsAreUnknown: a step that is not
// read-only, stopped by the plan's deadline after it started, may have
// made its change part-way: its result says so, and how to run it again,
// and says so again when the plan is repeated; the step after it did not
// start, and runs then.
func TestPlanStepStoppedPartWaySaysItsEffectsAreUnknown(t *testing.T) {
	// test__change starts, then waits for its context to end: a change
	// stopped part-way.
	started := make(chan struct{}, 1)
	change := &registry.Tool{
		Definition: registry.Definition{Name: "test__change", Description: "changes", Tier: registry.SideEffecting, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			select {
			case started <- struct{}{}:
				<-ctx.Done()
				return nil, ctx.Err()
			default:
				return "changed", nil // a later call
			}
		}),
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env := newTestEnvWith(t, true, registry.Options{Store: st}, change)
	args := json.RawMessage(`{"steps":[{"tool":"test__change","arguments":{}},{"tool":"test__write","arguments":{}}]}`)

	res, out := env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "pc", Arguments: args, TimeoutMs: 1000})
	if res.Status != registry.StatusOK || len(out) != 2 {
		t.Fatalf("plan: %+v %+v", res, res.Error)
	}
	stopped := out[0].Error
	if stopped == nil || stopped.Code != registry.CodeCanceled ||
		stopped.Message != "stopped: the plan's time ran out while this step ran; "+registry.EffectsUnknownText ||
		!strings.Contains(stopped.Suggestion, "Check whether the change this step was meant to make happened") ||
		!strings.Contains(stopped.Suggestion, "as a call of test__change of its own with a new toolCallId") {
		t.Errorf("the step stopped part-way: %+v", stopped)
	}
	if e := out[1].Error; e == nil || !strings.HasPrefix(e.Message, "not started: the plan's time ran out first") {
		t.Errorf("the step after it: %+v", e)
	}
	// Repeated, the plan answers the stopped step from its record, which
	// it does not run again, and runs the step after it.
	res, out = env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "pc", Arguments: args, TimeoutMs: 1000})
	if res.Status != registry.StatusOK || len(out) != 2 {
		t.Fatalf("repeated plan: %+v %+v", res, res.Error)
	}
	if e := out[0].Error; e == nil || e.Code != registry.CodeCanceled || !strings.HasPrefix(e.Message, "stopped: ") ||
		!strings.Contains(e.Message, registry.EffectsUnknownText) || e.Suggestion != stopped.Suggestion {
		t.Errorf("the stopped step, repeated: %+v", e)
	}
	if out[1].Status != registry.StatusOK || env.writes() != 1 {
		t.Errorf("the step after it, repeated: %+v (%d writes)", out[1], env.writes())
	}
}
