package registry

import (
	"context"
	"time"
)

// ApprovalEventKind says what happened to an approval request.
type ApprovalEventKind string

// The approval events an ApprovalObserver hears of.
const (
	EventApprovalRequested ApprovalEventKind = "requested"
	EventApprovalDecided   ApprovalEventKind = "decided"
	EventApprovalExpired   ApprovalEventKind = "expired"
)

// ApprovalEvent is one change of an approval request: filed, decided by an
// approver, or expired undecided.
type ApprovalEvent struct {
	Kind ApprovalEventKind
	// Approval is the request as it stands after the change (a copy).
	Approval Approval
	Time     time.Time
}

// ApprovalObserver hears of approval events (notifications, live pages).
// ObserveApproval is called on the path of a call or a decision, so it must
// return at once: it may queue the event, never deliver it there.
type ApprovalObserver interface {
	ObserveApproval(ev ApprovalEvent)
}

// NotifyApproval tells o (which may be nil) of an event about a.
func NotifyApproval(o ApprovalObserver, kind ApprovalEventKind, a *Approval, now time.Time) {
	if o == nil || a == nil {
		return
	}
	o.ObserveApproval(ApprovalEvent{Kind: kind, Approval: *a, Time: now})
}

// ApprovalObservers hands every event to each observer in turn.
type ApprovalObservers []ApprovalObserver

// ObserveApproval implements ApprovalObserver.
func (os ApprovalObservers) ObserveApproval(ev ApprovalEvent) {
	for _, o := range os {
		if o != nil {
			o.ObserveApproval(ev)
		}
	}
}

// requestIDKey carries, in a call's context, the id of the request that
// brought it, for the audit line.
type requestIDKey struct{}

// WithRequestID returns ctx carrying the id of the request a call came
// in; the call's audit line records it as requestId.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFrom returns the request id WithRequestID put in ctx, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}
