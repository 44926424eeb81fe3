package store

import (
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// EffectiveCall returns rec as it stands at now: a pending call whose
// approval has expired reads as done with E_APPROVAL_EXPIRED, even before
// ExpireApprovals has written that down. rec itself is not changed. A
// running call whose lease has lapsed (LeaseLapsed) is not changed here:
// its owner may yet record a result over it, so a reader ends it as
// E_INTERRUPTED in the store (SQL.Interrupt), which makes that final.
func EffectiveCall(rec *registry.CallRecord, now time.Time) *registry.CallRecord {
	if rec.State != registry.CallPendingApproval || rec.ExpiresAt.IsZero() || now.Before(rec.ExpiresAt) {
		return rec
	}
	c := *rec
	c.State = registry.CallDone
	c.Result = registry.ApprovalExpiredResult(rec.ToolCallID, rec.ToolName)
	return &c
}

// LeaseLapsed reports whether rec is a running call whose lease has
// lapsed at now: unless its owner lives on and renews it in time, the
// call is ended as E_INTERRUPTED by the next to find it so (a reader, a
// waiter, the retention sweep).
func LeaseLapsed(rec *registry.CallRecord, now time.Time) bool {
	return rec.State == registry.CallRunning && !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt)
}

// EffectiveApproval returns a as it stands at now: a pending request past
// its expiry reads as expired. a itself is not changed.
func EffectiveApproval(a *registry.Approval, now time.Time) *registry.Approval {
	if a.Status != registry.ApprovalPending || now.Before(a.ExpiresAt) {
		return a
	}
	c := *a
	c.Status = registry.ApprovalExpired
	c.DecidedAt = a.ExpiresAt
	return &c
}

// Limit applies the listing limit rule of the filters: 0 means 100, and
// nothing above 1000.
func Limit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}
