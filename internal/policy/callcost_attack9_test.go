package policy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// rules returns a policy of n allow rules on text__*, each with condition.
func rules(n int, condition string) string {
	var b strings.Builder
	b.WriteString(head)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "    - name: r%d\n      tools: [\"text__*\"]\n      condition: '%s'\n      decision: allow\n", i, condition)
	}
	return b.String()
}

// costly costs about 8,000 for a text of 30 characters: under a limit of
// 10,000 for one condition.
const costly = `args.text.split("").exists(c, args.text.split("").exists(d, c + d == "zz"))`

// TestCallCostIsBounded: the conditions of one call together cost at most
// the call's limit (four conditions at their limit by default) and one
// more condition; the rules left are not evaluated and the call is
// denied, naming the limit. 500 rules each under the limit took 42 s.
func TestCallCostIsBounded(t *testing.T) {
	args := `{"text":"` + strings.Repeat("a", 30) + `"}`
	p, err := load(t, "p.yaml", rules(50, costly), policy.Options{CostLimit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	d, err := p.Decide(t.Context(), input("text__count", registry.ReadOnly, args))
	if err != nil {
		t.Fatal(err)
	}
	if d.Effect != registry.Deny || d.Rule == "p/r1" || d.Rule == "p/r50" ||
		!strings.HasPrefix(d.Reason, "the rule's condition was not evaluated: the policy's conditions had cost ") ||
		!strings.HasSuffix(d.Reason, ", and one call's may cost 40000 in all; smaller arguments cost less to check") {
		t.Errorf("got %+v, want a denial by a rule between the first and the last, naming the call's limit", d)
	}

	// The call's limit is its own option; it is checked before each
	// condition, so the first is always evaluated.
	p, err = load(t, "p.yaml", rules(50, costly), policy.Options{CostLimit: 10_000, CallCostLimit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := p.Decide(t.Context(), input("text__count", registry.ReadOnly, args)); d.Effect != registry.Deny || d.Rule != "p/r2" ||
		!strings.Contains(d.Reason, "one call's may cost 1 in all") {
		t.Errorf("call limit 1: %+v, want a denial by p/r2", d)
	}

	// Many cheap conditions are far from the limit, and a condition that
	// matches still decides.
	p = mustLoad(t, rules(500, `args.text.size() > 1000`)+`    - name: last
      tools: ["text__*"]
      condition: args.text.startsWith("aaa")
      decision: ask
`)
	if d, _ := p.Decide(t.Context(), input("text__count", registry.ReadOnly, args)); d.Effect != registry.Ask || d.Rule != "p/last" {
		t.Errorf("cheap rules: %+v, want ask by p/last", d)
	}
}
