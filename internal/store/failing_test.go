package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// refusing is a real store whose call writes fail while down is set.
type refusing struct {
	registry.Store
	down atomic.Bool
	full atomic.Bool // down for want of disk space
}

func (r *refusing) BeginCall(ctx context.Context, rec *registry.CallRecord) (*registry.CallRecord, bool, error) {
	if r.down.Load() {
		if r.full.Load() {
			return nil, false, fmt.Errorf("%w: database or disk is full (13)", registry.ErrStoreFull)
		}
		return nil, false, errors.New("database disk image is malformed")
	}
	return r.Store.BeginCall(ctx, rec)
}

// TestFailingCallWrites: three call writes failing in a row make Failing
// report the last error (readiness then fails, though the store's own
// probe may pass); a write that succeeds, or one whose caller left, does
// not count.
func TestFailingCallWrites(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &refusing{Store: st}
	s := store.WithDeadline(r, 5*time.Second)
	n := 0
	begin := func(ctx context.Context) error {
		n++
		_, _, err := s.BeginCall(ctx, &registry.CallRecord{CallerID: "alice", ToolCallID: "w" + string(rune('a'+n)), ToolName: "fs__write",
			ArgumentsDigest: "d", Arguments: json.RawMessage(`{}`), State: registry.CallRunning})
		return err
	}
	r.down.Store(true)
	for range 2 {
		_ = begin(t.Context())
	}
	if err := store.Failing(s); err != nil {
		t.Fatalf("after two failed writes: %v", err)
	}
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	_ = begin(gone) // its caller left: says nothing about the store
	if err := store.Failing(s); err != nil {
		t.Fatalf("after a write whose caller left: %v", err)
	}
	_ = begin(t.Context())
	if err := store.Failing(s); err == nil || !strings.Contains(err.Error(), "malformed") || !strings.Contains(err.Error(), "last 3 writes") {
		t.Fatalf("after three failed writes: %v", err)
	}
	r.down.Store(false)
	if err := begin(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.Failing(s); err != nil {
		t.Errorf("after a write that succeeded: %v", err)
	}

	// The store's probe passes while the writes of a corrupted file fail:
	// they still count.
	r.down.Store(true)
	for range 3 {
		_ = begin(t.Context())
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.Failing(s); err == nil {
		t.Error("a passing probe ended a run of failed writes of a corrupted file")
	}
	// Writes that failed for want of disk space end with a probe that
	// passes: it wrote its headroom, so the space is back, and no call
	// comes to a replica out of rotation to show it.
	r.full.Store(true)
	for range 3 {
		_ = begin(t.Context())
	}
	if err := store.Failing(s); err == nil || !strings.Contains(err.Error(), "out of disk space") {
		t.Fatalf("after three writes failed for want of space: %v", err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := store.Failing(s); err != nil {
		t.Errorf("after a probe that wrote its headroom: %v", err)
	}
}
