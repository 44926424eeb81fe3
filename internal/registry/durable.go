package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
)

// replay answers a call whose toolCallId already has a record: a conflict
// when the record is of another call, the stored result when it is done or
// pending, and the result it ends with when it is still running.
func (e *Executor) replay(ctx context.Context, caller *Caller, rec *CallRecord, toolName string, p *progress, res *Result) error {
	if !rec.Matches(toolName, p.digest) {
		return ErrConflict
	}
	if rec.State == CallRunning {
		var err error
		rec, err = e.store.WaitCall(ctx, caller.ID, rec.ToolCallID)
		if err != nil {
			if ctx.Err() != nil {
				return canceledError(ctx)
			}
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	if rec.Result == nil {
		return fmt.Errorf("%w: call %s has no result", errInternal, rec.ToolCallID)
	}
	*res = *rec.Result
	p.replayed = true
	p.pending = res.Status == StatusPendingApproval
	return nil
}

// ask records the call as pending and files an approval request for it.
func (e *Executor) ask(ctx context.Context, caller *Caller, call *Call, tool *Tool, d Decision, p *progress, res *Result) error {
	now := e.now()
	a := &Approval{
		ID: newApprovalID(), CallerID: caller.ID, ToolCallID: res.ToolCallID, ToolName: tool.Name, Tier: tool.Tier,
		Rule: d.Rule, Reason: d.Reason, ArgumentsDigest: p.digest, Arguments: p.args, Context: call.Context,
		Status: ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(e.ttl),
	}
	pending := &Result{ToolCallID: res.ToolCallID, ToolName: tool.Name, Status: StatusPendingApproval,
		Approval: &ApprovalTicket{ID: a.ID, ExpiresAt: a.ExpiresAt, ArgumentsDigest: p.digest}}
	rec, created, err := e.store.BeginCall(ctx, &CallRecord{
		CallerID: caller.ID, ToolCallID: res.ToolCallID, ToolName: tool.Name, ArgumentsDigest: p.digest,
		Arguments: p.args, Context: call.Context, State: CallPendingApproval, Result: pending,
		ApprovalID: a.ID, ExpiresAt: a.ExpiresAt,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !created {
		return e.replay(ctx, caller, rec, tool.Name, p, res)
	}
	if err := e.store.CreateApproval(ctx, a); err != nil {
		// Leave no pending call without its request.
		fail := &Result{ToolCallID: res.ToolCallID, ToolName: tool.Name, Status: StatusError,
			Error: &Error{Code: CodeInternal, Name: tool.Name, Message: "internal error"}}
		if _, _, ferr := e.store.FinishCall(context.WithoutCancel(ctx), caller.ID, res.ToolCallID, fail); ferr != nil {
			e.log.Error("store: closing a call whose approval request failed", "toolCallId", res.ToolCallID, "error", ferr)
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	e.log.Info("approval requested", "approvalId", a.ID, "caller", caller.ID, "tool", tool.Name, "rule", d.Rule, "expiresAt", a.ExpiresAt)
	*res = *pending
	p.pending = true
	e.audit(ctx, caller.ID, res, tool.Tier, d, p.digest)
	return nil
}

// finishRecord stores the result of a recorded call and audits it. The
// call has run, so this happens even when the caller went away.
func (e *Executor) finishRecord(ctx context.Context, caller *Caller, res *Result, p *progress) {
	ctx = context.WithoutCancel(ctx)
	if _, _, err := e.store.FinishCall(ctx, caller.ID, res.ToolCallID, res); err != nil {
		e.log.Error("store: recording a result", "toolCallId", res.ToolCallID, "error", err)
	}
	tier := Tier("")
	if t, ok := e.Registry().Lookup(res.ToolName); ok {
		tier = t.Tier
	}
	e.audit(ctx, caller.ID, res, tier, p.decision, p.digest)
}

func (e *Executor) audit(ctx context.Context, callerID string, res *Result, tier Tier, d Decision, digest string) {
	err := e.store.AppendAudit(context.WithoutCancel(ctx), &AuditEntry{
		Time: e.now(), Event: "call", CallerID: callerID, ToolCallID: res.ToolCallID, ToolName: res.ToolName,
		Tier: tier, Decision: d.Effect, Rule: d.Rule, Status: res.Status, Code: res.Code(),
		DurationMs: res.DurationMs, ArgumentsDigest: digest,
	})
	if err != nil {
		e.log.Error("store: appending to the audit trail", "toolCallId", res.ToolCallID, "error", err)
	}
}

// ErrNoStore means the executor keeps no state, so there are no approvals
// or stored calls to read.
var ErrNoStore = errors.New("this service keeps no call records")

// Decide records an approver's verdict on an approval request. The one
// approver whose decision moves the request runs the stored call (on
// approve) exactly as it was asked, once; everyone else gets the outcome of
// that decision. It returns the request as it stands and the call's result.
func (e *Executor) Decide(ctx context.Context, approver *Caller, id string, v Verdict, reason string) (*Approval, *Result, error) {
	if e.store == nil {
		return nil, nil, ErrNoStore
	}
	a, won, err := e.store.DecideApproval(ctx, id, v, approver.ID, reason, e.now())
	if err != nil {
		return nil, nil, err
	}
	if won {
		effect := Allow
		if v == VerdictDeny {
			effect = Deny
		}
		if err := e.store.AppendAudit(context.WithoutCancel(ctx), &AuditEntry{
			Time: e.now(), Event: "approval", CallerID: approver.ID, ToolCallID: a.ToolCallID, ToolName: a.ToolName,
			Tier: a.Tier, Decision: effect, Rule: a.Rule, ArgumentsDigest: a.ArgumentsDigest,
		}); err != nil {
			e.log.Error("store: auditing an approval", "approvalId", id, "error", err)
		}
		e.log.Info("approval decided", "approvalId", id, "decision", string(v), "by", approver.ID, "tool", a.ToolName)
		if v == VerdictApprove {
			return a, e.runApproved(ctx, a), nil
		}
	}
	rec, err := e.store.GetCall(ctx, a.CallerID, a.ToolCallID)
	if err == nil && rec.State == CallRunning {
		rec, err = e.store.WaitCall(ctx, a.CallerID, a.ToolCallID)
	}
	if err != nil {
		return a, nil, err
	}
	return a, rec.Result, nil
}

// runApproved runs the call an approval request was filed for and records
// its result. The arguments are validated again, as the tool may have been
// reloaded since the request was filed.
func (e *Executor) runApproved(ctx context.Context, a *Approval) *Result {
	start := e.now()
	caller := &Caller{ID: a.CallerID}
	res := &Result{ToolCallID: a.ToolCallID, ToolName: a.ToolName}
	tool, ok := e.Registry().Lookup(a.ToolName)
	label, tier := UnknownTool, Tier("")
	if ok {
		label, tier = tool.Name, tool.Tier
	}
	ctx, span := e.startSpan(context.WithoutCancel(ctx), "execute_tool "+label, label, res.ToolCallID)
	defer span.End()
	if ok {
		span.SetAttributes(attribute.String("gen_ai.tool.type", tool.Type), attribute.String("toolsvc.tool.tier", string(tool.Tier)))
	}
	p := progress{decision: Decision{Effect: Allow, Rule: a.Rule, Reason: "approved by " + a.DecidedBy}, digest: a.ArgumentsDigest, recorded: true}
	var err error
	switch {
	case !ok:
		err = e.notFound(e.Registry(), nil, a.ToolName)
	default:
		var value any
		var derr *Error
		if _, value, derr = decodeArguments(a.Arguments); derr != nil {
			err = derr
		} else if verr := tool.schema.Validate(value); verr != nil {
			err = validationError(tool, verr)
		} else {
			// An approved call has waited long enough: it runs even when the
			// concurrency limit is reached.
			err = e.execute(ctx, tool, caller, res, a.Arguments, a.Context, nil, 0)
		}
	}
	e.finalize(res, tool, err, start)
	e.finishRecord(ctx, caller, res, &p)
	e.observe(ctx, span, caller, res, label, tier, p.decision, p.digest, e.now().Sub(start))
	return res
}

// Store returns the executor's store (nil when it keeps none).
func (e *Executor) Store() Store { return e.store }

func newApprovalID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "apr_" + hex.EncodeToString(b[:])
}
