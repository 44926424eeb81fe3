package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound means the store holds no record under the key or id asked for.
var ErrNotFound = errors.New("not found")

// ErrStoreBroken means the store cannot take writes until an operator acts
// (its database file was deleted or replaced under the service, or cannot
// be written: an I/O error, a read-only or corrupted file), so retrying
// shortly does not help.
var ErrStoreBroken = errors.New("the call store needs an operator")

// CallState is where a stored call stands.
type CallState string

// The states of a stored call. A record is created running or
// pending_approval and ends done; pending_approval moves to running when an
// approver approves, or straight to done when the request is denied or
// expires.
const (
	CallRunning         CallState = "running"
	CallPendingApproval CallState = "pending_approval"
	CallDone            CallState = "done"
)

// CallRecord is the durable state of one call, keyed by (CallerID,
// ToolCallID): the idempotency record of SPEC §3 and the home of the result
// that GET /calls/{toolCallId} returns.
type CallRecord struct {
	CallerID   string `json:"callerId"`
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	// ArgumentsDigest is ArgumentsDigest of the decoded arguments (hex
	// SHA-256 of their canonical JSON); a repeat with another digest, tool
	// name or instance key is a 409.
	ArgumentsDigest string `json:"argumentsDigest"`
	// Arguments is the validated arguments object, exactly as run. Once
	// the call is done it is empty when the arguments were longer than
	// KeptArgumentsBytes: the digest still tells a repeat from a conflict.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Context   CallContext     `json:"context,omitzero"`
	State     CallState       `json:"state"`
	// Result is the pending_approval result (with its ticket) while the call
	// waits for approval, the final result once done, and nil while running.
	Result *Result `json:"result,omitempty"`
	// ApprovalID names the approval request a pending call waits for.
	ApprovalID string `json:"approvalId,omitempty"`
	// Owner is the store instance whose process runs the call; it is set
	// while the call is running.
	Owner     string    `json:"owner,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
	// ExpiresAt is when the current state lapses: for a running call the end
	// of the owner's lease (renewed by the owning store while the process
	// lives; once it has passed, InterruptRunning may end the call as
	// E_INTERRUPTED), for a pending call the approval's expiry, and zero
	// once done.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// TraceID is the W3C trace id (32 hex digits) of the call that created
	// the record; empty when the call had no trace.
	TraceID string `json:"traceId,omitempty"`
}

// ListedArgumentsBytes bounds the arguments a listed approval request
// carries; store.listedApprovalColumns holds the same figure.
const ListedArgumentsBytes = 16 << 10

// KeptArgumentsBytes bounds the arguments a done call's record keeps.
// Longer ones (a large fs__write, say) are dropped when the call is
// finished, so the store does not hold a second copy of every large
// file written for as long as it keeps results.
const KeptArgumentsBytes = 64 << 10

// Matches reports whether a call of toolName with arguments of digest, in
// the workspace instance instanceKey, is a repeat of r (and may share its
// result); otherwise reusing r's toolCallId is a conflict. The instance
// counts because it decides which files a call reads and writes: the same
// fs__write in another instance is another call, and answering it with the
// first one's result would say a file was written that was not.
func (r *CallRecord) Matches(toolName, digest, instanceKey string) bool {
	return r.ToolName == toolName && r.ArgumentsDigest == digest && r.Context.InstanceKey == instanceKey
}

// ApprovalStatus is where an approval request stands.
type ApprovalStatus string

// The statuses of an approval request; pending moves exactly once to one of
// the others.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalDenied   ApprovalStatus = "denied"
	ApprovalExpired  ApprovalStatus = "expired"
)

// ParseApprovalStatus parses a status name ("" is not a status).
func ParseApprovalStatus(s string) (ApprovalStatus, error) {
	switch v := ApprovalStatus(s); v {
	case ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired:
		return v, nil
	}
	return "", fmt.Errorf("unknown approval status %q (want pending, approved, denied or expired)", s)
}

// Verdict is an approver's decision.
type Verdict string

// The verdicts an approver may give (the "decision" of POST /approvals/{id}).
const (
	VerdictApprove Verdict = "approve"
	VerdictDeny    Verdict = "deny"
)

// Approval is a request for a human to approve one stored call. It is bound
// to the caller, the tool name and the arguments digest; approving it runs
// exactly Arguments, once.
type Approval struct {
	ID         string `json:"id"`
	CallerID   string `json:"callerId"`
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	Tier       Tier   `json:"tier,omitempty"`
	// Rule and Reason say which policy rule asked, and why.
	Rule            string `json:"rule,omitempty"`
	Reason          string `json:"reason,omitempty"`
	ArgumentsDigest string `json:"argumentsDigest"`
	// Arguments are the call's arguments. A list of requests leaves out
	// (null) those longer than ListedArgumentsBytes: GetApproval has them.
	Arguments json.RawMessage `json:"arguments"`
	// ArgumentsBytes is the length of the arguments.
	ArgumentsBytes int            `json:"argumentsBytes"`
	Context        CallContext    `json:"context,omitzero"`
	Status         ApprovalStatus `json:"status"`
	CreatedAt      time.Time      `json:"createdAt"`
	ExpiresAt      time.Time      `json:"expiresAt"`
	// DecidedAt, DecidedBy and DecisionReason are set when an approver
	// decided (DecidedAt also when the request expired).
	DecidedAt      time.Time `json:"decidedAt,omitzero"`
	DecidedBy      string    `json:"decidedBy,omitempty"`
	DecisionReason string    `json:"decisionReason,omitempty"`
	// Filed is what the call was filed with (the caller's identity and
	// restrictions, the request's catalog and timeout); an approved call
	// runs with it. Requests stored before it was kept have none and are
	// not run.
	Filed *Filing `json:"-"`
}

// ApprovalFilter selects approval requests.
type ApprovalFilter struct {
	// Status selects one status; "" selects all.
	Status ApprovalStatus
	// CallerID selects one caller's requests; "" selects every caller's.
	CallerID string
	// Limit caps the number returned; 0 means 100. Stores cap it at 1000.
	Limit int
	// Newest lists the newest requests first; otherwise the oldest come
	// first.
	Newest bool
	// After continues a listing after the request it names (the last of
	// the previous page), in the listing's order; nil starts at its
	// beginning.
	After *ApprovalCursor
	// ExpiresAfter keeps only the requests whose expiry is after it; zero
	// keeps all.
	ExpiresAfter time.Time
}

// ApprovalCursor is a request's place in approval listings, which are
// ordered by creation time, then id.
type ApprovalCursor struct {
	CreatedAt time.Time
	ID        string
}

// Cursor is a's place in approval listings: a listing given it as After
// goes on with the requests after a.
func (a *Approval) Cursor() *ApprovalCursor {
	return &ApprovalCursor{CreatedAt: a.CreatedAt, ID: a.ID}
}

// AuditEntry is one line of the audit trail: who called what, what policy
// decided and how it ended. It never holds arguments or output, only
// their digest.
type AuditEntry struct {
	// ID is assigned by the store, increasing in insertion order.
	ID   int64     `json:"id"`
	Time time.Time `json:"time"`
	// Event is "call" for a call, "approval" for an approver's decision
	// (then CallerID is the approver's and Decision allow or deny), or
	// "caller-approval" for the calling user's own decision on a call a
	// rule let them approve (then CallerID is the caller's).
	Event           string `json:"event"`
	CallerID        string `json:"callerId"`
	ToolCallID      string `json:"toolCallId,omitempty"`
	ToolName        string `json:"toolName"`
	Tier            Tier   `json:"tier,omitempty"`
	Decision        Effect `json:"decision,omitempty"`
	Rule            string `json:"rule,omitempty"`
	Status          Status `json:"status,omitempty"`
	Code            Code   `json:"code,omitempty"`
	DurationMs      int64  `json:"durationMs"`
	ArgumentsDigest string `json:"argumentsDigest,omitempty"`
	// Issuer and Subject name who vouched for a token caller (Caller.Issuer
	// and Caller.Subject; for an approval, the approver's); empty for
	// static credentials. Never the token itself.
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
}

// AuditFilter selects audit entries, oldest first.
type AuditFilter struct {
	// CallerID and ToolName select one caller or tool; "" selects all.
	CallerID string
	ToolName string
	// Since drops entries before it; zero keeps all.
	Since time.Time
	// Newest lists the newest entries first; otherwise the oldest come
	// first.
	Newest bool
	// AfterID continues a listing after the entry with that id, in the
	// listing's order; 0 starts at its beginning.
	AfterID int64
	// Limit caps the number returned; 0 means 100. Stores cap it at 1000.
	Limit int
}

// Store is the durable state of the service: call records (idempotency and
// results), approval requests, the audit trail and the console's
// signed-out sessions. The embedded store
// serves one process; the PostgreSQL store is shared by replicas. Every
// method is safe for concurrent use, and every state change that races
// (BeginCall, FinishCall, DecideApproval, expiry, interruption) happens
// exactly once across processes.
//
// The executor records a call after validation and policy, when the call
// is not read_only (or the operator opted read_only calls in): allow →
// BeginCall(running); created → run, FinishCall; not created → on a
// Matches mismatch 409, when done return the stored Result, when pending
// return its pending Result (once GetApproval finds its request), when
// running WaitCall. ask → BeginCall(pending, with the pending Result and a
// new ApprovalID) and, when created, CreateApproval; when that fails,
// WithdrawCall. A pending record whose request GetApproval does not find
// is filed again, under the record's ApprovalID. POST /approvals/{id} →
// DecideApproval; the winner of an approve runs the approval's Arguments
// and FinishCalls; everyone else answers from WaitCall or GetCall.
type Store interface {
	// BeginCall inserts rec, keyed by (rec.CallerID, rec.ToolCallID), unless
	// a record with that key exists; it returns the stored record and
	// whether this call created it. Of any number of concurrent BeginCalls
	// on one key, exactly one creates. rec.State must be CallRunning (the
	// store sets Owner to itself and ExpiresAt to the end of its lease) or
	// CallPendingApproval (rec needs ApprovalID, ExpiresAt and the
	// pending Result). An existing record is returned as it stands; the
	// caller compares it with Matches and answers 409 on a mismatch.
	BeginCall(ctx context.Context, rec *CallRecord) (stored *CallRecord, created bool, err error)
	// FinishCall stores res as the final result of a call this store runs
	// (running and owned by it) or of a pending call, and wakes its
	// waiters; it returns stored true and no record. If the call was
	// already done (interrupted after its lease lapsed, or finished by
	// someone else) it changes nothing and returns the stored record with
	// stored false. ErrNotFound if there is no record.
	//
	// audit, when not nil, is appended in the same transaction, as
	// AppendAudit would (assigning its ID and Time), whether or not res is
	// stored: the result and its audit entry are written together or not
	// at all, in one commit. The one exception is a repeat of a write that
	// committed without its caller learning so: when the record already
	// holds this very result from an earlier commit, nothing is written
	// and audit.ID stays 0, since the entry was written with it.
	FinishCall(ctx context.Context, callerID, toolCallID string, res *Result, audit *AuditEntry) (rec *CallRecord, stored bool, err error)
	// GetCall returns a record, or ErrNotFound. A pending record whose
	// approval has expired reads as done with E_APPROVAL_EXPIRED.
	GetCall(ctx context.Context, callerID, toolCallID string) (*CallRecord, error)
	// WaitCall returns the record once it is done. If ctx ends first it
	// returns the latest record it read together with ctx's error (so a
	// long poll can answer with the current state). While it waits on a
	// running call whose lease has lapsed it interrupts the call. Wake-ups
	// come from the store's own writes at once, from other replicas through
	// the store's notification channel where it has one, and otherwise from
	// polling with backoff (at most one read per second per waiter).
	WaitCall(ctx context.Context, callerID, toolCallID string) (*CallRecord, error)
	// InterruptRunning ends, as done with an E_INTERRUPTED result, every
	// running call whose process is known to be gone: for the embedded
	// store every running call not owned by this store (it holds the only
	// lock on its file), for PostgreSQL every running call whose lease has
	// lapsed. Call it at start and periodically (RunRetention does). It
	// returns how many calls it ended.
	InterruptRunning(ctx context.Context) (int, error)
	// ReleaseCall stops renewing the lease of a running call this store
	// runs whose result will not be recorded through it; the record
	// lapses and then reads E_INTERRUPTED.
	ReleaseCall(callerID, toolCallID string)
	// WithdrawCall deletes the pending record of a call whose approval
	// request approvalID could not be filed, so that a retry of the call
	// files it anew. It deletes nothing, and reports false, when the
	// record is not pending under approvalID, or when request approvalID
	// exists after all (its filing failed only as far as its caller
	// learnt). A request whose record it deleted can never run a call
	// (see DecideApproval).
	WithdrawCall(ctx context.Context, callerID, toolCallID, approvalID string) (withdrawn bool, err error)

	// CreateApproval stores a pending approval request; a.ID must be new.
	CreateApproval(ctx context.Context, a *Approval) error
	// GetApproval returns a request, or ErrNotFound. A pending request past
	// its expiry reads as expired.
	GetApproval(ctx context.Context, id string) (*Approval, error)
	// ListApprovals returns the requests f selects, oldest first (newest
	// first with f.Newest), at most f.Limit. Pending
	// requests past their expiry count as expired. Arguments longer than
	// ListedArgumentsBytes are left out, so that a list of many large
	// requests stays small, and so is what each was filed with (Filed is
	// nil: GetApproval and DecideApproval have it).
	ListApprovals(ctx context.Context, f ApprovalFilter) ([]*Approval, error)
	// CountApprovals counts the requests f's Status and CallerID select.
	CountApprovals(ctx context.Context, f ApprovalFilter) (int, error)
	// DecideApproval moves a pending, unexpired request to approved or
	// denied, exactly once across connections and replicas, and reports
	// whether this call did it (won). Together with the request it moves
	// the pending call record: on approve to running, owned by this store
	// (the winner then runs the call and FinishCalls it); on deny to done
	// with E_APPROVAL_DENIED. A request that has expired is moved to
	// expired (its call to E_APPROVAL_EXPIRED) and returned with won
	// false; one already decided is returned as it stands with won false.
	// A request moves only the record filed under it (ApprovalID
	// approvalID, pending): a request whose call no longer waits for it
	// (its record was withdrawn, and perhaps filed again under another
	// request) is moved to expired instead and returned with won false,
	// so that it never runs or ends a call. ErrNotFound if there is no
	// such request.
	DecideApproval(ctx context.Context, id string, v Verdict, by, reason string, now time.Time) (a *Approval, won bool, err error)
	// ExpireApprovals moves pending requests whose expiry is at or before
	// now to expired, and their pending calls to done with
	// E_APPROVAL_EXPIRED. It returns how many requests it expired.
	ExpireApprovals(ctx context.Context, now time.Time) (int, error)

	// AppendAudit stores e, assigning e.ID (and e.Time when zero).
	AppendAudit(ctx context.Context, e *AuditEntry) error
	// ListAudit returns the entries f selects, oldest first.
	ListAudit(ctx context.Context, f AuditFilter) ([]*AuditEntry, error)

	// DeleteExpired deletes what retention no longer keeps: done calls last
	// updated before before, pending calls and requests that expired before
	// it, decided or expired requests last updated before it, audit
	// entries older than it, and session revocations whose until is before
	// it. Running calls are never deleted. It returns how many rows it
	// deleted.
	DeleteExpired(ctx context.Context, before time.Time) (int64, error)

	// RevokeSession records that the console session id was signed out,
	// for every store sharing the data: SessionRevoked reports it from the
	// moment RevokeSession returns nil. id names the session without
	// being usable as one (the console passes a digest of the session's
	// nonce); until is when the session would end by itself, after which
	// retention may forget it (DeleteExpired). Revoking an id again keeps
	// the later until.
	RevokeSession(ctx context.Context, id string, until time.Time) error
	// SessionRevoked reports whether RevokeSession recorded id (and
	// retention has not yet deleted it).
	SessionRevoked(ctx context.Context, id string) (bool, error)

	// Ping checks that the store answers (for /readyz).
	Ping(ctx context.Context) error
	// Close releases the store. Calls it still runs are not ended: their
	// leases lapse and a later InterruptRunning ends them.
	Close() error
}

// InterruptedResult is the result stored for a call that was running when
// the process running it stopped.
func InterruptedResult(toolCallID, toolName string) *Result {
	return &Result{ToolCallID: toolCallID, ToolName: toolName, Status: StatusError, Error: &Error{
		Code:       CodeInterrupted,
		Name:       toolName,
		Message:    fmt.Sprintf("the service stopped while tool %s was running; whether its side effects happened is unknown", toolName),
		Suggestion: "Check whether the change this call was meant to make happened before trying again; a retry needs a new toolCallId.",
	}}
}

// ApprovalDeniedResult is the result stored for a call whose approval
// request a human denied.
func ApprovalDeniedResult(toolCallID, toolName, by, reason string) *Result {
	msg := fmt.Sprintf("a human denied this call to tool %s", toolName)
	if by != "" {
		msg = fmt.Sprintf("%s denied this call to tool %s", by, toolName)
	}
	if reason != "" {
		msg += ": " + reason
	}
	return &Result{ToolCallID: toolCallID, ToolName: toolName, Status: StatusError, Error: &Error{
		Code: CodeApprovalDenied, Name: toolName, Message: msg,
		Suggestion: "Do not repeat this call; ask the user how to proceed instead.",
	}}
}

// ApprovalExpiredResult is the result stored for a call whose approval
// request nobody decided in time.
func ApprovalExpiredResult(toolCallID, toolName string) *Result {
	return &Result{ToolCallID: toolCallID, ToolName: toolName, Status: StatusError, Error: &Error{
		Code: CodeApprovalExpired, Name: toolName,
		Message:    fmt.Sprintf("nobody approved this call to tool %s in time", toolName),
		Suggestion: "Ask the user to approve the action, then call again with a new toolCallId.",
	}}
}

// ApprovalRefiler is what a Store may offer for filing again the request
// of a pending record found without it: RefileApproval stores a only
// while the call's record is pending under a.ID (ErrNotFound otherwise),
// serialised with WithdrawCall, so that no request is filed for a record
// being withdrawn at the same moment.
type ApprovalRefiler interface {
	RefileApproval(ctx context.Context, a *Approval) error
}

// ErrTooManyPending means a caller already has as many approval requests
// waiting as it may (PendingLimiter): the request was not filed.
var ErrTooManyPending = errors.New("the caller already has as many approval requests waiting as it may")

// PendingLimiter is what a Store may offer to hold each caller to a
// number of waiting approval requests also when calls file them at the
// same moment, on one replica or on several: CreateApprovalWithin stores
// a as CreateApproval does unless a.CallerID already has max or more
// pending requests that have not expired, and then stores nothing and
// returns ErrTooManyPending. The count and the insert are one
// transaction, serialized with every other CreateApprovalWithin of the
// same caller, so that no two filings both see room for one.
type PendingLimiter interface {
	CreateApprovalWithin(ctx context.Context, a *Approval, max int) error
}

// DecisionAdopter is what a Store may offer for a decision whose answer
// was lost: DecideApproval may have committed (its call's record moved to
// running, owned by this store) although it returned an error, and then
// nothing runs the call or renews its lease.
type DecisionAdopter interface {
	// AdoptDecision looks for the decision approver by made on request id
	// at decidedAt (the now given to DecideApproval). When the request
	// reads approved by that very decision, and its call's record is
	// running under it, owned by this store, within its lease and not
	// leased here, it leases the record as DecideApproval would have and
	// returns the request with adopted true: the caller runs the call.
	// Otherwise it changes nothing and returns the request as it stands
	// (nil when there is none) with adopted false; a request still
	// pending means the decision has not committed, or not yet.
	AdoptDecision(ctx context.Context, id, by string, decidedAt time.Time) (a *Approval, adopted bool, err error)
}

// AuditQueuer is what a Store may offer for appending an audit entry
// without waiting for it: QueueAudit puts e in line for the store's next
// write before it returns, so writes made after it (a call's FinishCall)
// land after it, and calls done with what AppendAudit would have returned
// once that is known, on a goroutine of its own.
type AuditQueuer interface {
	QueueAudit(ctx context.Context, e *AuditEntry, done func(error))
}
