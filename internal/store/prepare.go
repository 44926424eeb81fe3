package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Micro is the stored precision of every time: both stores keep
// microseconds.
func Micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// NewCall is the record BeginCall inserts for rec at now: a running call
// owned by owner with a lease, or a pending one with its approval's expiry
// and pending result. It returns the record and its stored result.
func NewCall(rec *registry.CallRecord, now time.Time, owner string, lease time.Duration) (registry.CallRecord, []byte, error) {
	c := *rec
	c.Arguments = Arguments(rec.Arguments)
	c.CreatedAt, c.UpdatedAt = now, now
	if c.State == registry.CallRunning {
		c.Owner, c.ExpiresAt, c.Result = owner, now.Add(lease), nil
	} else {
		c.Owner, c.ExpiresAt = "", Micro(rec.ExpiresAt)
	}
	result, err := EncodeResult(c.Result)
	return c, result, err
}

// NewApproval validates a request given to CreateApproval and sets what
// the store records: created at now unless set, pending, times at the
// stored precision. It returns the stored filing.
func NewApproval(a *registry.Approval, now time.Time) ([]byte, error) {
	if err := CheckApproval(a); err != nil {
		return nil, err
	}
	if a.CreatedAt.IsZero() {
		a.CreatedAt = now
	}
	a.CreatedAt, a.ExpiresAt, a.Status = Micro(a.CreatedAt), Micro(a.ExpiresAt), registry.ApprovalPending
	return EncodeFiling(a.Filed)
}

// Finish is what FinishCall writes, prepared before the group commit
// takes it: the encoded result, the committer's own copy of the audit
// entry (nil without one; the caller's entry gets its time and event set
// as AppendAudit sets them), and the write's size for the commit's bound.
type Finish struct {
	Result []byte
	Audit  *registry.AuditEntry
	Size   int
}

// NewFinish prepares the write of res and audit (which may be nil).
func NewFinish(res *registry.Result, audit *registry.AuditEntry, now time.Time) (Finish, error) {
	result, err := EncodeResult(res)
	if err != nil {
		return Finish{}, err
	}
	f := Finish{Result: result, Size: len(result) + 256}
	if audit != nil {
		NewAudit(audit, now)
		v := *audit
		f.Audit, f.Size = &v, f.Size+512
	}
	return f, nil
}

// NewAudit sets what AppendAudit records beside e's own fields: the time
// (now when unset, at the stored precision) and the event ("call" when
// unset); and it makes e's text storable (see storableText).
func NewAudit(e *registry.AuditEntry, now time.Time) {
	if e.Time.IsZero() {
		e.Time = now
	}
	e.Time = Micro(e.Time)
	if e.Event == "" {
		e.Event = "call"
	}
	for _, p := range []*string{&e.Event, &e.CallerID, &e.ToolCallID, &e.ToolName, &e.Rule, &e.ArgumentsDigest, &e.Issuer, &e.Subject} {
		*p = storableText(*p)
	}
}

// storableText is s as a text column of either store holds it: a NUL or
// invalid UTF-8 becomes U+FFFD. An audit entry records what a caller
// brought, some of it unchecked (a token's subject, when another claim
// names the caller): PostgreSQL refused such an entry, and with it the
// result committed beside it, at every retry of the backlog, and the
// failing writes took the replica out of readiness for good.
func storableText(s string) string {
	if storable(s) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// DecidedStatus is the status a verdict gives a request.
func DecidedStatus(v registry.Verdict) (registry.ApprovalStatus, error) {
	switch v {
	case registry.VerdictApprove:
		return registry.ApprovalApproved, nil
	case registry.VerdictDeny:
		return registry.ApprovalDenied, nil
	}
	return "", fmt.Errorf("store: unknown verdict %q (want approve or deny)", v)
}
