package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// load decodes the Policy resources of one YAML file the way the main
// program does, and builds a policy from them.
func load(t *testing.T, file, text string, o policy.Options) (*policy.Policy, error) {
	t.Helper()
	docs := decode(t, file, text)
	return policy.New(docs, o)
}

func decode(t *testing.T, file, text string) []policy.Document {
	t.Helper()
	rs, err := config.Parse(file, []byte(text))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	var docs []policy.Document
	for _, r := range rs {
		var spec policy.Spec
		if err := r.Decode(&spec); err != nil {
			t.Fatalf("decode: %v", err)
		}
		docs = append(docs, policy.Document{Name: r.Metadata.Name, Source: r.Source(), Spec: spec})
	}
	return docs
}

func mustLoad(t *testing.T, text string) *policy.Policy {
	t.Helper()
	p, err := load(t, "policies.yaml", text, policy.Options{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return p
}

const policies = `apiVersion: toolsvc/v1
kind: Policy
metadata: {name: base}
spec:
  rules:
    - name: no-etc
      tools: ["fs__*"]
      condition: 'has(args.path) && args.path.startsWith("/etc")'
      decision: deny
      reason: system files are off limits
      match:
        - tool: fs__read
          args: {path: /etc/passwd}
      notMatch:
        - args: {path: notes.txt}
        - tool: http__get
          args: {path: /etc/passwd}
    - name: shell-ask
      tools: ["shell__exec"]
      decision: ask
      reason: runs programs
    - name: shell-safe
      tools: ["shell__exec"]
      condition: 'args.command in ["ls", "pwd"]'
      decision: allow
      match:
        - args: {command: ls}
      notMatch:
        - args: {command: rm -rf /}
    - name: big-writes
      tools: ["fs__write"]
      condition: 'size(args.content) > 10'
      decision: ask
    - name: admins-http
      tools: ["http__*"]
      condition: '"admin" in caller.scopes'
      decision: allow
      match:
        - args: {}
          caller: {id: ops, scopes: [call, admin]}
    - name: untrusted-agent-http
      tools: ["http__*"]
      condition: context.agentName == "untrusted"
      decision: deny
      match:
        - tool: http__post
          args: {url: "https://example.com"}
          context: {agentName: untrusted}
    - name: big-limits
      tools: ["data__*"]
      condition: has(args.limit) && args.limit > 100
      decision: deny
      notMatch:
        - args: {limit: 100}
        - args: {}
    - name: own-workspace
      tools: ["fs__delete"]
      condition: context.instanceKey != caller.id
      decision: deny
      reason: delete only in your own workspace
    - name: privileged-by-tier
      tools: ["*"]
      condition: tool.tier == "privileged" && tool.name.startsWith("custom__")
      decision: deny
      match:
        - tool: custom__deploy
          tier: privileged
---
apiVersion: toolsvc/v1
kind: Policy
metadata: {name: defaults}
spec:
  tierDefaults:
    side_effecting: ask
    read_only: allow
---
apiVersion: toolsvc/v1
kind: Policy
metadata: {name: looser}
spec:
  tierDefaults:
    side_effecting: allow
    privileged: deny
`

func input(tool string, tier registry.Tier, args string) *registry.PolicyInput {
	return &registry.PolicyInput{
		Tool:      &registry.Definition{Name: tool, Tier: tier},
		Arguments: json.RawMessage(args),
		Caller:    &registry.Caller{ID: "alice", Scopes: []registry.Scope{registry.ScopeCall}},
	}
}

func TestDecide(t *testing.T) {
	p := mustLoad(t, policies)
	admin := &registry.Caller{ID: "ops", Scopes: []registry.Scope{registry.ScopeCall, registry.ScopeAdmin}}
	cases := []struct {
		name   string
		in     *registry.PolicyInput
		effect registry.Effect
		rule   string
		reason string
	}{
		{"glob and condition deny", input("fs__read", registry.ReadOnly, `{"path":"/etc/shadow"}`), registry.Deny, "base/no-etc", "system files are off limits"},
		{"condition false falls to the tier default", input("fs__read", registry.ReadOnly, `{"path":"notes.txt"}`), registry.Allow, "tier-default:read_only", ""},
		{"glob does not match", input("json__query", registry.ReadOnly, `{"path":"/etc/x"}`), registry.Allow, "tier-default:read_only", ""},
		{"strictest wins: ask over allow", input("shell__exec", registry.Privileged, `{"command":"ls"}`), registry.Ask, "base/shell-ask", "runs programs"},
		{"rule without a condition", input("shell__exec", registry.Privileged, `{"command":"rm"}`), registry.Ask, "base/shell-ask", "runs programs"},
		{"size of a string argument", input("fs__write", registry.SideEffecting, `{"path":"a","content":"0123456789abc"}`), registry.Ask, "base/big-writes", ""},
		{"stricter of two tier defaults", input("fs__write", registry.SideEffecting, `{"path":"a","content":"short"}`), registry.Ask, "tier-default:side_effecting", ""},
		{"CEL on caller scopes", &registry.PolicyInput{Tool: &registry.Definition{Name: "http__get", Tier: registry.SideEffecting}, Arguments: json.RawMessage(`{"url":"https://x"}`), Caller: admin}, registry.Allow, "base/admins-http", ""},
		{"strictest wins: deny over allow", &registry.PolicyInput{Tool: &registry.Definition{Name: "http__get", Tier: registry.SideEffecting}, Arguments: json.RawMessage(`{}`), Caller: admin, Context: registry.CallContext{AgentName: "untrusted"}}, registry.Deny, "base/untrusted-agent-http", ""},
		{"integer comparison", input("data__parse", registry.ReadOnly, `{"limit":101}`), registry.Deny, "base/big-limits", ""},
		{"float against an int literal", input("data__parse", registry.ReadOnly, `{"limit":100.5}`), registry.Deny, "base/big-limits", ""},
		{"under the limit", input("data__parse", registry.ReadOnly, `{"limit":100}`), registry.Allow, "tier-default:read_only", ""},
		{"optional argument absent", input("data__parse", registry.ReadOnly, `{}`), registry.Allow, "tier-default:read_only", ""},
		{"context against caller", &registry.PolicyInput{Tool: &registry.Definition{Name: "fs__delete", Tier: registry.SideEffecting}, Arguments: json.RawMessage(`{"path":"x"}`), Caller: &registry.Caller{ID: "alice"}, Context: registry.CallContext{InstanceKey: "bob"}}, registry.Deny, "base/own-workspace", "delete only in your own workspace"},
		{"context matches caller", &registry.PolicyInput{Tool: &registry.Definition{Name: "fs__delete", Tier: registry.SideEffecting}, Arguments: json.RawMessage(`{"path":"x"}`), Caller: &registry.Caller{ID: "alice"}, Context: registry.CallContext{InstanceKey: "alice"}}, registry.Ask, "tier-default:side_effecting", ""},
		{"tool variables", input("custom__deploy", registry.Privileged, `{}`), registry.Deny, "base/privileged-by-tier", ""},
		{"stricter privileged default", input("custom_x__run", registry.Privileged, `{}`), registry.Deny, "tier-default:privileged", ""},
		{"arguments as a string are not an object", input("data__parse", registry.ReadOnly, `"{\"limit\":500}"`), registry.Deny, "base/big-limits", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := p.Decide(t.Context(), tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if d.Effect != tc.effect || d.Rule != tc.rule {
				t.Fatalf("Decide = %s by %s (%s), want %s by %s", d.Effect, d.Rule, d.Reason, tc.effect, tc.rule)
			}
			if tc.reason != "" && d.Reason != tc.reason {
				t.Errorf("reason = %q, want %q", d.Reason, tc.reason)
			}
		})
	}
}

func TestTierDefaults(t *testing.T) {
	cases := []struct {
		name string
		docs string
		want registry.TierDefaults
	}{
		{"contract defaults", "", registry.DefaultTierEffects()},
		{"one policy may loosen a tier", "privileged: allow", registry.TierDefaults{registry.ReadOnly: registry.Allow, registry.SideEffecting: registry.Allow, registry.Privileged: registry.Allow}},
		{"conflicts take the stricter", "privileged: allow\n---\nprivileged: deny\nread_only: ask\n---\nread_only: allow",
			registry.TierDefaults{registry.ReadOnly: registry.Ask, registry.SideEffecting: registry.Allow, registry.Privileged: registry.Deny}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var docs []string
			if tc.docs != "" {
				for i, d := range strings.Split(tc.docs, "\n---\n") {
					docs = append(docs, fmt.Sprintf("apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: p%d}\nspec:\n  tierDefaults:\n    %s\n",
						i, strings.ReplaceAll(d, "\n", "\n    ")))
				}
			}
			p := mustLoad(t, strings.Join(docs, "---\n"))
			for _, tier := range registry.Tiers() {
				if got := p.TierDefaults()[tier]; got != tc.want[tier] {
					t.Errorf("%s: %s, want %s", tier, got, tc.want[tier])
				}
				d, _ := p.Decide(t.Context(), input("x__y", tier, `{}`))
				if d.Effect != tc.want[tier] || d.Rule != "tier-default:"+string(tier) {
					t.Errorf("Decide(%s) = %+v, want %s by the tier default", tier, d, tc.want[tier])
				}
			}
		})
	}
}

func TestNoPolicyIsTheContract(t *testing.T) {
	p, err := policy.New(nil, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tier := range registry.Tiers() {
		d, _ := p.Decide(t.Context(), input("a__b", tier, `{}`))
		if d.Effect != registry.DefaultTierEffects()[tier] {
			t.Errorf("%s = %s, want %s", tier, d.Effect, registry.DefaultTierEffects()[tier])
		}
	}
}

const head = "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n  rules:\n"

func TestEvaluationErrorsDeny(t *testing.T) {
	p := mustLoad(t, head+`    - name: count
      tools: ["*"]
      condition: args.count > 3
      decision: allow
`)
	d, err := p.Decide(t.Context(), input("fs__read", registry.ReadOnly, `{"path":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Effect != registry.Deny || d.Rule != "p/count" || !strings.Contains(d.Reason, "has(args.") {
		t.Errorf("missing key: %+v, want a deny naming the rule and suggesting has()", d)
	}
	d, _ = p.Decide(t.Context(), input("fs__read", registry.ReadOnly, `{"count":"many"}`))
	if d.Effect != registry.Deny {
		t.Errorf("type mismatch: %+v, want deny", d)
	}
	d, _ = p.Decide(t.Context(), input("fs__read", registry.ReadOnly, `{"count":4}`))
	if d.Effect != registry.Allow || d.Rule != "p/count" {
		t.Errorf("good args: %+v, want allow by p/count", d)
	}
}

func TestCostLimit(t *testing.T) {
	text := head + `    - name: quadratic
      tools: ["*"]
      condition: args.items.all(x, args.items.all(y, x + y >= 0))
      decision: allow
`
	items := make([]string, 200)
	for i := range items {
		items[i] = fmt.Sprint(i)
	}
	args := `{"items":[` + strings.Join(items, ",") + `]}`

	limited, err := load(t, "p.yaml", text, policy.Options{CostLimit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	d, err := limited.Decide(t.Context(), input("a__b", registry.ReadOnly, args))
	if err != nil {
		t.Fatal(err)
	}
	if d.Effect != registry.Deny || !strings.Contains(d.Reason, "cost limit") {
		t.Errorf("over the cost limit: %+v, want deny naming the cost limit", d)
	}
	d, _ = limited.Decide(t.Context(), input("a__b", registry.ReadOnly, `{"items":[1,2]}`))
	if d.Effect != registry.Allow {
		t.Errorf("small input under the limit: %+v, want allow", d)
	}
	generous, err := load(t, "p.yaml", text, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := generous.Decide(t.Context(), input("a__b", registry.ReadOnly, args)); d.Effect != registry.Allow {
		t.Errorf("under the default limit: %+v, want allow", d)
	}
}

func TestCanceledContextDenies(t *testing.T) {
	p := mustLoad(t, head+`    - name: loop
      tools: ["*"]
      condition: args.items.all(x, args.items.all(y, x + y >= 0))
      decision: allow
`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	items := strings.Repeat("1,", 300) + "1"
	d, err := p.Decide(ctx, input("a__b", registry.ReadOnly, `{"items":[`+items+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Effect != registry.Deny {
		t.Errorf("canceled evaluation: %+v, want deny", d)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name string
		text string
		want []string
	}{
		{"non-boolean condition", head + "    - name: r\n      tools: [\"*\"]\n      condition: args.path\n      decision: deny\n",
			[]string{"p.yaml:6", `rule 1 "r"`, "boolean", "dyn"}},
		{"integer condition", head + "    - name: r\n      tools: [\"*\"]\n      condition: size(args)\n      decision: deny\n",
			[]string{"p.yaml:6", "boolean", "int"}},
		{"syntax error", head + "    - name: r\n      tools: [\"*\"]\n      condition: args.path.startsWith(\n      decision: deny\n",
			[]string{"p.yaml:6", "does not compile"}},
		{"undeclared variable", head + "    - name: r\n      tools: [\"*\"]\n      condition: request.x == 1\n      decision: deny\n",
			[]string{"p.yaml:6", "undeclared reference"}},
		{"bad decision", head + "    - name: r\n      tools: [\"*\"]\n      decision: maybe\n",
			[]string{"p.yaml:6", `decision "maybe"`}},
		{"no tools", head + "    - name: r\n      decision: deny\n",
			[]string{"p.yaml:6", "no tools"}},
		{"bad glob", head + "    - name: r\n      tools: [\"fs__[\"]\n      decision: deny\n",
			[]string{"p.yaml:6", "malformed"}},
		{"no name", head + "    - tools: [\"*\"]\n      decision: deny\n",
			[]string{"p.yaml:6", "needs a name"}},
		{"duplicate rule", head + "    - name: r\n      tools: [\"*\"]\n      decision: deny\n    - name: r\n      tools: [\"*\"]\n      decision: allow\n",
			[]string{"p.yaml:9", "duplicate rule name p/r", "p.yaml:6"}},
		{"callerMayApprove on a deny rule", head + "    - name: r\n      tools: [\"*\"]\n      decision: deny\n      callerMayApprove: true\n",
			[]string{"p.yaml:6", `rule 1 "r"`, "callerMayApprove is set, but the decision is deny", "decision: ask"}},
		{"callerMayApprove on an allow rule", head + "    - name: r\n      tools: [\"*\"]\n      decision: allow\n      callerMayApprove: true\n",
			[]string{"p.yaml:6", "callerMayApprove is set, but the decision is allow"}},
		{"bad tier default", "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n  tierDefaults:\n    dangerous: deny\n",
			[]string{"p.yaml:1", `unknown tier "dangerous"`}},
		{"bad tier default effect", "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: p}\nspec:\n  tierDefaults:\n    privileged: block\n",
			[]string{"p.yaml:1", `unknown decision "block"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, "p.yaml", tc.text, policy.Options{})
			if err == nil {
				t.Fatal("load succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestFailingExamples(t *testing.T) {
	// Line numbers below count from 1 at "apiVersion".
	text := `apiVersion: toolsvc/v1
kind: Policy
metadata: {name: guard}
spec:
  rules:
    - name: ok
      tools: ["*"]
      decision: allow
    - name: no-force-push
      tools: ["shell__exec"]
      condition: has(args.command) && args.command.contains("push --force")
      decision: deny
      match:
        - args: {command: "git push --force"}
        - args: {command: "git push -f"}
`
	_, err := load(t, "policies/guard.yaml", text, policy.Options{})
	if err == nil {
		t.Fatal("a failing match example loaded")
	}
	for _, w := range []string{"policies/guard.yaml:9", `Policy "guard" rule 2 "no-force-push"`, "match example 2 at line 15", "does not match"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}

	cases := []struct {
		name, rule string
		want       []string
	}{
		{"notMatch that matches", `    - name: r
      tools: ["fs__*"]
      condition: args.path.startsWith("/")
      decision: deny
      notMatch:
        - args: {path: /etc/passwd}
`, []string{"p.yaml:6", "notMatch example 1 at line 11", "the rule matches"}},
		{"tool outside the globs", `    - name: r
      tools: ["fs__*"]
      decision: deny
      match:
        - tool: http__get
          args: {}
`, []string{"p.yaml:6", "match example 1 at line 10", "http__get does not match"}},
		{"example relying on an evaluation error", `    - name: r
      tools: ["*"]
      condition: args.force == true
      decision: deny
      notMatch:
        - args: {path: x}
`, []string{"p.yaml:6", "notMatch example 1", "fails to evaluate", "has(args."}},
		{"caller and context in examples", `    - name: r
      tools: ["*"]
      condition: '"approve" in caller.scopes && context.turnId == "t1"'
      decision: allow
      match:
        - args: {}
          caller: {id: x, scopes: [approve]}
          context: {turnId: t2}
`, []string{"p.yaml:6", "match example 1 at line 11", "condition is false"}},
		{"unknown tier in an example", `    - name: r
      tools: ["*"]
      decision: allow
      match:
        - args: {}
          tier: dangerous
`, []string{"p.yaml:6", `unknown tier "dangerous"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, "p.yaml", head+tc.rule, policy.Options{})
			if err == nil {
				t.Fatal("load succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestUnknownFieldsAreRefusedWithTheirLine(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{"    - name: r\n      tools: [\"*\"]\n      conditon: x\n      decision: deny\n", "line 8: field conditon not found"},
		{"    - name: r\n      tools: [\"*\"]\n      decision: deny\n      match:\n        - args: {}\n          tol: x\n", "line 11: field tol not found"},
		{"    - name: r\n      tools: [\"*\"]\n      decision: deny\n      match:\n        - caller: {name: x}\n", "line 10: field name not found"},
		{"    - name: r\n      tools: [\"*\"]\n      decision: deny\n      match:\n        - context: {instancekey: x}\n", "line 10: field instancekey not found"},
	} {
		rs, err := config.Parse("p.yaml", []byte(head+tc.rule))
		if err != nil {
			t.Fatal(err)
		}
		var spec policy.Spec
		err = rs[0].Decode(&spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "p.yaml") {
			t.Errorf("Decode = %v, want an error from p.yaml containing %q", err, tc.want)
		}
	}
}

func TestDecodedLines(t *testing.T) {
	docs := decode(t, "p.yaml", policies)
	r := docs[0].Spec.Rules[1]
	if r.Name != "shell-ask" || r.Line != 18 {
		t.Errorf("rule %q at line %d, want shell-ask at 18", r.Name, r.Line)
	}
	if ex := docs[0].Spec.Rules[0].NotMatch[1]; ex.Line != 16 || ex.Tool != "http__get" {
		t.Errorf("example at line %d (%+v), want line 16", ex.Line, ex)
	}
}

func TestDecideIsSafeForConcurrentUse(t *testing.T) {
	p := mustLoad(t, policies)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				path := "notes.txt"
				want := registry.Allow
				if (i+j)%2 == 0 {
					path, want = "/etc/hosts", registry.Deny
				}
				d, err := p.Decide(context.Background(), input("fs__read", registry.ReadOnly, `{"path":"`+path+`"}`))
				if err != nil || d.Effect != want {
					t.Errorf("Decide(%s) = %+v, %v; want %s", path, d, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestDecideNeedsATool(t *testing.T) {
	p := mustLoad(t, "")
	if _, err := p.Decide(t.Context(), &registry.PolicyInput{}); err == nil {
		t.Error("Decide without a tool succeeded")
	}
}

func BenchmarkDecide(b *testing.B) {
	rs, err := config.Parse("p.yaml", []byte(policies))
	if err != nil {
		b.Fatal(err)
	}
	var docs []policy.Document
	for _, r := range rs {
		var spec policy.Spec
		if err := r.Decode(&spec); err != nil {
			b.Fatal(err)
		}
		docs = append(docs, policy.Document{Name: r.Metadata.Name, Source: r.Source(), Spec: spec})
	}
	p, err := policy.New(docs, policy.Options{})
	if err != nil {
		b.Fatal(err)
	}
	in := input("fs__read", registry.ReadOnly, `{"path":"notes/today.md","offset":0,"limit":4096}`)
	for b.Loop() {
		if d, _ := p.Decide(context.Background(), in); d.Effect != registry.Allow {
			b.Fatal(d)
		}
	}
}

// TestCallerMayApprove: an ask rule with callerMayApprove says so in its
// decision; when another matching ask rule keeps the call to approvers,
// that rule wins; a deny still beats both.
func TestCallerMayApprove(t *testing.T) {
	p := mustLoad(t, `apiVersion: toolsvc/v1
kind: Policy
metadata: {name: p}
spec:
  rules:
    - name: writes
      tools: ["fs__write"]
      decision: ask
      callerMayApprove: true
      reason: writes a file
    - name: config
      tools: ["fs__write"]
      condition: 'args.path.startsWith("etc/")'
      decision: ask
    - name: secrets
      tools: ["fs__write"]
      condition: 'args.path.endsWith(".key")'
      decision: deny
`)
	cases := []struct {
		path string
		want registry.Decision
	}{
		{"notes.txt", registry.Decision{Effect: registry.Ask, Rule: "p/writes", Reason: "writes a file", CallerMayApprove: true}},
		{"etc/app.yaml", registry.Decision{Effect: registry.Ask, Rule: "p/config"}},
		{"etc/app.key", registry.Decision{Effect: registry.Deny, Rule: "p/secrets"}},
	}
	for _, tc := range cases {
		d, err := p.Decide(context.Background(), &registry.PolicyInput{
			Tool:      &registry.Definition{Name: "fs__write", Tier: registry.SideEffecting},
			Arguments: json.RawMessage(fmt.Sprintf(`{"path":%q}`, tc.path)), Caller: &registry.Caller{ID: "c"},
		})
		if err != nil || d != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.path, d, err, tc.want)
		}
	}
	// A tier default never lets the caller approve.
	d, err := p.Decide(context.Background(), &registry.PolicyInput{
		Tool: &registry.Definition{Name: "shell__exec", Tier: registry.Privileged}, Caller: &registry.Caller{ID: "c"}})
	if err != nil || d.Effect != registry.Ask || d.CallerMayApprove {
		t.Errorf("tier default: %+v %v", d, err)
	}
}

// TestCallerMayApproveMustBeABoolean: a value that is not true or false
// is refused when the file is decoded, with its line.
func TestCallerMayApproveMustBeABoolean(t *testing.T) {
	rs, err := config.Parse("p.yaml", []byte(head+"    - name: r\n      tools: [\"*\"]\n      decision: ask\n      callerMayApprove: sometimes\n"))
	if err != nil {
		t.Fatal(err)
	}
	var spec policy.Spec
	err = rs[0].Decode(&spec)
	if err == nil || !strings.Contains(err.Error(), "line 9") || !strings.Contains(err.Error(), "sometimes") {
		t.Errorf("decode: %v", err)
	}
}
