package registry_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestAfterOutputRunsOnceTheOutputIsKept: what a handler leaves to
// AfterOutput runs after the executor has encoded its output and kept the
// cut one in the spill store, not when the handler returns; on a request
// no executor runs, and for a handler abandoned at its deadline that
// returns later, it runs at once.
func TestAfterOutputRunsOnceTheOutputIsKept(t *testing.T) {
	st := openSQLite(t)
	var ran atomic.Int32
	var spilledFirst atomic.Bool
	big := &registry.Tool{
		Definition: registry.Definition{Name: "data__big", Description: "Big.", Tier: registry.ReadOnly, Parameters: object, MaxOutputBytes: 1024},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			r.AfterOutput(func() {
				// The executor is done with the output: its spill is
				// in the store.
				n, err := st.SpillBytes(context.Background())
				spilledFirst.Store(err == nil && n == 1<<20)
				ran.Add(1)
			})
			if ran.Load() != 0 {
				t.Error("AfterOutput ran before the handler returned")
			}
			return strings.Repeat("x", 1<<20), nil
		}),
	}
	late := make(chan struct{})
	lateRan := make(chan struct{})
	slow := &registry.Tool{
		Definition: registry.Definition{Name: "data__slow", Description: "Ignores its deadline.", Tier: registry.ReadOnly, Parameters: object, Timeout: 50 * time.Millisecond},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			<-late
			r.AfterOutput(func() { close(lateRan) })
			return "late", nil
		}),
	}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, big, slow),
		Spill: registry.NewSpiller(registry.SpillOptions{Store: st, MaxBytes: 4 << 20})})
	res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__big", Arguments: json.RawMessage(`{}`)})
	if err != nil || !res.Truncated {
		t.Fatalf("the big call: %v %+v", err, res)
	}
	if ran.Load() != 1 || !spilledFirst.Load() {
		t.Errorf("AfterOutput ran %d times, after the spill was kept: %v; want once, after", ran.Load(), spilledFirst.Load())
	}

	res, err = e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__slow", Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Code() != registry.CodeTimeout {
		t.Fatalf("the abandoned call: %v %+v", err, res)
	}
	close(late)
	select {
	case <-lateRan:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterOutput of a handler that returned after it was abandoned did not run")
	}

	done := false
	(&registry.Request{}).AfterOutput(func() { done = true })
	if !done {
		t.Error("AfterOutput on a request no executor runs did not run at once")
	}
}
