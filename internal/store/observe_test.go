package store_test

import (
	"context"
	"encoding/json"
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
	for i, ttl := range []time.Duration{150 * time.Millisecond, time.Hour} {
		id := []string{"apr_soon", "apr_later"}[i]
		call := []string{"c1", "c2"}[i]
		a := &registry.Approval{ID: id, CallerID: "agent", ToolCallID: call, ToolName: "ops__restart", ArgumentsDigest: "d",
			Arguments: json.RawMessage(`{}`), Status: registry.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(ttl)}
		pending := &registry.Result{ToolCallID: call, ToolName: "ops__restart", Status: registry.StatusPendingApproval}
		if _, _, err := st.BeginCall(ctx, &registry.CallRecord{CallerID: "agent", ToolCallID: call, ToolName: "ops__restart", ArgumentsDigest: "d",
			State: registry.CallPendingApproval, Result: pending, ApprovalID: id, ExpiresAt: a.ExpiresAt}); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	obs := &observed{}
	rctx, cancel := context.WithCancel(ctx)
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
	evs := obs.list()
	if len(evs) != 1 || evs[0].Kind != registry.EventApprovalExpired || evs[0].Approval.ID != "apr_soon" || evs[0].Approval.Status != registry.ApprovalExpired {
		t.Fatalf("events = %+v; want one expired event for apr_soon", evs)
	}
}
