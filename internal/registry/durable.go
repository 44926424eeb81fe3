package registry

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Filing is what a call that waits for approval was filed with, so that
// once approved it runs as asked: as the caller was then (catalog globs,
// maxTier, scopes), within the request's catalog and timeout.
type Filing struct {
	Caller    Caller   `json:"caller"`
	Catalog   []string `json:"catalog,omitempty"`
	TimeoutMs int64    `json:"timeoutMs,omitempty"`
	// CallerMayApprove is the rule's callerMayApprove: the caller may
	// decide the request too (DecideAsCaller).
	CallerMayApprove bool `json:"callerMayApprove,omitempty"`
	// Claims are a token caller's verified claims (Caller.Claims, which
	// the caller's own encoding leaves out): the policy decides the call
	// again when it is approved (decideResumed), and a condition on
	// caller.claims must see what it saw at filing, not fail closed.
	Claims map[string]any `json:"claims,omitempty"`
}

// recall answers a call whose toolCallId was seen before: from the result
// held in memory while its record could not be written, or from the
// stored record. A resumed call owns its record and skips this stage.
func (e *Executor) recall(ctx context.Context, f *flight) error {
	if !f.durable || f.call.ToolCallID == "" || f.resumed != nil {
		return nil
	}
	if res, ok := e.backlog.result(f.caller.ID, f.res.ToolCallID, f.tool.Name, f.digest, f.call.Context.InstanceKey); ok {
		if res == nil {
			return ErrConflict
		}
		f.res = res
		return errAnswered
	}
	rec, err := e.store.GetCall(ctx, f.caller.ID, f.res.ToolCallID)
	switch {
	case err == nil:
		err := e.replay(ctx, f, f.tool.Name, rec)
		if errors.Is(err, errAnswered) && e.goesOn(f, rec) {
			// Asked to be recorded, but its record is an approved run
			// that a repeat takes up again, unrecorded (ask lets it by).
			f.durable = false
			return nil
		}
		if !errors.Is(err, errWithdrawn) && !errors.Is(err, errUnfiled) {
			return err
		}
		// The record is gone, or its approval request was never filed: the
		// call goes on as a first one (and ask files the request).
		return nil
	case errors.Is(err, ErrNotFound):
		return nil
	}
	return unavailable(err)
}

// refused answers a call that lookup, the catalog check or validation
// refused with err. When its toolCallId already has a record, it is a
// repeat of a call made before a reload removed the tool, tightened its
// schema or narrowed the caller's catalog, and it gets the answer recall
// would have given it (the stored result, the pending ticket, a 409 when
// the record is of another call): told that the tool is missing or the
// arguments wrong, a model would "fix" the call and make its side effects
// again. The store is read only here, on the way to a refusal, so calls
// that pass keep their path; a read_only call, which has no record
// unless it asked for one, keeps its refusal when the store fails. An
// approved call ends with err, which says that it was so when approved.
func (e *Executor) refused(ctx context.Context, f *flight, err error) error {
	if f.resumed != nil {
		return atApproval(f, err)
	}
	if e.store == nil || f.call.ToolCallID == "" {
		return err
	}
	if f.digest == "" {
		_, v, derr := decodeArguments(f.call.Arguments, e.maxDepth, &e.jsonCheck)
		if derr != nil {
			return err // no record has arguments that do not decode
		}
		f.digest = ArgumentsDigest(v)
	}
	name := f.call.ToolName
	if res, ok := e.backlog.result(f.caller.ID, f.res.ToolCallID, name, f.digest, f.call.Context.InstanceKey); ok {
		if res == nil {
			return ErrConflict
		}
		f.res = res
		return errAnswered
	}
	rec, gerr := e.store.GetCall(ctx, f.caller.ID, f.res.ToolCallID)
	switch {
	case errors.Is(gerr, ErrNotFound):
		return err
	case gerr != nil && f.tool != nil && f.tool.Tier == ReadOnly && !f.call.Record:
		return err
	case gerr != nil:
		return unavailable(gerr)
	}
	if rerr := e.replay(ctx, f, name, rec); !errors.Is(rerr, errWithdrawn) && !errors.Is(rerr, errUnfiled) {
		return rerr
	}
	return err
}

// atApproval rewrites the refusal of an approved call that lookup, the
// catalog check or validation made (a reload removed its tool, changed
// its schema or tier, since it was filed) to say that it was so when the
// call was approved: the record keeps the answer, and a repeat that
// reads it once the tool is back must not be told that the tool does not
// exist, or that arguments it sends unchanged are wrong.
func atApproval(f *flight, err error) error {
	var refusal *Error
	if !errors.As(err, &refusal) {
		return err
	}
	c := *refusal
	switch c.Code {
	case CodeToolNotFound:
		c.Message = fmt.Sprintf("nothing ran: tool %s did not exist when this call was approved (the configuration was reloaded without it after the call was filed)", f.call.ToolName)
	case CodeInvalidArguments, CodeToolNotInCatalog:
		c.Message = "nothing ran: the tool had changed since this call was filed, and when it was approved " + c.Message
	default:
		return err
	}
	c.Suggestion = "This toolCallId keeps this answer. To make the call now, send it with a new toolCallId; it needs approval again."
	return &c
}

// errWithdrawn: the running record a call waited on was withdrawn (its
// call never ran: the store removes the record of a call whose caller had
// stopped waiting before it learnt the record was written), so the call
// is not a repeat after all.
var errWithdrawn = errors.New("the record waited on was withdrawn")

// errUnfiled: a pending record has no approval request. Its filing failed
// and so did the withdrawal of the record (see ask), or another call is
// filing it at this moment; either way ask files it, under the record's
// approval id.
var errUnfiled = errors.New("the pending call's approval request was not filed")

// record creates the running record of a durable call before it runs.
// Another call that created it first is answered from it instead.
func (e *Executor) record(ctx context.Context, f *flight) error {
	if !f.durable || f.resumed != nil {
		return nil
	}
	for attempt := 0; ; attempt++ {
		rec, created, err := e.store.BeginCall(ctx, &CallRecord{
			CallerID: f.caller.ID, ToolCallID: f.res.ToolCallID, ToolName: f.tool.Name, ArgumentsDigest: f.digest,
			Arguments: f.args, Context: f.call.Context, State: CallRunning, TraceID: traceID(ctx),
		})
		if err != nil {
			return unavailable(err)
		}
		if created {
			f.recorded = true
			return nil
		}
		err = e.replay(ctx, f, f.tool.Name, rec)
		if errors.Is(err, errUnfiled) {
			// An earlier attempt asked for approval but could not file the
			// request, and the policy now allows the call: it runs instead.
			if err := e.withdraw(ctx, f, rec.ApprovalID); err != nil {
				return unavailable(err)
			}
			err = errWithdrawn // look again: gone, or filed after all
		}
		if !errors.Is(err, errWithdrawn) || attempt == 2 {
			if errors.Is(err, errWithdrawn) {
				err = fmt.Errorf("%w: the call's record was withdrawn three times while it waited", ErrUnavailable)
			}
			return err
		}
	}
}

// replay answers a call of tool name whose toolCallId already has a
// record: a conflict when the record is of another call, the stored result
// when it is done or pending (errUnfiled when pending without its approval
// request), and the result it ends with when it is still running, waiting
// at most the wait timeout (then the answer says it is still running). A
// repeat of a pending call that grants its approval inline, from a caller
// who may (scope approve), decides the request (grantInline).
func (e *Executor) replay(ctx context.Context, f *flight, name string, rec *CallRecord) error {
	if !rec.Matches(name, f.digest, f.call.Context.InstanceKey) {
		return ErrConflict
	}
	if rec.State == CallPendingApproval {
		// Its ticket must name a request that exists: one that does not
		// answers 404 to the approver and the caller alike.
		a, err := e.store.GetApproval(ctx, rec.ApprovalID)
		switch {
		case errors.Is(err, ErrNotFound):
			return errUnfiled
		case err != nil:
			return unavailable(err)
		}
		if g := f.call.Approval; g != nil && g.Granted && f.resumed == nil && f.caller.Has(ScopeApprove) && a.Status == ApprovalPending {
			return e.grantInline(ctx, f, a.ID)
		}
	}
	if rec.State == CallRunning {
		wctx, cancel := context.WithTimeout(ctx, e.wait)
		last, err := e.WaitCall(wctx, f.caller.ID, rec.ToolCallID)
		cancel()
		switch {
		case err == nil:
			rec = last
		case errors.Is(err, ErrNotFound):
			return errWithdrawn
		case ctx.Err() != nil:
			return canceledError(ctx)
		case wctx.Err() != nil:
			f.res = &Result{ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Status: StatusRunning}
			return errAnswered
		default:
			return unavailable(err)
		}
	}
	if rec.Result == nil {
		return fmt.Errorf("%w: call %s has no result", errInternal, rec.ToolCallID)
	}
	f.res = rec.Result
	return errAnswered
}

// grantInline decides request id, which the call f repeats waits for, as
// approved by f's caller, whose repeat grants it inline: exactly what POST
// /approvals/{id} by that caller does (the approve scope lets it), so the
// call runs once, through resume, and the answer is its result. The
// contract honours an inline approval from such a caller (SPEC §3), and a
// repeat of a call that waits for one is where a gateway that asked its
// user afterwards sends it; ignoring it there would leave the call pending
// with no word of why.
func (e *Executor) grantInline(ctx context.Context, f *flight, id string) error {
	reason := "approved inline (\"approval\": {\"granted\": true}) on a repeat of the call"
	if by := f.call.Approval.By; by != "" && CheckReason(reason+" by "+by) == "" {
		reason += " by " + by
	}
	_, res, err := e.Decide(ctx, f.caller, id, VerdictApprove, reason)
	if err != nil {
		return unavailable(err)
	}
	f.res = res
	return errAnswered
}

// goesOn reports whether a repeat of a call of a tool that nests, answered
// from record rec, takes the call up again instead: rec is of an approved
// run (filed for approval, and neither refused nor denied) of a call the
// tool's own record does not stand for. Such a call is not recorded
// (Tool.Nests): its record exists only because it waited for approval,
// and its calls keep their own. The approval was of this very call, so
// the repeat goes on where the call stopped, without asking again: the
// calls that ran answer from their records, the others run. The repeat
// then runs unrecorded, as a call the policy allows.
func (e *Executor) goesOn(f *flight, rec *CallRecord) bool {
	if !f.tool.Nests || rec.ApprovalID == "" || rec.State == CallPendingApproval || f.res == nil || f.res.Status == StatusPendingApproval || f.res.Status == StatusRunning {
		return false
	}
	switch f.res.Code() {
	case CodeApprovalDenied, CodeApprovalExpired, CodePolicyDenied, CodeToolNotFound, CodeToolNotInCatalog, CodeInvalidArguments:
		// Ended before it ran: the answer stands.
		return false
	}
	f.res = &Result{ToolCallID: f.res.ToolCallID, ToolName: f.tool.Name}
	f.decision = Decision{Effect: Allow, Rule: f.decision.Rule, Reason: "approved with request " + rec.ApprovalID}
	return true
}

// ask records the call as pending and files an approval request for it,
// with a snapshot of the caller and the request to resume it with. A
// filing that fails leaves nothing that would stop a retry from filing
// the call again: the pending record is withdrawn, and a pending record
// found without its request (the withdrawal failed too) is filed again.
func (e *Executor) ask(ctx context.Context, f *flight) error {
	if n := claimsBytes(f.caller.Claims); n > MaxFiledClaimsBytes {
		return claimsTooLarge(f, n)
	}
	now := e.now()
	filed := &Filing{Caller: *f.caller, Catalog: f.call.Catalog, TimeoutMs: f.call.TimeoutMs, CallerMayApprove: f.decision.CallerMayApprove, Claims: f.caller.Claims}
	filed.Caller.Tools = append([]string(nil), f.caller.Tools...)
	filed.Caller.Scopes = append([]Scope(nil), f.caller.Scopes...)
	a := &Approval{
		ID: newApprovalID(), CallerID: f.caller.ID, ToolCallID: f.res.ToolCallID, ToolName: f.tool.Name, Tier: f.tool.Tier,
		Rule: f.decision.Rule, Reason: f.decision.Reason, ArgumentsDigest: f.digest, Arguments: f.args, Context: f.call.Context,
		Status: ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(e.ttl), Filed: filed,
	}
	pending := &Result{ToolCallID: f.res.ToolCallID, ToolName: f.tool.Name, Status: StatusPendingApproval,
		Approval: &ApprovalTicket{ID: a.ID, ExpiresAt: a.ExpiresAt, ArgumentsDigest: f.digest}}
	rec, created, err := e.store.BeginCall(ctx, &CallRecord{
		CallerID: f.caller.ID, ToolCallID: f.res.ToolCallID, ToolName: f.tool.Name, ArgumentsDigest: f.digest,
		Arguments: f.args, Context: f.call.Context, State: CallPendingApproval, Result: pending,
		ApprovalID: a.ID, ExpiresAt: a.ExpiresAt, TraceID: traceID(ctx),
	})
	if err != nil {
		return unavailable(err)
	}
	if !created {
		err := e.replay(ctx, f, f.tool.Name, rec)
		if errors.Is(err, errAnswered) && e.goesOn(f, rec) {
			f.durable = false
			return nil
		}
		if !errors.Is(err, errUnfiled) {
			return err
		}
		// File the record's request under the id its ticket names: calls
		// that file it at once then file one request (ids are unique),
		// which alone can start the call (DecideApproval moves only the
		// record filed under the request).
		a.ID, a.ExpiresAt = rec.ApprovalID, rec.ExpiresAt
		pending = rec.Result
		if pending == nil || pending.Approval == nil {
			pending = &Result{ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Status: StatusPendingApproval,
				Approval: &ApprovalTicket{ID: rec.ApprovalID, ExpiresAt: rec.ExpiresAt, ArgumentsDigest: rec.ArgumentsDigest}}
		}
	}
	file := e.store.CreateApproval
	if l, ok := e.store.(PendingLimiter); ok && created && e.maxPending > 0 {
		// pendingRoom's count is read apart from the filing; this one is
		// not, so callers filing at once cannot all see room for one.
		file = func(ctx context.Context, a *Approval) error { return l.CreateApprovalWithin(ctx, a, e.maxPending) }
	}
	if r, ok := e.store.(ApprovalRefiler); ok && !created {
		// Filed again only while the record waits for it: a withdrawal
		// of the record at the same moment must not leave a request no
		// call waits for, named by a ticket to a record that is gone.
		file = r.RefileApproval
	}
	if err := file(ctx, a); err != nil {
		if errors.Is(err, ErrTooManyPending) {
			// Nothing filed: the pending record goes too, as when the
			// caller was refused before (a retry that finds it left
			// behind files it, see replay).
			_ = e.withdraw(ctx, f, a.ID)
			return e.tooManyPending(f)
		}
		if !created && errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%w: the call's record was withdrawn while its approval request was filed again; send the call again", ErrUnavailable)
		}
		if _, gerr := e.store.GetApproval(ctx, a.ID); gerr == nil {
			// Filed all the same: by another call filing this record, or
			// the write committed though its answer was lost.
			f.res = pending
			return errAnswered
		}
		if created {
			_ = e.withdraw(ctx, f, a.ID) // logged; a retry files the request
		}
		return unavailable(err)
	}
	e.log.Info("approval requested", "approvalId", a.ID, "caller", f.caller.ID, "tool", f.tool.Name, "rule", f.decision.Rule, "expiresAt", a.ExpiresAt)
	NotifyApproval(e.observer, EventApprovalRequested, a, now)
	f.res = pending
	e.audit(ctx, e.auditEntry(f))
	return errAnswered
}

// MaxFiledClaimsBytes bounds a token caller's claims, as JSON, that an
// approval request keeps (Filing.Claims). Every request of the caller
// stores them, and the approver's decision reads them back.
//
// Claims beyond it are not cut down to fit: the policy decides an
// approved call again with the claims it was filed with (decideResumed),
// and a condition cannot tell a dropped claim from one the token never
// had. Reading a missing claim fails the condition, and its rule
// denies, but has(caller.claims.x) is false: a deny rule written as
// has(x) && … would let the call run. So a call whose caller's claims
// are larger is not filed at all (claimsTooLarge): it fails closed.
const MaxFiledClaimsBytes = 256 << 10

// claimsBytes is the size of a caller's claims as a filing stores them;
// claims that do not encode (they never do: they were decoded from JSON)
// count as none, and the filing reports its own error.
func claimsBytes(claims map[string]any) int {
	if len(claims) == 0 {
		return 0
	}
	b, err := json.Marshal(claims)
	if err != nil {
		return 0
	}
	return len(b)
}

// claimsTooLarge is the E_POLICY_DENIED of a call that needs approval
// whose caller's claims are more than a request keeps.
func claimsTooLarge(f *flight, n int) error {
	return &Error{Code: CodePolicyDenied,
		Message: fmt.Sprintf("tool %s requires human approval (rule %s), and caller %s's token carries %d KiB of claims, more than the %d KiB an approval request keeps (an approved call is decided again with the claims it was filed with), so it was not filed; nothing ran",
			f.tool.Name, f.decision.Rule, f.caller.ID, (n+1023)>>10, MaxFiledClaimsBytes>>10),
		Suggestion: "Do not retry this call with the same token; tell the user that it needs approval and that their token's claims (groups, roles) are too large to file it: a token with fewer claims can be approved."}
}

// withdraw deletes the pending record of a call whose approval request
// could not be filed, unless the request was filed after all. When the
// store fails, the record stays, and a retry that finds it without its
// request files the request (ask).
func (e *Executor) withdraw(ctx context.Context, f *flight, approvalID string) error {
	_, err := e.store.WithdrawCall(context.WithoutCancel(ctx), f.caller.ID, f.res.ToolCallID, approvalID)
	if err != nil {
		e.log.Error("store: withdrawing a call whose approval request was not filed failed; a retry files the request",
			"toolCallId", f.res.ToolCallID, "approvalId", approvalID, "error", err)
	}
	return err
}

// finishRecord stores the result of a recorded call and its audit entry,
// in one write. The call has run, so this happens even when the caller
// went away. When the store does not take them, they are held in memory
// and retried in the background (RetryRecords), and the answer says its
// record is pending. When the record was ended by someone else while the
// call ran, the answer is the record's (superseded).
//
// The record of an approved call of a tool that nests whose calls were
// not all finished when it answered (one waited for approval) keeps, in
// place of that answer, a result that says so (unsettledResult): the
// answer would go stale as those calls end, while a repeat of the call
// goes on from where it stopped (goesOn) and answers with their state.
func (e *Executor) finishRecord(ctx context.Context, f *flight) {
	ctx = context.WithoutCancel(ctx)
	entry := e.auditEntry(f)
	keep := f.res
	if n := f.nested; n != nil && n.unsettled.Load() > 0 && f.res.Status == StatusOK {
		keep = unsettledResult(f.res, int(n.unsettled.Load()))
	}
	rec, stored, err := e.store.FinishCall(ctx, f.caller.ID, f.res.ToolCallID, keep, entry)
	if err != nil {
		e.log.Error("store: recording a result failed; holding it in memory and retrying", "toolCallId", f.res.ToolCallID, "error", err)
		held := *keep
		held.RecordPending = true
		if !e.backlog.hold(f.caller.ID, f.digest, f.call.Context.InstanceKey, &held, entry) {
			// No room: the record lapses to E_INTERRUPTED, which says the
			// outcome is unknown; it never says something false.
			e.log.Error("store: record backlog is full; the call's record will read E_INTERRUPTED", "toolCallId", f.res.ToolCallID)
			e.store.ReleaseCall(f.caller.ID, f.res.ToolCallID)
		}
		e.metrics.setBacklog(e.backlog.len())
		answer := *f.res
		answer.RecordPending = true
		f.res = &answer
		return
	}
	if !stored && (rec == nil || !sameResult(rec.Result, keep)) {
		e.superseded(f, rec)
	}
}

// unsettledResult is what the record of an approved call of a tool that
// nests keeps when n of the calls it made had not finished when it
// answered res: not res, whose state of those calls goes stale (GET
// /calls/{toolCallId} would show a call waiting for approval long after
// it ran), but where to find the outcome.
func unsettledResult(res *Result, n int) *Result {
	calls := "1 of the calls it made was"
	if n != 1 {
		calls = fmt.Sprintf("%d of the calls it made were", n)
	}
	note, _ := json.Marshal(fmt.Sprintf("%s ran once approved, but %s not finished when it answered (waiting for approval, or still running), "+
		"so its answer is not kept here, where it would go stale. Repeat the call with the same toolCallId and arguments for the current outcome: "+
		"the calls that ran answer from their records without running again, and the others go on.", res.ToolName, calls))
	return &Result{ToolCallID: res.ToolCallID, ToolName: res.ToolName, Status: StatusOK, Output: note, DurationMs: res.DurationMs}
}

// superseded answers a call whose record was ended by someone else while
// it ran: another replica interrupted it (this one could not renew the
// lease for longer than the lease lasts), or, with the embedded store,
// another process took the file over. The record, which every retry and
// GET /calls/{toolCallId} read, keeps that ending; so does the answer,
// with what the tool did here added to its message: an answer may not
// claim a result the record does not hold. The audit entry, written with
// the attempt, says what the tool did.
func (e *Executor) superseded(f *flight, rec *CallRecord) {
	ran := f.res
	res := InterruptedResult(ran.ToolCallID, ran.ToolName)
	if rec != nil && rec.State == CallDone && rec.Result != nil {
		c := *rec.Result
		res = &c
	}
	e.log.Error("store: the call's record was ended elsewhere while the call ran; answering with the record, not with the tool's result",
		"toolCallId", ran.ToolCallID, "caller", f.caller.ID, "tool", ran.ToolName, "status", ran.Status, "code", ran.Code(), "recorded", res.Code())
	outcome := string(ran.Status)
	if ran.Code() != "" {
		outcome = string(ran.Code())
	}
	if res.Error != nil {
		msg := *res.Error
		msg.Message += fmt.Sprintf(" (The tool did finish here, with %s, but only after the call's record had been ended as %s, which is what a retry or GET /calls/%s reads.)",
			outcome, res.Code(), ran.ToolCallID)
		res.Error = &msg
	}
	res.RecordPending = false
	res.DurationMs = ran.DurationMs
	f.res = res
}

// sameResult reports whether stored holds the result res: the store's own
// copy of it, from an earlier write whose answer was lost.
func sameResult(stored, res *Result) bool {
	if stored == nil || res == nil || stored.Status != res.Status || stored.Code() != res.Code() {
		return false
	}
	var a, b bytes.Buffer
	if json.Compact(&a, stored.Output) != nil || json.Compact(&b, res.Output) != nil {
		return bytes.Equal(stored.Output, res.Output)
	}
	return bytes.Equal(a.Bytes(), b.Bytes())
}

func (e *Executor) auditEntry(f *flight) *AuditEntry {
	tier := Tier("")
	if f.tool != nil {
		tier = f.tool.Tier
	}
	return &AuditEntry{
		Time: e.now(), Event: "call", CallerID: f.caller.ID, ToolCallID: f.res.ToolCallID, ToolName: f.res.ToolName,
		Tier: tier, Decision: f.decision.Effect, Rule: f.decision.Rule, Status: f.res.Status, Code: f.res.Code(),
		DurationMs: f.res.DurationMs, ArgumentsDigest: f.digest, Issuer: f.caller.Issuer, Subject: f.caller.Subject,
	}
}

// traceID is the trace id of the span in ctx, or "" when it has none.
func traceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// audit appends an entry to the audit trail; an entry the store does not
// take is held and retried with the results (RetryRecords).
func (e *Executor) audit(ctx context.Context, entry *AuditEntry) {
	if err := e.store.AppendAudit(context.WithoutCancel(ctx), entry); err != nil {
		e.auditFailed(entry, err)
	}
}

// queueAudit is audit without the wait, where the store can queue the
// entry (AuditQueuer): the entry is in line before queueAudit returns, so
// the writes that follow (the result of the call an approval runs) land
// after it, and what follows need not wait for a store that does not
// answer twice, once for the entry and once for the result. wait returns
// once the entry's outcome is known (held for RetryRecords when the store
// did not take it).
func (e *Executor) queueAudit(ctx context.Context, entry *AuditEntry) (wait func()) {
	q, ok := e.store.(AuditQueuer)
	if !ok {
		e.audit(ctx, entry)
		return func() {}
	}
	done := make(chan struct{})
	q.QueueAudit(context.WithoutCancel(ctx), entry, func(err error) {
		if err != nil {
			e.auditFailed(entry, err)
		}
		close(done)
	})
	return func() { <-done }
}

// auditFailed holds an entry the store did not take, for RetryRecords.
func (e *Executor) auditFailed(entry *AuditEntry, err error) {
	e.log.Error("store: appending to the audit trail failed; retrying in the background", "toolCallId", entry.ToolCallID, "error", err)
	if !e.backlog.holdAudit(entry) {
		e.log.Error("store: record backlog is full; audit entry dropped", "toolCallId", entry.ToolCallID, "event", entry.Event)
	}
	e.metrics.setBacklog(e.backlog.len())
}

// ErrNoStore means the executor keeps no state, so there are no approvals
// or stored calls to read.
var ErrNoStore = errors.New("this service keeps no call records")

// Decide records an approver's verdict on an approval request. The one
// approver whose decision moves the request resumes the stored call (on
// approve) exactly as it was filed, once; everyone else gets the outcome
// of that decision, waiting for it at most the wait timeout.
func (e *Executor) Decide(ctx context.Context, approver *Caller, id string, v Verdict, reason string) (*Approval, *Result, error) {
	return e.decideApproval(ctx, approver, id, v, reason, AuditApproval)
}

// decideApproval is Decide, audited as event.
func (e *Executor) decideApproval(ctx context.Context, approver *Caller, id string, v Verdict, reason, event string) (*Approval, *Result, error) {
	if e.store == nil {
		return nil, nil, ErrNoStore
	}
	now := e.now()
	a, won, err := e.store.DecideApproval(ctx, id, v, approver.ID, reason, now)
	if err != nil {
		if v == VerdictApprove && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrStoreFull) && !errors.Is(err, ErrStoreBroken) {
			// The decision may have committed all the same (the store's
			// answer was lost: a deadline, a cut connection), and then its
			// call waits, running under this replica, for a run that would
			// never come. (A store out of space or broken committed
			// nothing.)
			go e.settleDecision(context.WithoutCancel(ctx), approver, id, now, event)
		}
		return nil, nil, err
	}
	if won {
		wait := e.decided(ctx, approver, a, v, event)
		defer wait()
		if v == VerdictApprove {
			return a, e.resume(ctx, a), nil
		}
	}
	if res, ok := e.backlog.result(a.CallerID, a.ToolCallID, a.ToolName, a.ArgumentsDigest, a.Context.InstanceKey); ok && res != nil {
		return a, res, nil
	}
	rec, err := e.store.GetCall(ctx, a.CallerID, a.ToolCallID)
	if a.Status == ApprovalExpired && (errors.Is(err, ErrNotFound) || err == nil && rec.ApprovalID != a.ID) {
		// No call waited for the request (its record was withdrawn, and
		// perhaps filed again under another request): nothing ran. Not
		// "nobody approved in time": the approver just did.
		res := ApprovalExpiredResult(a.ToolCallID, a.ToolName)
		res.Error.Message = fmt.Sprintf("nothing ran: no call to tool %s waits for this request any more (its filing failed and the call was withdrawn, or filed again under another request)", a.ToolName)
		res.Error.Suggestion = "Look for another pending request of the same call, or send the call again."
		return a, res, nil
	}
	if err == nil && rec.State == CallRunning {
		wctx, cancel := context.WithTimeout(ctx, e.wait)
		var last *CallRecord
		last, err = e.store.WaitCall(wctx, a.CallerID, a.ToolCallID)
		cancel()
		if err != nil && ctx.Err() == nil && wctx.Err() != nil {
			return a, &Result{ToolCallID: a.ToolCallID, ToolName: a.ToolName, Status: StatusRunning}, nil
		}
		rec = last
	}
	if err != nil {
		return a, nil, err
	}
	return a, rec.Result, nil
}

// decided audits, logs and announces the decision that won request a;
// the audit entry is queued, and wait waits for it.
func (e *Executor) decided(ctx context.Context, approver *Caller, a *Approval, v Verdict, event string) (wait func()) {
	effect := Allow
	if v == VerdictDeny {
		effect = Deny
	}
	wait = e.queueAudit(ctx, &AuditEntry{
		Time: e.now(), Event: event, CallerID: approver.ID, ToolCallID: a.ToolCallID, ToolName: a.ToolName,
		Tier: a.Tier, Decision: effect, Rule: a.Rule, ArgumentsDigest: a.ArgumentsDigest,
		Issuer: approver.Issuer, Subject: approver.Subject,
	})
	e.log.Info("approval decided", "approvalId", a.ID, "decision", string(v), "by", approver.ID, "event", event,
		"caller", a.CallerID, "tool", a.ToolName, "toolCallId", a.ToolCallID)
	NotifyApproval(e.observer, EventApprovalDecided, a, e.now())
	// A denied call ends here: its audit line is the winner's to write
	// (an approved one has its run's).
	e.AuditSettled(ctx, a)
	return wait
}

// settleFor bounds how long settleDecision tries to learn the outcome of
// a decision: longer than a running record's lease (30 s) and a store
// deadline besides, after which no lost decision can be adopted.
const settleFor = time.Minute

// settleDecision finds out whether an approval whose answer was lost (its
// approver was answered 503) committed after all, and if so runs its call.
// Such a decision moved the call's record to running, owned by this
// replica, but nothing ran the call or renewed its lease: it lapsed to
// E_INTERRUPTED ("whether its side effects happened is unknown") a lease
// later, for a call that never ran, and approvers' retries waited for it.
// The store adopts the record only while it is still the one the decision
// wrote (see DecisionAdopter); then the call runs as the decision's winner
// would have run it, and a retry of the approver, here or on another
// replica, waits for its result. The request reading pending means the
// decision has not committed, or not yet: it is looked at again, with
// backoff, for settleFor. A service that is draining starts no call.
func (e *Executor) settleDecision(ctx context.Context, approver *Caller, id string, decidedAt time.Time, event string) {
	ad, ok := e.store.(DecisionAdopter)
	if !ok {
		return
	}
	delay := 100 * time.Millisecond
	for end := time.Now().Add(settleFor); ; {
		if e.isDraining() {
			return
		}
		a, adopted, err := ad.AdoptDecision(ctx, id, approver.ID, decidedAt)
		switch {
		case adopted:
			e.log.Warn("store: an approval was recorded though the store's answer was lost (its approver was answered 503); running the call now",
				"approvalId", id, "by", approver.ID, "caller", a.CallerID, "toolCallId", a.ToolCallID, "tool", a.ToolName)
			wait := e.decided(ctx, approver, a, VerdictApprove, event)
			e.resume(ctx, a)
			wait()
			return
		case err != nil:
		case a == nil || a.Status != ApprovalPending:
			if a != nil && a.Status == ApprovalApproved && a.DecidedBy == approver.ID && a.DecidedAt.Equal(decidedAt.Truncate(time.Microsecond)) {
				e.log.Warn("store: an approval was recorded though the store's answer was lost, but its call's record no longer waits to run here (it lapsed, or was ended elsewhere)",
					"approvalId", id, "by", approver.ID, "caller", a.CallerID, "toolCallId", a.ToolCallID)
			}
			return
		}
		if time.Now().After(end) {
			e.log.Warn("store: could not learn whether an approval whose answer was lost was recorded", "approvalId", id, "by", approver.ID, "error", err)
			return
		}
		time.Sleep(delay)
		delay = min(2*delay, 5*time.Second)
	}
}

// resume runs an approved call through the pipeline from where it was
// filed, as the caller it was filed by and with the request's catalog,
// timeout and context; its arguments are validated again, as the tool
// may have been reloaded since.
func (e *Executor) resume(ctx context.Context, a *Approval) *Result {
	f := &flight{st: e.state.Load(), resumed: a, recorded: true,
		call: &Call{ToolCallID: a.ToolCallID, ToolName: a.ToolName, Arguments: a.Arguments, Context: a.Context}}
	if a.Filed != nil {
		caller := a.Filed.Caller
		caller.Claims = a.Filed.Claims
		f.caller = &caller
		f.call.Catalog, f.call.TimeoutMs = a.Filed.Catalog, a.Filed.TimeoutMs
	} else {
		f.caller = &Caller{ID: a.CallerID}
	}
	// The call outlives its approver's request (an approver who leaves
	// does not stop an approved call), but not the service: at the end of
	// the drain time it is stopped like every other call (ErrShutdown).
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), ErrShutdown) {
			cancel(ErrShutdown)
		}
	})
	defer stop()
	res, _ := e.process(rctx, f)
	return res
}

// Store returns the executor's store (nil when it keeps none).
func (e *Executor) Store() Store { return e.store }

func newApprovalID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "apr_" + hex.EncodeToString(b[:])
}

// backlog holds, in memory, results whose record the store did not take
// and audit entries it did not append, until RetryRecords writes them.
// Its size is bounded.
type backlog struct {
	// flushing is held by the one flush at a time (flushBacklog).
	flushing sync.Mutex
	mu       sync.Mutex
	max      int
	results  map[backlogKey]*heldResult
	audits   []*AuditEntry
	wake     chan struct{}
	// watches are the waits (WaitCall) for a result to be held, by call.
	watches map[backlogKey]*heldWatch
}

// heldWatch is closed when its call's result is held; n counts the
// waits that share it.
type heldWatch struct {
	held chan struct{}
	n    int
}

type backlogKey struct{ caller, id string }

type heldResult struct {
	digest      string
	instanceKey string
	res         *Result
	entry       *AuditEntry
}

func newBacklog(max int) *backlog {
	return &backlog{max: max, results: make(map[backlogKey]*heldResult), wake: make(chan struct{}, 1), watches: make(map[backlogKey]*heldWatch)}
}

func (b *backlog) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.results) + len(b.audits)
}

func (b *backlog) hold(caller, digest, instanceKey string, res *Result, entry *AuditEntry) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.results)+len(b.audits) >= b.max {
		return false
	}
	k := backlogKey{caller, res.ToolCallID}
	b.results[k] = &heldResult{digest: digest, instanceKey: instanceKey, res: res, entry: entry}
	if w := b.watches[k]; w != nil {
		close(w.held)
		delete(b.watches, k)
	}
	b.signal()
	return true
}

// held returns a copy of the result held for a call, or nil.
func (b *backlog) held(caller, id string) *Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.results[backlogKey{caller, id}]
	if !ok {
		return nil
	}
	res := *h.res
	return &res
}

// watch returns a channel closed once a result is held for a call, or nil
// when one is held already; stop ends the watch.
func (b *backlog) watch(caller, id string) (held <-chan struct{}, stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := backlogKey{caller, id}
	if _, ok := b.results[k]; ok {
		return nil, func() {}
	}
	w := b.watches[k]
	if w == nil {
		w = &heldWatch{held: make(chan struct{})}
		b.watches[k] = w
	}
	w.n++
	return w.held, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if w.n--; w.n == 0 && b.watches[k] == w {
			delete(b.watches, k)
		}
	}
}

func (b *backlog) holdAudit(entry *AuditEntry) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.results)+len(b.audits) >= b.max {
		return false
	}
	b.audits = append(b.audits, entry)
	b.signal()
	return true
}

func (b *backlog) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// result returns the held result of a call: ok when one is held, and a
// nil result when it is of another tool, other arguments or another
// instance (a conflict, as CallRecord.Matches has it).
func (b *backlog) result(caller, id, tool, digest, instanceKey string) (*Result, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.results[backlogKey{caller, id}]
	if !ok {
		return nil, false
	}
	if h.res.ToolName != tool || h.digest != digest || h.instanceKey != instanceKey {
		return nil, true
	}
	res := *h.res
	return &res, true
}

// GetCall returns the record of a call of callerID as this executor
// knows it. A call that finished while the store did not take its result
// (finishRecord holds it in memory and retries) is done, with that result,
// marked RecordPending as the call's own answer was, although the store's
// record still says it runs until the result is written.
func (e *Executor) GetCall(ctx context.Context, callerID, toolCallID string) (*CallRecord, error) {
	if e.store == nil {
		return nil, ErrNoStore
	}
	// The backlog first: a result written and let go between the two
	// reads is then in the store.
	held := e.backlog.held(callerID, toolCallID)
	rec, err := e.store.GetCall(ctx, callerID, toolCallID)
	if held == nil || (err == nil && rec.State == CallDone) {
		return rec, err
	}
	return heldRecord(rec, callerID, held), nil
}

// heldRecord is rec (nil when the store could not be read) done with the
// held result res.
func heldRecord(rec *CallRecord, callerID string, res *Result) *CallRecord {
	out := CallRecord{CallerID: callerID, ToolCallID: res.ToolCallID, ToolName: res.ToolName}
	if rec != nil {
		out = *rec
	}
	out.State, out.Result, out.Owner, out.ExpiresAt = CallDone, res, "", time.Time{}
	return &out
}

// WaitCall is the store's WaitCall (the record once the call is done, or
// the latest when ctx ends first, with ctx's error) that also ends when
// the call finishes while the store does not take its result: then it
// returns the record GetCall does. The store alone would wait until the
// result is written, or ctx ends, and say the call still runs.
func (e *Executor) WaitCall(ctx context.Context, callerID, toolCallID string) (*CallRecord, error) {
	if e.store == nil {
		return nil, ErrNoStore
	}
	held, stop := e.backlog.watch(callerID, toolCallID)
	defer stop()
	if held == nil {
		return e.GetCall(ctx, callerID, toolCallID)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-held:
			cancel()
		case <-wctx.Done():
		}
	}()
	rec, err := e.store.WaitCall(wctx, callerID, toolCallID)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		return e.GetCall(ctx, callerID, toolCallID) // held
	}
	return rec, err
}

// RetryRecords writes held results and audit entries into the store until
// ctx ends: at once when something is held, then with backoff (from 100ms
// to retryMax) while the store refuses.
func (e *Executor) RetryRecords(ctx context.Context, retryMax time.Duration) {
	if e.store == nil {
		return
	}
	delay := 100 * time.Millisecond
	for {
		if e.flushBacklog(ctx) {
			delay = 100 * time.Millisecond
			select {
			case <-ctx.Done():
				return
			case <-e.backlog.wake:
			}
			continue
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		delay = min(2*delay, retryMax)
	}
}

// FlushRecords is the last attempt of a service that stops, once its
// calls have drained and before its store closes, to write the results
// and audit entries held in memory (see RetryRecords): it tries until
// they are written or ctx ends. Each one still held then is logged at
// error level (toolCallId, caller, event), and so is their count, which
// it returns: they go with the process. The record of a result not
// written reads E_INTERRUPTED once its lease lapses.
func (e *Executor) FlushRecords(ctx context.Context) int {
	if e.store == nil {
		return 0
	}
	delay := 50 * time.Millisecond
	for !e.flushBacklog(ctx) {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return e.logBacklog()
		case <-t.C:
		}
		delay = min(2*delay, time.Second)
	}
	return 0
}

// logBacklog logs, at error level, each result and audit entry held and
// their count, which it returns.
func (e *Executor) logBacklog() int {
	b := e.backlog
	b.flushing.Lock() // a flush under way holds what it writes
	defer b.flushing.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	keys := make([]backlogKey, 0, len(b.results))
	for k := range b.results {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y backlogKey) int { return cmp.Or(cmp.Compare(x.caller, y.caller), cmp.Compare(x.id, y.id)) })
	for _, k := range keys {
		h := b.results[k]
		event := "call"
		if h.entry != nil {
			event = h.entry.Event
		}
		e.log.Error("store: stopping with a result not recorded; the call's record will read E_INTERRUPTED", "toolCallId", k.id,
			"caller", k.caller, "event", event, "tool", h.res.ToolName, "status", h.res.Status, "code", h.res.Code())
	}
	for _, a := range b.audits {
		e.log.Error("store: stopping with an audit entry not written; it is lost", "toolCallId", a.ToolCallID,
			"caller", a.CallerID, "event", a.Event, "tool", a.ToolName, "decision", a.Decision, "status", a.Status, "code", a.Code)
	}
	n := len(b.results) + len(b.audits)
	if n > 0 {
		e.log.Error("store: stopping with records not written", "held", n, "results", len(b.results), "auditEntries", len(b.audits))
	}
	return n
}

// flushBacklog tries once to write everything held; it reports whether
// the backlog is empty afterwards.
func (e *Executor) flushBacklog(ctx context.Context) bool {
	b := e.backlog
	b.flushing.Lock()
	defer b.flushing.Unlock()
	b.mu.Lock()
	keys := make([]backlogKey, 0, len(b.results))
	for k := range b.results {
		keys = append(keys, k)
	}
	audits := b.audits
	b.audits = nil
	b.mu.Unlock()
	defer func() { e.metrics.setBacklog(b.len()) }()
	for _, k := range keys {
		b.mu.Lock()
		h := b.results[k]
		b.mu.Unlock()
		res := *h.res
		res.RecordPending = false
		rec, stored, err := e.store.FinishCall(ctx, k.caller, k.id, &res, h.entry)
		if err != nil {
			b.mu.Lock()
			b.audits = append(audits, b.audits...)
			b.mu.Unlock()
			return false
		}
		switch {
		case stored:
			e.log.Info("store: held result recorded", "toolCallId", k.id)
		case rec != nil && sameResult(rec.Result, &res):
			e.log.Info("store: held result was recorded already", "toolCallId", k.id)
		default:
			var code Code
			if rec != nil && rec.Result != nil {
				code = rec.Result.Code()
			}
			e.log.Error("store: a held result found its record ended elsewhere; the record keeps that ending", "toolCallId", k.id,
				"caller", k.caller, "status", res.Status, "code", res.Code(), "recorded", code)
		}
		b.mu.Lock()
		delete(b.results, k)
		b.mu.Unlock()
	}
	for i, a := range audits {
		if err := e.store.AppendAudit(ctx, a); err != nil {
			b.mu.Lock()
			b.audits = append(audits[i:], b.audits...)
			b.mu.Unlock()
			return false
		}
	}
	return b.len() == 0
}
