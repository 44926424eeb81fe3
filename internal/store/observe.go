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
	// Only the window is listed: expired requests are kept for the
	// retention period, and a listing of them all, oldest first, stopped
	// at a page of old ones once more were kept.
	f := registry.ApprovalFilter{Status: registry.ApprovalExpired, ExpiresAfter: after, Limit: expiredPage}
	for {
		list, err := s.ListApprovals(ctx, f)
		if err != nil {
			return
		}
		for _, a := range list {
			if !a.ExpiresAt.After(now) {
				registry.NotifyApproval(o, registry.EventApprovalExpired, a, now)
			}
		}
		if len(list) < expiredPage {
			return
		}
		f.After = list[len(list)-1].Cursor()
	}
}

// expiredPage is how many expired requests announceExpired reads at once.
const expiredPage = 1000
