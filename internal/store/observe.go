package store

import (
	"context"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// announceExpired tells o of the requests whose expiry fell in (after,
// now]: the ones a sweep that expired something has just moved. Stores
// report only how many they expired, so the window stands in for the ids;
// with several replicas a request may be announced by more than one.
func announceExpired(ctx context.Context, s registry.Store, o registry.ApprovalObserver, after, now time.Time) {
	if o == nil {
		return
	}
	list, err := s.ListApprovals(ctx, registry.ApprovalFilter{Status: registry.ApprovalExpired, Limit: 1000})
	if err != nil {
		return
	}
	for _, a := range list {
		if a.ExpiresAt.After(after) && !a.ExpiresAt.After(now) {
			registry.NotifyApproval(o, registry.EventApprovalExpired, a, now)
		}
	}
}
