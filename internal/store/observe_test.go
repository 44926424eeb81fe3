package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

type observed struct {
	mu  sync.Mutex
	evs []registry.ApprovalEvent
}

func (o *observed) ObserveApproval(ev registry.ApprovalEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.evs = append(o.evs, ev)
}

func (o *observed) list() []registry.ApprovalEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]registry.ApprovalEvent(nil), o.evs...)
}

// TestRetentionAnnouncesExpiredRequests files a request that expires and
// one that does not, and checks the sweep announces the first, once.
func TestRetentionAnnouncesExpiredRequests(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	fileApproval(t, st, "apr_soon", now, now.Add(150*time.Millisecond))
	fileApproval(t, st, "apr_later", now, now.Add(time.Hour))
	evs := sweepUntilAnnounced(t, st)
	if len(evs) != 1 || evs[0].Kind != registry.EventApprovalExpired || evs[0].Approval.ID != "apr_soon" || evs[0].Approval.Status != registry.ApprovalExpired {
		t.Fatalf("events = %+v; want one expired event for apr_soon", evs)
	}
}

// Expired requests are kept for the retention period. With more of them
// kept than one listing returns, a request that expires now is still
// announced: the sweep used to list every expired request oldest first,
// and the page of old ones left it out.
func TestRetentionAnnouncesExpiryBehindManyKept(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for i := range 1001 {
		created := now.Add(-2*time.Hour + time.Duration(i)*time.Millisecond)
		fileApproval(t, st, fmt.Sprintf("apr_old_%04d", i), created, created.Add(time.Minute))
	}
	if n, err := st.ExpireApprovals(ctx, now); err != nil || n != 1001 {
		t.Fatalf("expiring the old requests: %d, %v", n, err)
	}
	soon := time.Now()
	fileApproval(t, st, "apr_soon", soon, soon.Add(150*time.Millisecond))
	evs := sweepUntilAnnounced(t, st)
	if len(evs) != 1 || evs[0].Approval.ID != "apr_soon" {
		t.Fatalf("events = %+v; want one expired event for apr_soon", evs)
	}
}

// fileApproval files a pending request id, created at created, that
// expires at expires, with its call.
func fileApproval(t *testing.T, st registry.Store, id string, created, expires time.Time) {
	t.Helper()
	ctx := context.Background()
	call := "c-" + id
	a := &registry.Approval{ID: id, CallerID: "agent", ToolCallID: call, ToolName: "ops__restart", ArgumentsDigest: "d",
		Arguments: json.RawMessage(`{}`), Status: registry.ApprovalPending, CreatedAt: created, ExpiresAt: expires}
	pending := &registry.Result{ToolCallID: call, ToolName: "ops__restart", Status: registry.StatusPendingApproval}
	if _, _, err := st.BeginCall(ctx, &registry.CallRecord{CallerID: "agent", ToolCallID: call, ToolName: "ops__restart", ArgumentsDigest: "d",
		State: registry.CallPendingApproval, Result: pending, ApprovalID: id, ExpiresAt: a.ExpiresAt}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateApproval(ctx, a); err != nil {
		t.Fatal(err)
	}
}

// sweepUntilAnnounced runs retention sweeps every 50 ms until one
// announces something (10 s at most), then a few more, and returns every
// event announced.
func sweepUntilAnnounced(t *testing.T, st registry.Store) []registry.ApprovalEvent {
	t.Helper()
	obs := &observed{}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.RunRetention(rctx, st, store.RetentionOptions{Every: 50 * time.Millisecond, Observer: obs})
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(obs.list()) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // several more sweeps
	cancel()
	<-done
	return obs.list()
}
