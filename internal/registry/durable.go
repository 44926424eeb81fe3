package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
}

// recall answers a call whose toolCallId was seen before: from the result
// held in memory while its record could not be written, or from the
// stored record. A resumed call owns its record and skips this stage.
func (e *Executor) recall(ctx context.Context, f *flight) error {
	if !f.durable || f.call.ToolCallID == "" || f.resumed != nil {
		return nil
	}
	if res, ok := e.backlog.result(f.caller.ID, f.res.ToolCallID, f.tool.Name, f.digest); ok {
		if res == nil {
			return ErrConflict
		}
		f.res = res
		return errAnswered
	}
	rec, err := e.store.GetCall(ctx, f.caller.ID, f.res.ToolCallID)
	switch {
	case err == nil:
		if err := e.replay(ctx, f, rec); !errors.Is(err, errWithdrawn) {
			return err
		}
		return nil // the record is gone: the call goes on as a first one
	case errors.Is(err, ErrNotFound):
		return nil
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// errWithdrawn: the running record a call waited on was withdrawn (its
// call never ran: the store removes the record of a call whose caller had
// stopped waiting before it learnt the record was written), so the call
// is not a repeat after all.
var errWithdrawn = errors.New("the record waited on was withdrawn")

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
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if created {
			f.recorded = true
			return nil
		}
		if err := e.replay(ctx, f, rec); !errors.Is(err, errWithdrawn) || attempt == 2 {
			if errors.Is(err, errWithdrawn) {
				err = fmt.Errorf("%w: the call's record was withdrawn three times while it waited", ErrUnavailable)
			}
			return err
		}
	}
}

// replay answers a call whose toolCallId already has a record: a conflict
// when the record is of another call, the stored result when it is done or
// pending, and the result it ends with when it is still running, waiting
// at most the wait timeout (then the answer says it is still running).
func (e *Executor) replay(ctx context.Context, f *flight, rec *CallRecord) error {
	if !rec.Matches(f.tool.Name, f.digest) {
		return ErrConflict
	}
	if rec.State == CallRunning {
		wctx, cancel := context.WithTimeout(ctx, e.wait)
		last, err := e.store.WaitCall(wctx, f.caller.ID, rec.ToolCallID)
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
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	if rec.Result == nil {
		return fmt.Errorf("%w: call %s has no result", errInternal, rec.ToolCallID)
	}
	f.res = rec.Result
	return errAnswered
}

// ask records the call as pending and files an approval request for it,
// with a snapshot of the caller and the request to resume it with.
func (e *Executor) ask(ctx context.Context, f *flight) error {
	now := e.now()
	filed := &Filing{Caller: *f.caller, Catalog: f.call.Catalog, TimeoutMs: f.call.TimeoutMs, CallerMayApprove: f.decision.CallerMayApprove}
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
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !created {
		return e.replay(ctx, f, rec)
	}
	if err := e.store.CreateApproval(ctx, a); err != nil {
		// Leave no pending call without its request.
		fail := &Result{ToolCallID: f.res.ToolCallID, ToolName: f.tool.Name, Status: StatusError,
			Error: &Error{Code: CodeInternal, Name: f.tool.Name, Message: "internal error"}}
		if _, _, ferr := e.store.FinishCall(context.WithoutCancel(ctx), f.caller.ID, f.res.ToolCallID, fail, nil); ferr != nil {
			e.log.Error("store: closing a call whose approval request failed", "toolCallId", f.res.ToolCallID, "error", ferr)
		}
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	e.log.Info("approval requested", "approvalId", a.ID, "caller", f.caller.ID, "tool", f.tool.Name, "rule", f.decision.Rule, "expiresAt", a.ExpiresAt)
	NotifyApproval(e.observer, EventApprovalRequested, a, now)
	f.res = pending
	e.audit(ctx, e.auditEntry(f))
	return errAnswered
}

// finishRecord stores the result of a recorded call and its audit entry,
// in one write. The call has run, so this happens even when the caller
// went away. When the store does not take them, they are held in memory
// and retried in the background (RetryRecords), and the answer says its
// record is pending.
func (e *Executor) finishRecord(ctx context.Context, f *flight) {
	ctx = context.WithoutCancel(ctx)
	entry := e.auditEntry(f)
	if _, _, err := e.store.FinishCall(ctx, f.caller.ID, f.res.ToolCallID, f.res, entry); err != nil {
		e.log.Error("store: recording a result failed; holding it in memory and retrying", "toolCallId", f.res.ToolCallID, "error", err)
		held := *f.res
		held.RecordPending = true
		if !e.backlog.hold(f.caller.ID, f.digest, &held, entry) {
			// No room: the record lapses to E_INTERRUPTED, which says the
			// outcome is unknown; it never says something false.
			e.log.Error("store: record backlog is full; the call's record will read E_INTERRUPTED", "toolCallId", f.res.ToolCallID)
			e.store.ReleaseCall(f.caller.ID, f.res.ToolCallID)
		}
		e.metrics.setBacklog(e.backlog.len())
		f.res = &held
	}
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
		e.log.Error("store: appending to the audit trail failed; retrying in the background", "toolCallId", entry.ToolCallID, "error", err)
		if !e.backlog.holdAudit(entry) {
			e.log.Error("store: record backlog is full; audit entry dropped", "toolCallId", entry.ToolCallID, "event", entry.Event)
		}
		e.metrics.setBacklog(e.backlog.len())
	}
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
	a, won, err := e.store.DecideApproval(ctx, id, v, approver.ID, reason, e.now())
	if err != nil {
		return nil, nil, err
	}
	if won {
		effect := Allow
		if v == VerdictDeny {
			effect = Deny
		}
		e.audit(ctx, &AuditEntry{
			Time: e.now(), Event: event, CallerID: approver.ID, ToolCallID: a.ToolCallID, ToolName: a.ToolName,
			Tier: a.Tier, Decision: effect, Rule: a.Rule, ArgumentsDigest: a.ArgumentsDigest,
			Issuer: approver.Issuer, Subject: approver.Subject,
		})
		e.log.Info("approval decided", "approvalId", id, "decision", string(v), "by", approver.ID, "event", event, "tool", a.ToolName)
		NotifyApproval(e.observer, EventApprovalDecided, a, e.now())
		if v == VerdictApprove {
			return a, e.resume(ctx, a), nil
		}
	}
	if res, ok := e.backlog.result(a.CallerID, a.ToolCallID, a.ToolName, a.ArgumentsDigest); ok && res != nil {
		return a, res, nil
	}
	rec, err := e.store.GetCall(ctx, a.CallerID, a.ToolCallID)
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

// resume runs an approved call through the pipeline from where it was
// filed, as the caller it was filed by and with the request's catalog,
// timeout and context; its arguments are validated again, as the tool
// may have been reloaded since.
func (e *Executor) resume(ctx context.Context, a *Approval) *Result {
	f := &flight{st: e.state.Load(), resumed: a, recorded: true,
		call: &Call{ToolCallID: a.ToolCallID, ToolName: a.ToolName, Arguments: a.Arguments, Context: a.Context}}
	if a.Filed != nil {
		caller := a.Filed.Caller
		f.caller = &caller
		f.call.Catalog, f.call.TimeoutMs = a.Filed.Catalog, a.Filed.TimeoutMs
	} else {
		f.caller = &Caller{ID: a.CallerID}
	}
	res, _ := e.process(context.WithoutCancel(ctx), f)
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
	mu      sync.Mutex
	max     int
	results map[backlogKey]*heldResult
	audits  []*AuditEntry
	wake    chan struct{}
}

type backlogKey struct{ caller, id string }

type heldResult struct {
	digest string
	res    *Result
	entry  *AuditEntry
}

func newBacklog(max int) *backlog {
	return &backlog{max: max, results: make(map[backlogKey]*heldResult), wake: make(chan struct{}, 1)}
}

func (b *backlog) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.results) + len(b.audits)
}

func (b *backlog) hold(caller, digest string, res *Result, entry *AuditEntry) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.results)+len(b.audits) >= b.max {
		return false
	}
	b.results[backlogKey{caller, res.ToolCallID}] = &heldResult{digest: digest, res: res, entry: entry}
	b.signal()
	return true
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
// nil result when it is of another tool or other arguments (a conflict).
func (b *backlog) result(caller, id, tool, digest string) (*Result, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.results[backlogKey{caller, id}]
	if !ok {
		return nil, false
	}
	if h.res.ToolName != tool || h.digest != digest {
		return nil, true
	}
	res := *h.res
	return &res, true
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

// flushBacklog tries once to write everything held; it reports whether
// the backlog is empty afterwards.
func (e *Executor) flushBacklog(ctx context.Context) bool {
	b := e.backlog
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
		if !stored {
			e.log.Warn("store: a held result found its record already final", "toolCallId", k.id, "stored", rec.Result.Code())
		} else {
			e.log.Info("store: held result recorded", "toolCallId", k.id)
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
