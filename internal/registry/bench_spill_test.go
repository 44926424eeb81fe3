package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// BenchmarkSpill is the cost of keeping cut outputs: a call whose small
// output is not cut, and a call whose 10 MB output is cut, each without a
// spill store (the baseline) and with the embedded one.
func BenchmarkSpill(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	big := strings.Repeat("0123456789abcdef\n", 10<<20/17)
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000},
		&registry.Tool{
			Definition: registry.Definition{Name: "bench__small", Description: "A small output.", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
			Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
				return map[string]any{"content": "hello world", "n": 3}, nil
			}),
		},
		&registry.Tool{
			Definition: registry.Definition{Name: "bench__big", Description: "A 10 MB output.", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
			Handler:    registry.Func(func(context.Context, *registry.Request) (any, error) { return big, nil }),
		})
	if err != nil {
		b.Fatal(err)
	}
	spill := registry.NewSpiller(registry.SpillOptions{Store: st, Retention: time.Minute})
	for _, c := range []struct {
		name, tool string
		spill      *registry.Spiller
	}{
		{"Uncut/NoSpill", "bench__small", nil},
		{"Uncut/Spill", "bench__small", spill},
		{"Cut10MB/NoSpill", "bench__big", nil},
		{"Cut10MB/Spill", "bench__big", spill},
	} {
		b.Run(c.name, func(b *testing.B) {
			e := registry.NewExecutor(registry.Options{Registry: reg, Spill: c.spill})
			caller, ctx := registry.Anonymous(), context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				res, err := e.Execute(ctx, caller, &registry.Call{ToolCallID: fmt.Sprintf("s%d", i), ToolName: c.tool})
				if err != nil || res.Status != registry.StatusOK || res.Truncated != (c.tool == "bench__big") {
					b.Fatal(err, res)
				}
			}
			if c.tool == "bench__big" {
				b.SetBytes(int64(len(big)))
			}
		})
	}
}
