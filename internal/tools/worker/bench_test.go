package worker

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// BenchmarkCall is the per-call cost of the memory ceiling: the same
// json__query call in process (no ceiling), in a pooled worker (the
// mechanism toolsvc uses) and in a fresh worker per call (the
// alternative it was measured against).
func BenchmarkCall(b *testing.B) {
	args := json.RawMessage(jq(`.items | map(select(.price > 10)) | length`, `{"items":[{"price":5},{"price":15},{"price":25}]}`))
	req := &registry.Request{Name: "json__query", Arguments: args, MaxOutputBytes: 16384}
	var inProcess registry.Handler
	for _, t := range confined() {
		if t.Name == "json__query" {
			inProcess = t.Handler
		}
	}
	ctx := context.Background()
	b.Run("in-process", func(b *testing.B) {
		for b.Loop() {
			if _, err := inProcess.Run(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pooled-worker", func(b *testing.B) {
		p := newPool(b, DefaultMemoryLimit)
		for b.Loop() {
			if _, err := p.Call(ctx, "json__query", req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fresh-worker", func(b *testing.B) {
		for b.Loop() {
			p := newPool(b, DefaultMemoryLimit)
			if _, err := p.Call(ctx, "json__query", req); err != nil {
				b.Fatal(err)
			}
			p.Close()
		}
	})
}
