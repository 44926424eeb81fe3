package registry

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// GET /tools?names= costs in proportion to the tools plus the names, not
// to their product: each tool looked its name up in the whole list, so
// 450,000 names took 0.3 s of CPU over 514 tools. With the same names, a
// registry of 1,000 tools lists about as fast as one of 10.
func TestListByNamesIsLinear(t *testing.T) {
	registryOf := func(n int) *Registry {
		var tools []*Tool
		for i := range n {
			tools = append(tools, &Tool{Definition: Definition{Name: fmt.Sprintf("many__t%04d", i), Description: "a tool", Tier: ReadOnly,
				Parameters: json.RawMessage(`{"type":"object"}`)}, Handler: Func(nil)})
		}
		r, err := New(Defaults{Timeout: time.Second}, tools...)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	names := []string{"many__t0003", "many__t0999"}
	for i := range 100_000 {
		names = append(names, fmt.Sprintf("other__n%d", i))
	}
	small, large := registryOf(10), registryOf(1000)
	took := func(r *Registry, want int) time.Duration {
		best := time.Duration(1 << 62)
		for range 3 {
			start := time.Now()
			if got := len(r.List(nil, Filter{Names: names})); got != want {
				t.Fatalf("%d tools listed, want %d", got, want)
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	s, l := took(small, 1), took(large, 2)
	if l > 10*s {
		t.Errorf("listing %d names took %s over 1,000 tools and %s over 10: the cost grows with tools × names", len(names), l, s)
	}
}
