package registry_test

import (
	"context"
	"encoding/json"
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
