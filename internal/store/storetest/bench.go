package storetest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Benchmark measures the store I/O the executor adds to a call that is
// recorded: BeginCall plus FinishCall, one goroutine and in parallel, and
// the repeat of a done call (BeginCall that finds the record).
func Benchmark(b *testing.B, s registry.Store) {
	ctx := context.Background()
	var seq atomic.Int64
	result := func(rec *registry.CallRecord) *registry.Result {
		return okResult(rec, `{"content":"a typical small tool output of some tens of bytes"}`)
	}
	// audit is the entry the executor writes with each result.
	audit := func(rec *registry.CallRecord) *registry.AuditEntry {
		return &registry.AuditEntry{CallerID: rec.CallerID, ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Tier: registry.SideEffecting,
			Decision: registry.Allow, Rule: "tier-default:side_effecting", Status: registry.StatusOK, DurationMs: 7, ArgumentsDigest: rec.ArgumentsDigest}
	}
	begin := func(b *testing.B) *registry.CallRecord {
		rec := running("bench", fmt.Sprintf("b-%d", seq.Add(1)), `{"path":"notes/today.md","content":"hello"}`)
		if _, created, err := s.BeginCall(ctx, rec); err != nil || !created {
			b.Fatalf("BeginCall: created=%v, %v", created, err)
		}
		return rec
	}
	b.Run("BeginFinish", func(b *testing.B) {
		for b.Loop() {
			rec := begin(b)
			if _, stored, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, result(rec), audit(rec)); err != nil || !stored {
				b.Fatalf("FinishCall: stored=%v, %v", stored, err)
			}
		}
	})
	b.Run("BeginFinishParallel", func(b *testing.B) {
		b.SetParallelism(16) // as many calls in flight as a loaded service has
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rec := begin(b)
				if _, stored, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, result(rec), audit(rec)); err != nil || !stored {
					b.Errorf("FinishCall: stored=%v, %v", stored, err)
					return
				}
			}
		})
	})
	b.Run("RepeatDone", func(b *testing.B) {
		rec := begin(b)
		if _, _, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, result(rec), audit(rec)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if got, created, err := s.BeginCall(ctx, rec); err != nil || created || got.State != registry.CallDone {
				b.Fatalf("repeat: created=%v, %v", created, err)
			}
		}
	})
}
