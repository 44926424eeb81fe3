package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestSpillTotalBytes: the kept outputs of all calls together stay within
// SpillOptions.TotalBytes: a stream keeps what is left of it when it
// starts, and none once it is used up, and its marker says so.
func TestSpillTotalBytes(t *testing.T) {
	big := &registry.Tool{
		Definition: registry.Definition{Name: "data__big", Description: "Big.", Tier: registry.ReadOnly, Parameters: object, MaxOutputBytes: 1024},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return strings.Repeat("x", 1<<20), nil
		}),
	}
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, big),
		Spill: registry.NewSpiller(registry.SpillOptions{Store: st, MaxBytes: 1 << 20, TotalBytes: 1<<20 + 1<<19})})
	markers := []string{"the full output is kept", "only the first 524288 bytes are kept", "the full output was not kept"}
	for i, want := range markers {
		res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__big", Arguments: json.RawMessage(`{}`)})
		if err != nil || !res.Truncated {
			t.Fatalf("call %d: %v %+v", i+1, err, res)
		}
		var text string
		_ = json.Unmarshal(res.Output, &text)
		marker := text[strings.LastIndex(text, "[output truncated"):]
		if !strings.Contains(marker, want) || (i == 0 && strings.Contains(marker, "only the first")) {
			t.Errorf("call %d: marker %q, want %q", i+1, marker, want)
		}
	}
	if n, err := st.SpillBytes(t.Context()); err != nil || n != 1<<20+1<<19 {
		t.Errorf("the store holds %d bytes of spills (%v), want the total %d", n, err, 1<<20+1<<19)
	}
}

// TestUnclosedSpillsAreGivenBack: a tool that starts a spill and fails
// (or times out) before closing it gives back what the spill was granted
// of the total, and leaves nothing in the store.
func TestUnclosedSpillsAreGivenBack(t *testing.T) {
	failing := &registry.Tool{
		Definition: registry.Definition{Name: "data__fail", Description: "Fails.", Tier: registry.ReadOnly, Parameters: object},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			sink := r.SpillStream(ctx, "stdout")
			_, _ = sink.Write([]byte(strings.Repeat("y", 1<<20)))
			return nil, errors.New("the program failed")
		}),
	}
	big := &registry.Tool{
		Definition: registry.Definition{Name: "data__big", Description: "Big.", Tier: registry.ReadOnly, Parameters: object, MaxOutputBytes: 1024},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return strings.Repeat("x", 1<<20), nil
		}),
	}
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, failing, big),
		Spill: registry.NewSpiller(registry.SpillOptions{Store: st, MaxBytes: 1 << 20, TotalBytes: 1<<20 + 1<<19})})
	for range 4 {
		if res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__fail", Arguments: json.RawMessage(`{}`)}); err != nil || res.Code() != registry.CodeTool {
			t.Fatalf("failing call: %v %+v", err, res)
		}
	}
	if n, err := st.SpillBytes(t.Context()); err != nil || n != 0 {
		t.Errorf("the store holds %d bytes of spills given up (%v), want 0", n, err)
	}
	res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__big", Arguments: json.RawMessage(`{}`)})
	if err != nil || !strings.Contains(string(res.Output), "the full output is kept") || strings.Contains(string(res.Output), "only the first") {
		t.Errorf("a cut output after failed calls: %v %s", err, res.Output[max(0, len(res.Output)-200):])
	}
}

// endless is a body that never ends, counting what was read of it.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.n += int64(len(p))
	return len(p), nil
}

// TestCountRestStopsPastWhatIsKept: counting a cut stream reads at most
// CountPast beyond what its spill keeps (or beyond the cut when nothing
// is kept), however large the caller's bound, and says the count is not
// exact.
func TestCountRestStopsPastWhatIsKept(t *testing.T) {
	for _, c := range []struct {
		name  string
		spill *registry.Spiller
		keep  int64
	}{
		{"nothing kept", nil, 0},
		{"kept up to the spill limit", registry.NewSpiller(registry.SpillOptions{Store: openSQLite(t), MaxBytes: 1 << 20}), 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := &endless{}
			var total int64
			var exact bool
			counter := &registry.Tool{
				Definition: registry.Definition{Name: "data__count", Description: "Counts.", Tier: registry.ReadOnly, Parameters: object},
				Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
					total, exact, _ = r.CountRest(ctx, "body", []byte("head"), body, 256<<20)
					return "ok", nil
				}),
			}
			e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, counter), Spill: c.spill})
			if _, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__count", Arguments: json.RawMessage(`{}`)}); err != nil {
				t.Fatal(err)
			}
			want := max(c.keep-4, 0) + registry.CountPast
			if body.n < want || body.n > want+64<<10 || total != 4+want || exact {
				t.Errorf("read %d bytes of an endless body and counted %d (exact %v); want %d read, counted %d, not exact", body.n, total, exact, want, 4+want)
			}
		})
	}
}
