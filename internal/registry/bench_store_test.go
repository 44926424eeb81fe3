package registry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// BenchmarkExecuteSideEffecting is the executor on a side_effecting tool
// that does nothing, with the embedded store: every call is recorded
// before it runs, finished after, and appended to the audit trail.
func BenchmarkExecuteSideEffecting(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000},
		&registry.Tool{
			Definition: registry.Definition{Name: "bench__write", Description: "Writes nothing.", Tier: registry.SideEffecting,
				Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)},
			Handler: registry.Func(func(context.Context, *registry.Request) (any, error) { return "ok", nil }),
		})
	if err != nil {
		b.Fatal(err)
	}
	e := registry.NewExecutor(registry.Options{Registry: reg, Store: st, Metrics: registry.NewMetrics(prometheus.NewRegistry())})
	caller, ctx := registry.Anonymous(), context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		call := &registry.Call{ToolCallID: fmt.Sprintf("w%d", i), ToolName: "bench__write", Arguments: json.RawMessage(`{"path":"notes/today.md"}`)}
		res, err := e.Execute(ctx, caller, call)
		if err != nil || res.Status != registry.StatusOK {
			b.Fatal(err, res)
		}
	}
}
