// Package plan provides plan__execute, an opt-in meta-tool with which a
// model runs several tool calls in one step. The steps run as a batch
// through the executor that runs every other call, so each step is looked
// up, validated, checked by policy for the same caller, timed out,
// truncated and counted on its own.
package plan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Name is the name of the plan tool.
const Name = "plan__execute"

// DefaultMaxOutputBytes bounds a plan's output when Options leave it unset:
// a plan returns the outputs of many steps at once.
const DefaultMaxOutputBytes = 65536

// Runner runs a batch of calls; *registry.Executor implements it.
type Runner interface {
	ExecuteBatch(ctx context.Context, caller *registry.Caller, calls []*registry.Call, o registry.BatchOptions) ([]*registry.Result, error)
}

// Options configure plan__execute.
type Options struct {
	// Batch schedules the steps: read_only steps run concurrently, at most
	// Batch.Parallelism at once.
	Batch registry.BatchOptions
	// Timeout bounds a whole plan; 0 takes the registry's default timeout.
	Timeout time.Duration
	// MaxOutputBytes bounds a plan's output; 0 means DefaultMaxOutputBytes.
	MaxOutputBytes int
}

// Limit takes one token per step from the caller's rate limits before the
// steps run, as a batch takes one per call; held is the plan's own tool,
// which took its token when its call came in. A refusal is the plan's
// error (a *registry.Error says why to the model).
type Limit func(ctx context.Context, caller *registry.Caller, held string, tools []string) error

// Binder connects plan__execute to the executor that runs its steps, and
// to the rate limits its steps are held to. The executor needs the
// registry that holds the tool, so the tool is built first and bound once
// the executor exists.
type Binder struct {
	runner atomic.Pointer[Runner]
	limit  atomic.Pointer[Limit]
}

// Bind makes r run the steps of every plan from now on.
func (b *Binder) Bind(r Runner) { b.runner.Store(&r) }

// BindLimit holds the steps of every plan from now on to l.
func (b *Binder) BindLimit(l Limit) {
	if l == nil {
		b.limit.Store(nil)
		return
	}
	b.limit.Store(&l)
}

// Tools returns plan__execute and the Binder to give it its executor.
func Tools(o Options) ([]*registry.Tool, *Binder) {
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	b := &Binder{}
	yes, no := true, false
	t := &registry.Tool{
		Definition: registry.Definition{
			Name: Name,
			Description: "Run several tool calls in one step and get all their results at once. " +
				"Give the calls as `steps`, each {\"tool\": name, \"arguments\": {...}}, at most " + strconv.Itoa(registry.MaxBatchCalls) + ". " +
				"Steps of read-only tools next to each other run at the same time; any other step runs alone, in order, after the steps before it. " +
				"A step that waits for a human's approval holds back the steps that would run after it (every later step but the read-only ones running alongside it): they do not start. " +
				"Once it is approved and done, call " + Name + " again with the same toolCallId: the plan goes on where it stopped, and no step that is not read-only runs twice. " +
				"A step cannot use another step's output, so put only independent calls in one plan. " +
				"Each step is checked and run exactly as if you had called its tool directly, and one failed step does not stop the others. " +
				"A plan cannot contain " + Name + ". " +
				"A step with \"recordPending\": true ran and its result is real, but the service has not stored it yet (it retries): do not run that step again because of it. " +
				"Returns {\"ok\": n, \"failed\": n, \"pendingApproval\": n, \"steps\": [{\"step\": n, \"tool\": name, \"status\": \"ok\"|\"error\"|\"pending_approval\", \"output\"|\"error\": ...}]}, the steps in order.",
			Parameters:     json.RawMessage(schema),
			OutputSchema:   json.RawMessage(outputSchema),
			Tier:           registry.SideEffecting,
			Timeout:        o.Timeout,
			MaxOutputBytes: o.MaxOutputBytes,
			Annotations:    &registry.Annotations{Title: "Run a plan of tool calls", ReadOnlyHint: &no, DestructiveHint: &yes, IdempotentHint: &no, OpenWorldHint: &yes},
			Tags:           []string{"plan"},
			Type:           "builtin",
		},
		Handler: registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
			return b.run(ctx, req, o.Batch)
		}),
		// The steps run through the executor, on the plan's slot when
		// the service has none free.
		Nests: true,
	}
	return []*registry.Tool{t}, b
}

var schema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["steps"],
  "properties": {
    "steps": {
      "type": "array",
      "minItems": 1,
      "maxItems": ` + strconv.Itoa(registry.MaxBatchCalls) + `,
      "description": "The tool calls to run, in order.",
      "items": {
        "type": "object",
        "additionalProperties": false,
        "required": ["tool"],
        "properties": {
          "tool": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The exact name of a tool you were given, e.g. \"fs__read\"."},
          "arguments": {"type": "object", "description": "The tool's arguments, as you would pass them to the tool itself."}
        }
      }
    }
  }
}`

// outputSchema describes Output. A step's output is whatever its tool
// returned (any JSON); its error is a ToolCallResult's error.
const outputSchema = `{
  "type": "object",
  "required": ["ok", "failed", "pendingApproval", "steps"],
  "properties": {
    "ok": {"type": "integer", "minimum": 0, "description": "How many steps succeeded."},
    "failed": {"type": "integer", "minimum": 0, "description": "How many steps failed (status error)."},
    "pendingApproval": {"type": "integer", "minimum": 0, "description": "How many steps wait for a human's approval and have not run."},
    "recordPending": {"type": "integer", "minimum": 1, "description": "How many steps ran but have no stored record yet (absent when none)."},
    "steps": {
      "type": "array",
      "description": "One result per step, in step order.",
      "items": {
        "type": "object",
        "required": ["step", "tool", "status"],
        "properties": {
          "step": {"type": "integer", "minimum": 1, "description": "The step's position, from 1."},
          "tool": {"type": "string"},
          "status": {"type": "string", "enum": ["ok", "error", "pending_approval"]},
          "output": {"description": "The step's output, as its tool returned it."},
          "truncated": {"type": "boolean"},
          "originalBytes": {"type": "integer", "minimum": 0},
          "recordPending": {"type": "boolean", "description": "The step ran, but the store has not taken its result yet: the service holds it in memory and retries writing it. Until then only this instance has it; if it is lost, the step's record reads E_INTERRUPTED."},
          "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
              "code": {"type": "string"},
              "message": {"type": "string"},
              "name": {"type": "string"},
              "suggestion": {"type": "string"},
              "helpUrl": {"type": "string"},
              "details": {"type": "array", "items": {"type": "object", "required": ["message"], "properties": {"path": {"type": "string"}, "message": {"type": "string"}}}}
            }
          },
          "approval": {
            "type": "object",
            "required": ["id", "expiresAt", "argumentsDigest"],
            "properties": {"id": {"type": "string"}, "expiresAt": {"type": "string", "format": "date-time"}, "argumentsDigest": {"type": "string"}}
          }
        }
      }
    }
  }
}`

// Output is what plan__execute returns: how the steps went, counted
// first so that a model reading a long plan's output (or its cut head)
// sees the outcome at once, then every step's result in step order.
type Output struct {
	OK              int `json:"ok"`
	Failed          int `json:"failed"`
	PendingApproval int `json:"pendingApproval"`
	// RecordPending counts the steps whose result the store has not
	// taken yet (StepResult.RecordPending).
	RecordPending int          `json:"recordPending,omitempty"`
	Steps         []StepResult `json:"steps"`
}

type step struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// StepResult is the outcome of one step of a plan.
type StepResult struct {
	// Step is the step's position, from 1.
	Step          int                      `json:"step"`
	Tool          string                   `json:"tool"`
	Status        registry.Status          `json:"status"`
	Output        json.RawMessage          `json:"output,omitempty"`
	Truncated     bool                     `json:"truncated,omitempty"`
	OriginalBytes int64                    `json:"originalBytes,omitempty"`
	Error         *registry.Error          `json:"error,omitempty"`
	Approval      *registry.ApprovalTicket `json:"approval,omitempty"`
	// RecordPending is the step result's own (registry.Result): the step
	// ran, but its record is held in memory until the store takes it, and
	// reads E_INTERRUPTED if it never does. A plan that dropped it would
	// answer a plain "ok" that a repeat of the plan may contradict.
	RecordPending bool `json:"recordPending,omitempty"`
}

func (b *Binder) run(ctx context.Context, req *registry.Request, o registry.BatchOptions) (any, error) {
	var a struct {
		Steps []step `json:"steps"`
	}
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	for i, s := range a.Steps {
		if s.Tool == Name {
			return nil, &registry.Error{Code: registry.CodeInvalidArguments,
				Message:    fmt.Sprintf("step %d calls %s: a plan cannot contain another plan", i+1, Name),
				Suggestion: "Put the inner plan's steps into this plan's steps, or call " + Name + " again after this plan returns."}
		}
	}
	r := b.runner.Load()
	if r == nil || req.Caller == nil {
		// A wiring mistake; the model can do nothing about it.
		return nil, &registry.Error{Code: registry.CodeInternal, Message: "internal error"}
	}
	calls := make([]*registry.Call, len(a.Steps))
	for i, s := range a.Steps {
		calls[i] = &registry.Call{
			ToolCallID: req.CallID + "-step-" + strconv.Itoa(i+1),
			ToolName:   s.Tool,
			Arguments:  s.Arguments,
			Catalog:    req.Catalog,
			Context:    req.Context,
		}
	}
	if l := b.limit.Load(); l != nil {
		tools := make([]string, len(a.Steps))
		for i, s := range a.Steps {
			tools[i] = s.Tool
		}
		if err := (*l)(ctx, req.Caller, Name, tools); err != nil {
			return nil, err
		}
	}
	// The steps end before the plan does, so that the plan can still say
	// which of them ran: at its own deadline the plan's answer would be
	// its timeout alone.
	sctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(ctx, dl.Add(-min(left/10, maxReserve)))
		defer cancel()
	}
	results, err := (*r).ExecuteBatch(sctx, req.Caller, calls, o)
	switch {
	case errors.Is(err, registry.ErrOverloaded):
		return nil, &registry.Error{Code: registry.CodeTool,
			Message:    "no step ran: the service is at its limit of calls in flight",
			Suggestion: "Retry the plan in a moment."}
	case errors.Is(err, registry.ErrUnavailable):
		return nil, &registry.Error{Code: registry.CodeTool,
			Message:    "no step ran: the call store did not answer, so no step could be recorded",
			Suggestion: "Retry the plan in a moment."}
	}
	if err != nil {
		return nil, err
	}
	out := &Output{Steps: make([]StepResult, len(results))}
	waiting := -1 // the first step not finished (pending approval, or running)
	for i, res := range results {
		out.Steps[i] = StepResult{Step: i + 1, Tool: res.ToolName, Status: res.Status, Output: res.Output,
			Truncated: res.Truncated, OriginalBytes: res.OriginalBytes, Error: res.Error, Approval: res.Approval, RecordPending: res.RecordPending}
		if res.RecordPending {
			out.RecordPending++
		}
		if res.Error != nil {
			e := *res.Error // the result's own may be held elsewhere
			if waiting >= 0 && e.Code == registry.CodeCanceled && strings.Contains(e.Message, registry.HeldText) {
				heldError(&e, waiting+1, results[waiting])
			} else {
				stepError(ctx, sctx, &e, res.ToolName)
			}
			out.Steps[i].Error = &e
		}
		switch res.Status {
		case registry.StatusOK:
			out.OK++
		case registry.StatusPendingApproval:
			out.PendingApproval++
		default:
			out.Failed++
		}
		if waiting < 0 && (res.Status == registry.StatusPendingApproval || res.Status == registry.StatusRunning) {
			waiting = i
		}
	}
	return out, nil
}

// heldError is the error of a step that did not start because step n,
// whose result is w, waits for approval (or still runs) and the step
// would have started only after it.
func heldError(e *registry.Error, n int, w *registry.Result) {
	what := "waits for approval"
	if w.Status == registry.StatusRunning {
		what = "is still running"
	}
	e.Message = fmt.Sprintf("not started: step %d (toolCallId %s) %s, and this step would start only after it finished; nothing of this step ran", n, w.ToolCallID, what)
	when := "is approved and done"
	if w.Status == registry.StatusRunning {
		when = "is done"
	}
	e.Suggestion = fmt.Sprintf("Once step %d %s, call %s again with the same toolCallId: the plan goes on where it stopped (no step that is not read-only runs twice), and this one runs.", n, when, Name)
}

// maxReserve bounds the time a plan keeps back from its steps to answer.
const maxReserve = time.Second

// stepError rewrites the error of a step, of tool, where what a call's
// error says does not hold for a step: its toolCallId is the plan's with
// the step's number, so the model cannot run the step again under a new
// one, only the plan, which would run every step again; the plan
// repeated with the same toolCallId gives a step that ran the same
// result. And the steps' end before the plan's is the plan's time running
// out. ctx is the plan's, sctx the steps'.
func stepError(ctx, sctx context.Context, e *registry.Error, tool string) {
	notRun := strings.HasPrefix(e.Message, "not started") || strings.HasPrefix(e.Message, "not run")
	outOfTime := ctx.Err() == nil && errors.Is(sctx.Err(), context.DeadlineExceeded)
	// A step that ran (or was decided) answers with the same result when
	// the plan is repeated with the same toolCallId.
	again := "To run this step again, call " + tool + " as a call of its own with a new toolCallId: " + Name +
		" called again with the same toolCallId gives this step this same result, and with a new one runs every step again."
	switch {
	case e.Code == registry.CodeCanceled && notRun && outOfTime:
		e.Message = "not started: the plan's time ran out first; nothing of this step ran"
		e.Suggestion = "Call " + Name + " again with the same toolCallId to run the steps that did not run (the steps that ran give their results again without running twice), or make them calls of their own."
	case e.Code == registry.CodeCanceled && notRun:
		// The service was full or shutting down.
		e.Suggestion = "Call " + Name + " again with the same toolCallId: the steps that ran give their results again without running twice, and this one runs."
	case e.Code == registry.CodeCanceled && strings.Contains(e.Message, registry.EffectsUnknownText):
		// A step not read-only that had started, and was recorded: a
		// repeat of the plan gives its result again.
		if outOfTime {
			e.Message = "stopped: the plan's time ran out while this step ran; " + registry.EffectsUnknownText
		}
		e.Suggestion = "Check whether the change this step was meant to make happened before running it again, as a call of " + tool +
			" of its own with a new toolCallId and the time it needs: " + Name + " called again with the same toolCallId gives this step this same result."
	case e.Code == registry.CodeCanceled && outOfTime:
		e.Message = "stopped: the plan's time ran out while this step ran"
		e.Suggestion = "Make this step a call of its own, with the time it needs."
	case strings.Contains(e.Message, registry.ConflictText):
		e.Suggestion = "Give the plan a new toolCallId: each step's id is the plan's with the step's number, and this one was used before for another call."
	case e.Code == registry.CodeInterrupted:
		e.Suggestion = "Check whether the change this step was meant to make happened before running it again. " + again
	case e.Code == registry.CodeApprovalExpired:
		e.Suggestion = "Ask the user to approve the action first. " + again
	case e.Code == registry.CodeApprovalDenied:
		e.Suggestion = "Do not run this step again; ask the user how to proceed instead (" + Name +
			" called again with the same toolCallId gives this step this same result)."
	case strings.Contains(e.Suggestion, "new toolCallId"):
		e.Suggestion += " (This step's toolCallId is the plan's with the step's number. " + again + ")"
	}
}
