package storetest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// RunSpill is the conformance suite of a registry.SpillStore: chunked
// writes read back by any range, only complete spills are read, spills
// belong to their caller, a new spill replaces the old one under its key,
// expired spills are neither read nor kept, and the stored bytes are
// counted.
func RunSpill(t *testing.T, open func(t *testing.T) registry.SpillStore) {
	ctx := context.Background()
	const chunk = registry.SpillChunkBytes
	data := make([]byte, 2*chunk+1234)
	for i := range data {
		data[i] = byte('a' + i%23)
	}
	write := func(t *testing.T, s registry.SpillStore, caller, id, stream string, p []byte, expires time.Time) {
		t.Helper()
		w, err := s.CreateSpill(ctx, &registry.SpillInfo{CallerID: caller, ToolCallID: id, ToolName: "t__x", Stream: stream,
			CreatedAt: time.Now(), ExpiresAt: expires})
		if err != nil {
			t.Fatal(err)
		}
		for seq := 0; seq*chunk < len(p); seq++ {
			if err := w.WriteChunk(ctx, seq, p[seq*chunk:min((seq+1)*chunk, len(p))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(ctx, int64(len(p))+100, int64(len(p))); err != nil {
			t.Fatal(err)
		}
	}
	hour := time.Now().Add(time.Hour)

	t.Run("ReadRanges", func(t *testing.T) {
		s := open(t)
		write(t, s, "alice", "c1", "stdout", data, hour)
		for _, r := range []struct {
			off int64
			n   int
		}{{0, 10}, {0, len(data)}, {chunk - 5, 10}, {chunk - 1, chunk + 2}, {2 * chunk, 5000}, {int64(len(data)) - 3, 100}, {int64(len(data)), 10}, {int64(len(data)) + 50, 10}} {
			info, got, err := s.ReadSpill(ctx, "alice", "c1", "stdout", r.off, r.n)
			if err != nil {
				t.Fatalf("ReadSpill(%d, %d): %v", r.off, r.n, err)
			}
			lo, hi := min(r.off, int64(len(data))), min(r.off+int64(r.n), int64(len(data)))
			if !bytes.Equal(got, data[lo:hi]) {
				t.Errorf("ReadSpill(%d, %d) returned %d bytes, want %d (data[%d:%d])", r.off, r.n, len(got), hi-lo, lo, hi)
			}
			if info.TotalBytes != int64(len(data))+100 || info.StoredBytes != int64(len(data)) || info.ToolName != "t__x" || info.Stream != "stdout" {
				t.Errorf("info = %+v", info)
			}
		}
		list, err := s.ListSpills(ctx, "alice", "c1")
		if err != nil || len(list) != 1 || list[0].Stream != "stdout" || list[0].StoredBytes != int64(len(data)) {
			t.Errorf("ListSpills = %+v, %v", list, err)
		}
		if n, err := s.SpillBytes(ctx); err != nil || n != int64(len(data)) {
			t.Errorf("SpillBytes = %d, %v; want %d", n, err, len(data))
		}
	})
	t.Run("OwnCallerOnly", func(t *testing.T) {
		s := open(t)
		write(t, s, "alice", "c1", "output", data[:100], hour)
		if _, _, err := s.ReadSpill(ctx, "bob", "c1", "output", 0, 10); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("another caller read the spill: %v", err)
		}
		if list, err := s.ListSpills(ctx, "bob", "c1"); err != nil || len(list) != 0 {
			t.Errorf("another caller listed %v, %v", list, err)
		}
		if _, _, err := s.ReadSpill(ctx, "alice", "c1", "stderr", 0, 10); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("a stream never spilled read: %v", err)
		}
	})
	t.Run("IncompleteIsNotRead", func(t *testing.T) {
		s := open(t)
		w, err := s.CreateSpill(ctx, &registry.SpillInfo{CallerID: "alice", ToolCallID: "c2", ToolName: "t__x", Stream: "output", CreatedAt: time.Now(), ExpiresAt: hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WriteChunk(ctx, 0, data[:chunk]); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ReadSpill(ctx, "alice", "c2", "output", 0, 10); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("an incomplete spill was read: %v", err)
		}
		w.Abort(ctx)
		if n, err := s.SpillBytes(ctx); err != nil || n != 0 {
			t.Errorf("after Abort SpillBytes = %d, %v", n, err)
		}
		if err := w.Commit(ctx, chunk, chunk); err == nil {
			t.Error("Commit after Abort succeeded")
		}
	})
	t.Run("Replace", func(t *testing.T) {
		s := open(t)
		write(t, s, "alice", "c3", "output", data, hour)
		write(t, s, "alice", "c3", "output", []byte("second"), hour)
		_, got, err := s.ReadSpill(ctx, "alice", "c3", "output", 0, 100)
		if err != nil || string(got) != "second" {
			t.Errorf("after replace read %q, %v", got, err)
		}
		if n, _ := s.SpillBytes(ctx); n != 6 {
			t.Errorf("after replace SpillBytes = %d, want 6", n)
		}
	})
	t.Run("UnrecordedKeepsARecordedCallsSpill", func(t *testing.T) {
		s := open(t)
		rs, ok := s.(registry.Store)
		if !ok {
			t.Skip("the spill store keeps no calls")
		}
		if _, _, err := rs.BeginCall(ctx, &registry.CallRecord{CallerID: "alice", ToolCallID: "c5", ToolName: "t__x", ArgumentsDigest: "d", State: registry.CallRunning}); err != nil {
			t.Fatal(err)
		}
		write(t, s, "alice", "c5", "output", data[:100], hour)
		unrecorded := func(id string) error {
			_, err := s.CreateSpill(ctx, &registry.SpillInfo{CallerID: "alice", ToolCallID: id, ToolName: "t__x", Stream: "output",
				CreatedAt: time.Now(), ExpiresAt: hour, Unrecorded: true})
			return err
		}
		if err := unrecorded("c5"); !errors.Is(err, registry.ErrSpillOfRecordedCall) {
			t.Errorf("the spill of an unrecorded call with a recorded call's id: %v", err)
		}
		if _, got, err := s.ReadSpill(ctx, "alice", "c5", "output", 0, 1000); err != nil || !bytes.Equal(got, data[:100]) {
			t.Errorf("the recorded call's spill now reads %d bytes, %v", len(got), err)
		}
		write(t, s, "alice", "c6", "output", data[:10], hour)
		if err := unrecorded("c6"); err != nil {
			t.Errorf("an unrecorded call's spill replacing another unrecorded one: %v", err)
		}
	})
	t.Run("Expiry", func(t *testing.T) {
		s := open(t)
		write(t, s, "alice", "old", "output", data[:500], time.Now().Add(-time.Second))
		write(t, s, "alice", "new", "output", data[:700], hour)
		if _, _, err := s.ReadSpill(ctx, "alice", "old", "output", 0, 10); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("an expired spill was read: %v", err)
		}
		n, err := s.DeleteExpiredSpills(ctx, time.Now())
		if err != nil || n != 1 {
			t.Errorf("DeleteExpiredSpills = %d, %v; want 1", n, err)
		}
		if b, _ := s.SpillBytes(ctx); b != 700 {
			t.Errorf("after expiry SpillBytes = %d, want 700", b)
		}
		if _, got, err := s.ReadSpill(ctx, "alice", "new", "output", 0, 1000); err != nil || len(got) != 700 {
			t.Errorf("unexpired spill: %d bytes, %v", len(got), err)
		}
	})
}
