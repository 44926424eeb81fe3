package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

func TestReadMigrations(t *testing.T) {
	good := fstest.MapFS{
		"m/0002_more.sql": {Data: []byte("B")},
		"m/0001_init.sql": {Data: []byte("A")},
		"m/README":        {Data: []byte("ignored")},
	}
	ms, err := store.ReadMigrations(good, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].Version != 1 || ms[0].SQL != "A" || ms[1].Name != "0002_more.sql" {
		t.Errorf("migrations = %+v", ms)
	}
	for name, fsys := range map[string]fstest.MapFS{
		"duplicate": {"m/0001_a.sql": {}, "m/0001_b.sql": {}},
		"bad name":  {"m/init.sql": {}},
		"zero":      {"m/0000_a.sql": {}},
	} {
		if _, err := store.ReadMigrations(fsys, "m"); err == nil {
			t.Errorf("%s: ReadMigrations accepted %v", name, fsys)
		}
	}
}

func TestPendingMigrations(t *testing.T) {
	ms, err := store.ReadMigrations(fstest.MapFS{"m/0001_a.sql": {}, "m/0003_c.sql": {}, "m/0002_b.sql": {}}, "m")
	if err != nil {
		t.Fatal(err)
	}
	// A database that got 1 and 3 (from a branch that reserved 3) still
	// gets 2.
	p, err := store.Pending(ms, []int{1, 3})
	if err != nil || len(p) != 1 || p[0].Version != 2 {
		t.Fatalf("Pending = %+v, %v", p, err)
	}
	if p, _ := store.Pending(ms, nil); len(p) != 3 || p[0].Version != 1 || p[2].Version != 3 {
		t.Errorf("Pending on an empty database = %+v", p)
	}
	if _, err := store.Pending(ms, []int{1, 4}); err == nil {
		t.Error("Pending accepted a database migrated by a newer program")
	}
}

func TestHub(t *testing.T) {
	h := store.NewHub()
	a, cancelA := h.Subscribe("k")
	b, cancelB := h.Subscribe("other")
	h.Notify("k")
	select {
	case <-a:
	default:
		t.Fatal("subscriber of k was not woken")
	}
	select {
	case <-b:
		t.Fatal("subscriber of another key was woken")
	default:
	}
	h.NotifyAll()
	select {
	case <-b:
	default:
		t.Fatal("NotifyAll did not wake every subscriber")
	}
	if h.Waiting() != 2 {
		t.Errorf("Waiting = %d, want 2", h.Waiting())
	}
	cancelA()
	cancelB()
	if h.Waiting() != 0 {
		t.Errorf("Waiting after cancel = %d, want 0", h.Waiting())
	}
	if store.Key("a", "b\x00c") == store.Key("a\x00b", "c") {
		t.Error("keys of different (caller, id) pairs collide")
	}
}

func TestEffectiveViews(t *testing.T) {
	now := time.Now()
	rec := &registry.CallRecord{ToolCallID: "c", ToolName: "t", State: registry.CallPendingApproval, ExpiresAt: now}
	if got := store.EffectiveCall(rec, now.Add(-time.Second)); got != rec {
		t.Error("a pending call before its expiry changed")
	}
	got := store.EffectiveCall(rec, now)
	if got.State != registry.CallDone || got.Result.Code() != registry.CodeApprovalExpired || rec.State != registry.CallPendingApproval {
		t.Errorf("expired view = %+v (original now %s)", got, rec.State)
	}
	a := &registry.Approval{Status: registry.ApprovalPending, ExpiresAt: now}
	if v := store.EffectiveApproval(a, now); v.Status != registry.ApprovalExpired || !v.DecidedAt.Equal(now) || a.Status != registry.ApprovalPending {
		t.Errorf("expired approval view = %+v", v)
	}
	for in, want := range map[int]int{0: 100, -1: 100, 5: 5, 1000: 1000, 5000: 1000} {
		if got := store.Limit(in); got != want {
			t.Errorf("Limit(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestRunRetention(t *testing.T) {
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "s.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	done := &registry.CallRecord{CallerID: "a", ToolCallID: "done", ToolName: "t", ArgumentsDigest: "d", State: registry.CallRunning}
	if _, _, err := s.BeginCall(ctx, done); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.FinishCall(ctx, "a", "done", &registry.Result{ToolCallID: "done", Status: registry.StatusOK, Output: json.RawMessage(`1`)}, nil); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	pend := &registry.CallRecord{CallerID: "a", ToolCallID: "pend", ToolName: "t", ArgumentsDigest: "d", State: registry.CallPendingApproval,
		ApprovalID: "ap", ExpiresAt: exp, Result: &registry.Result{Status: registry.StatusPendingApproval}}
	if _, _, err := s.BeginCall(ctx, pend); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateApproval(ctx, &registry.Approval{ID: "ap", CallerID: "a", ToolCallID: "pend", ToolName: "t", ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}

	// Two hours on, with a one-day TTL: the request expires, nothing is old
	// enough to delete.
	expired, interrupted, deleted, err := store.Sweep(ctx, s, time.Now().Add(2*time.Hour), 24*time.Hour)
	if err != nil || expired != 1 || interrupted != 0 || deleted != 0 {
		t.Fatalf("Sweep = %d expired, %d interrupted, %d deleted, %v; want 1, 0, 0", expired, interrupted, deleted, err)
	}

	// The loop, with a clock two days on, deletes everything done.
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		store.RunRetention(rctx, s, store.RetentionOptions{Every: 20 * time.Millisecond, TTL: 24 * time.Hour,
			Now: func() time.Time { return time.Now().Add(48 * time.Hour) }})
		close(stopped)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err1 := s.GetCall(ctx, "a", "done")
		_, err2 := s.GetApproval(ctx, "ap")
		if errors.Is(err1, registry.ErrNotFound) && errors.Is(err2, registry.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retention did not delete: %v, %v", err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-stopped
}

// TestScanTime: a stored time reads back from microseconds (SQLite), a
// time (PostgreSQL), and 0 or NULL as the zero time; anything else fails.
func TestScanTime(t *testing.T) {
	at := time.Date(2026, 11, 23, 22, 52, 16, 123456000, time.UTC)
	for _, tc := range []struct {
		in   any
		want time.Time
	}{
		{at.UnixMicro(), at},
		{int64(0), time.Time{}},
		{nil, time.Time{}},
		{at.In(time.FixedZone("CET", 3600)), at},
	} {
		got := time.Now()
		if err := store.ScanTime(&got).Scan(tc.in); err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("Scan(%#v) = %v, %v; want %v in UTC", tc.in, got, err, tc.want)
		}
	}
	var got time.Time
	if err := store.ScanTime(&got).Scan("2026-11-23"); err == nil {
		t.Errorf("Scan of a string = %v, want an error", got)
	}
}
