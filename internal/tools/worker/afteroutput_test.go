package worker

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
)

// gatedSpills is a real spill store whose chunk writes wait for open to
// close, telling entered when the first one arrives.
type gatedSpills struct {
	registry.SpillStore
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedSpills) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	w, err := g.SpillStore.CreateSpill(ctx, info)
	if err != nil {
		return nil, err
	}
	return &gatedWriter{SpillWriter: w, g: g}, nil
}

type gatedWriter struct {
	registry.SpillWriter
	g *gatedSpills
}

func (w *gatedWriter) WriteChunk(ctx context.Context, seq int, p []byte) error {
	if seq == 0 {
		w.g.entered <- struct{}{}
	}
	<-w.g.open
	return w.SpillWriter.WriteChunk(ctx, seq, p)
}

// TestBigOutputsAreCountedUntilKept: a worker's output that the executor
// cuts and spills counts against the pool's output budget until the
// executor is done with it, and a call whose output does not fit waits,
// holding its worker slot. With nothing but the slot, given back as the
// reply arrived, the workers made outputs of up to 16 MiB faster than
// they were encoded and spilled, so every call in flight held one in the
// service's memory: 120 calls of a 15 MB string took it to 1.7 GB.
func TestBigOutputsAreCountedUntilKept(t *testing.T) {
	const budget = 1500000 // one worker, ResponseLimit 1.5 MB
	p := newPoolWith(t, Options{MemoryLimit: DefaultMemoryLimit, Size: 1, ResponseLimit: budget})
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, p.Confine(jsonq.Tools())...)
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	gate := &gatedSpills{SpillStore: st, entered: make(chan struct{}, 2), open: make(chan struct{})}
	e := registry.NewExecutor(registry.Options{Registry: reg, Spill: registry.NewSpiller(registry.SpillOptions{Store: gate})})
	free := func() int {
		p.slots.mu.Lock()
		defer p.slots.mu.Unlock()
		return p.slots.free
	}
	const out = 1000002 // "x" * 1000000 as JSON
	call := func(results chan<- *registry.Result) {
		res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "json__query", Arguments: json.RawMessage(`{"program":"\"x\" * 1000000","input":null}`)})
		if err != nil {
			t.Error(err)
		}
		results <- res
	}
	results := make(chan *registry.Result, 2)
	go call(results)
	<-gate.entered
	// The first output is being spilled: it counts, and the worker is
	// free for the next call.
	if p.outputs.TryAcquire(budget - out + 1) {
		t.Error("while the executor spills a 1 MB output, the budget has room for more than the rest")
	}
	if n := free(); n != 1 {
		t.Errorf("while the executor spills the output, the pool has %d slots free; want its worker back", n)
	}
	// The second does not fit beside it: its call waits with its slot.
	go call(results)
	for deadline := time.Now().Add(30 * time.Second); free() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second call took no slot within 30s")
		}
	}
	close(gate.open)
	for range 2 {
		if res := <-results; res == nil || res.Status != registry.StatusOK || !res.Truncated {
			t.Fatalf("a big call: %+v", res)
		}
	}
	if n := free(); n != 1 || !p.outputs.TryAcquire(budget) {
		t.Errorf("once the calls ended, %d slots free and the budget not whole; want all back", n)
	}
	p.outputs.Release(budget)
	// A small output is not counted.
	if res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "json__query", Arguments: json.RawMessage(`{"program":"1","input":null}`)}); err != nil || res.Status != registry.StatusOK {
		t.Fatalf("a small call: %v %+v", err, res)
	}
	if n := free(); n != 1 || !p.outputs.TryAcquire(budget) {
		t.Errorf("after a small call, %d slots free and the budget not whole", n)
	}
}
