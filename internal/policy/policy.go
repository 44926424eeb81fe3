// Package policy decides whether a call may run, and who is calling.
//
// A Policy is built from the specs of kind: Policy resources: tier
// defaults, and rules that match tool names by glob, may carry a CEL
// condition over the call's args, caller, context and tool, and decide
// allow, ask or deny. The strictest matching rule wins (deny > ask >
// allow; between asks, one only approvers decide over one with
// callerMayApprove); with no match the tier default applies. Conditions are compiled
// and type-checked once, at load, with a cost limit at evaluation, and
// the conditions of one call share a budget; a condition that fails to
// evaluate, or that the budget leaves unevaluated, denies. Each rule may carry match and
// notMatch examples that are checked at load, so a rule that does not do
// what its author meant stops start-up with the file, line and rule.
//
// An Authenticator is built from kind: Caller resources and the API key,
// and maps a bearer token to its caller by comparing SHA-256 digests in
// constant time.
package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"strconv"
	"strings"

	"cel.dev/cel-go/cel"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Spec is the spec of a kind: Policy resource.
type Spec struct {
	// TierDefaults sets the effect of a tier when no rule matches; a tier
	// left out keeps the contract's default (read_only and side_effecting
	// allow, privileged asks). When several policies set a tier, the
	// strictest wins.
	TierDefaults map[registry.Tier]registry.Effect `yaml:"tierDefaults,omitempty"`
	// Rules are evaluated for every call; the strictest match wins.
	Rules []Rule `yaml:"rules,omitempty"`
}

// Rule is one policy rule.
type Rule struct {
	// Name identifies the rule in decisions ("policy/rule"), audit and errors.
	Name string `yaml:"name"`
	// Tools are tool-name globs (path.Match syntax, e.g. "shell__*"); the
	// rule applies to a call whose tool matches one. Use ["*"] for all.
	Tools []string `yaml:"tools"`
	// Condition, when set, is a CEL expression of type bool over args
	// (the call's arguments object), caller (id, scopes, maxTier, tools),
	// context (instanceKey, agentName, turnId) and tool (name, tier); the
	// rule applies only when it is true. Test optional arguments with
	// has(args.x) first: a condition that fails to evaluate denies.
	Condition string `yaml:"condition,omitempty"`
	// Decision is allow, ask or deny.
	Decision registry.Effect `yaml:"decision"`
	// Reason is told to the model (deny) or the approver (ask).
	Reason string `yaml:"reason,omitempty"`
	// CallerMayApprove, on an ask rule, lets the calling user approve or
	// decline the call themselves: an MCP client that can answer an
	// elicitation is asked to confirm that exact call, and the answer
	// decides the approval request. Approvers can still decide it with
	// POST /approvals/{id}. Off by default: only approvers decide.
	CallerMayApprove bool `yaml:"callerMayApprove,omitempty"`
	// Match are calls the rule must apply to, and NotMatch calls it must
	// not apply to; both are checked when the policy loads.
	Match    []Example `yaml:"match,omitempty"`
	NotMatch []Example `yaml:"notMatch,omitempty"`
	// Line is where the rule starts in its file; decoding from YAML sets it.
	Line int `yaml:"-"`
}

// Example is a call a rule is checked against at load.
type Example struct {
	// Tool is the tool name; when empty only the condition is checked.
	Tool string        `yaml:"tool,omitempty"`
	Tier registry.Tier `yaml:"tier,omitempty"`
	// Args is the arguments object.
	Args    map[string]any  `yaml:"args,omitempty"`
	Caller  *ExampleCaller  `yaml:"caller,omitempty"`
	Context *ExampleContext `yaml:"context,omitempty"`
	// Line is where the example starts in its file; decoding from YAML sets it.
	Line int `yaml:"-"`
}

// ExampleCaller is the caller of an example call.
type ExampleCaller struct {
	ID      string           `yaml:"id,omitempty"`
	Scopes  []registry.Scope `yaml:"scopes,omitempty"`
	MaxTier registry.Tier    `yaml:"maxTier,omitempty"`
	Tools   []string         `yaml:"tools,omitempty"`
	// Issuer, Subject and Claims make the example a token caller.
	Issuer  string         `yaml:"issuer,omitempty"`
	Subject string         `yaml:"subject,omitempty"`
	Claims  map[string]any `yaml:"claims,omitempty"`
}

// ExampleContext is the context of an example call.
type ExampleContext struct {
	InstanceKey string `yaml:"instanceKey,omitempty"`
	AgentName   string `yaml:"agentName,omitempty"`
	TurnID      string `yaml:"turnId,omitempty"`
}

// Document is one decoded kind: Policy resource.
type Document struct {
	// Name is the resource's metadata.name; decisions name rules
	// "Name/rule".
	Name string
	// Source is where the resource starts ("file.yaml:12", from
	// config.Resource.Source), for errors.
	Source string
	Spec   Spec
}

// DefaultCostLimit bounds the evaluation cost of one condition unless
// Options say otherwise: enough to scan arguments of a few hundred
// kilobytes, far from what a runaway comprehension costs.
const DefaultCostLimit = 1_000_000

// callCostLimits is how many conditions at their limit one call's
// conditions may cost together unless Options say otherwise. Every rule
// whose tools match a call is evaluated, so without a bound a call's cost
// grew with the rules: 500 rules each under the limit took 42 s for one
// call, past its timeout. A condition at the default limit takes about
// 0.1 s.
const callCostLimits = 4

// Options configure a Policy.
type Options struct {
	// CostLimit bounds the runtime cost of evaluating one condition
	// (cel.CostLimit); 0 means DefaultCostLimit. A condition over the limit
	// denies the call.
	CostLimit uint64
	// CallCostLimit bounds the cost of all the conditions evaluated for
	// one call; 0 means 4 times CostLimit. It is checked before each
	// condition, so the conditions of a call cost at most CallCostLimit
	// plus one CostLimit; once it is spent, the call is denied.
	CallCostLimit uint64
}

// Policy implements registry.Policy. It is immutable once built and safe
// for concurrent use.
type Policy struct {
	rules     []*rule
	defaults  registry.TierDefaults
	callLimit uint64 // Options.CallCostLimit
}

var _ registry.Policy = (*Policy)(nil)

type rule struct {
	name     string // "policy/rule"
	tools    []string
	effect   registry.Effect
	reason   string
	byCaller bool        // callerMayApprove
	prg      cel.Program // nil without a condition
	position string      // "file:line: Policy "p" rule 2 "r"", for errors
}

// New builds a policy from docs, in order: rules concatenate, tier
// defaults merge to the strictest. Conditions are compiled and checked,
// and every rule's examples run; the first problem is returned as an error
// that names the file, line, policy and rule.
func New(docs []Document, o Options) (*Policy, error) {
	limit := o.CostLimit
	if limit == 0 {
		limit = DefaultCostLimit
	}
	env, err := newEnv()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	p := &Policy{defaults: registry.DefaultTierEffects(), callLimit: o.CallCostLimit}
	if p.callLimit == 0 {
		p.callLimit = callCostLimits * limit
		if p.callLimit/callCostLimits != limit {
			p.callLimit = math.MaxUint64 // a limit so large it overflowed
		}
	}
	set := map[registry.Tier]bool{}
	names := map[string]string{}
	for _, d := range docs {
		if d.Name == "" {
			return nil, fmt.Errorf("%s: Policy has no name", d.Source)
		}
		for tier, eff := range d.Spec.TierDefaults {
			if !tier.Valid() {
				return nil, fmt.Errorf("%s: Policy %q: tierDefaults: unknown tier %q (want read_only, side_effecting or privileged)", d.Source, d.Name, tier)
			}
			if eff.Strictness() < 0 {
				return nil, fmt.Errorf("%s: Policy %q: tierDefaults.%s: unknown decision %q (want allow, ask or deny)", d.Source, d.Name, tier, eff)
			}
			if !set[tier] || eff.Strictness() > p.defaults[tier].Strictness() {
				p.defaults[tier] = eff
			}
			set[tier] = true
		}
		for i := range d.Spec.Rules {
			r, err := compileRule(env, &d, i, limit)
			if err != nil {
				return nil, err
			}
			if prev, dup := names[r.name]; dup {
				return nil, fmt.Errorf("%s: duplicate rule name %s (first at %s)", r.position, r.name, prev)
			}
			names[r.name] = r.position
			p.rules = append(p.rules, r)
		}
	}
	return p, nil
}

// TierDefaults returns the merged tier defaults.
func (p *Policy) TierDefaults() registry.TierDefaults {
	out := registry.TierDefaults{}
	for k, v := range p.defaults {
		out[k] = v
	}
	return out
}

// position names a rule for errors: the rule's own line when decoding
// recorded it, else the resource's.
func position(d *Document, i int, r *Rule) string {
	src := d.Source
	if r.Line > 0 {
		src = withLine(d.Source, r.Line)
	}
	return fmt.Sprintf("%s: Policy %q rule %d %q", src, d.Name, i+1, r.Name)
}

// withLine replaces the line of a "file:line" source.
func withLine(source string, line int) string {
	if i := strings.LastIndexByte(source, ':'); i >= 0 {
		if _, err := strconv.Atoi(source[i+1:]); err == nil {
			source = source[:i]
		}
	}
	return fmt.Sprintf("%s:%d", source, line)
}

func compileRule(env *cel.Env, d *Document, i int, limit uint64) (*rule, error) {
	spec := &d.Spec.Rules[i]
	r := &rule{
		name:     d.Name + "/" + spec.Name,
		tools:    spec.Tools,
		effect:   spec.Decision,
		reason:   spec.Reason,
		byCaller: spec.CallerMayApprove,
		position: position(d, i, spec),
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", r.position, fmt.Sprintf(format, args...))
	}
	if spec.Name == "" || strings.ContainsAny(spec.Name, "/ \t\n") {
		return nil, fail("a rule needs a name without spaces or slashes")
	}
	if r.effect.Strictness() < 0 {
		return nil, fail("decision %q is not allow, ask or deny", spec.Decision)
	}
	if spec.CallerMayApprove && r.effect != registry.Ask {
		return nil, fail("callerMayApprove is set, but the decision is %s: only an ask rule sends a call for approval, so set decision: ask or drop callerMayApprove", spec.Decision)
	}
	if len(spec.Tools) == 0 {
		return nil, fail(`no tools; list tool-name globs, or ["*"] for every tool`)
	}
	for _, g := range spec.Tools {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fail("tool glob %q is malformed (path.Match syntax: *, ?, [a-z])", g)
		}
	}
	if strings.TrimSpace(spec.Condition) != "" {
		prg, err := compileCondition(env, spec.Condition, limit)
		if err != nil {
			return nil, fail("%v", err)
		}
		r.prg = prg
	}
	for j := range spec.Match {
		if err := r.checkExample(&spec.Match[j], j, true); err != nil {
			return nil, err
		}
	}
	for j := range spec.NotMatch {
		if err := r.checkExample(&spec.NotMatch[j], j, false); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// checkExample runs one example through the rule.
func (r *rule) checkExample(ex *Example, j int, wantMatch bool) error {
	kind := "match"
	if !wantMatch {
		kind = "notMatch"
	}
	where := fmt.Sprintf("%s, %s example %d", r.position, kind, j+1)
	if ex.Line > 0 {
		where += fmt.Sprintf(" at line %d", ex.Line)
	}
	raw, err := json.Marshal(orEmpty(ex.Args))
	if err != nil {
		return fmt.Errorf("%s: args are not a JSON object: %v", where, err)
	}
	if ex.Tier != "" && !ex.Tier.Valid() {
		return fmt.Errorf("%s: unknown tier %q", where, ex.Tier)
	}
	in := &registry.PolicyInput{
		Tool:      &registry.Definition{Name: ex.Tool, Tier: ex.Tier},
		Arguments: raw,
		Caller:    &registry.Caller{ID: "example"},
	}
	if c := ex.Caller; c != nil {
		in.Caller = &registry.Caller{ID: c.ID, Scopes: c.Scopes, MaxTier: c.MaxTier, Tools: c.Tools, Issuer: c.Issuer, Subject: c.Subject, Claims: c.Claims}
	}
	if c := ex.Context; c != nil {
		in.Context = registry.CallContext{InstanceKey: c.InstanceKey, AgentName: c.AgentName, TurnID: c.TurnID}
	}
	toolMatches := ex.Tool == "" || registry.MatchAny(r.tools, ex.Tool)
	condTrue, evalErr := true, error(nil)
	if r.prg != nil {
		vars, err := variables(in)
		if err != nil {
			return fmt.Errorf("%s: %v", where, err)
		}
		condTrue, _, evalErr = r.eval(context.Background(), vars)
	}
	switch {
	case evalErr != nil:
		// At run time this would deny; an example must not rely on that.
		return fmt.Errorf("%s: the condition fails to evaluate (%v), and a call like this would be denied", where, evalErr)
	case wantMatch && !toolMatches:
		return fmt.Errorf("%s: tool %s does not match the rule's tools %v", where, ex.Tool, r.tools)
	case wantMatch && !condTrue:
		return fmt.Errorf("%s: the rule does not match: its condition is false for this example", where)
	case !wantMatch && toolMatches && condTrue:
		return fmt.Errorf("%s: the rule matches, but the example says it must not", where)
	}
	return nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// Decide implements registry.Policy.
func (p *Policy) Decide(ctx context.Context, in *registry.PolicyInput) (registry.Decision, error) {
	if in == nil || in.Tool == nil {
		return registry.Decision{}, errors.New("policy: no tool to decide on")
	}
	var (
		best    *registry.Decision
		vars    map[string]any
		varsErr error
		spent   uint64 // the cost of the conditions evaluated so far
	)
	for _, r := range p.rules {
		if !registry.MatchAny(r.tools, in.Tool.Name) {
			continue
		}
		d := registry.Decision{Effect: r.effect, Rule: r.name, Reason: r.reason, CallerMayApprove: r.byCaller}
		if r.prg != nil {
			// Fail closed, as a condition that cannot be evaluated
			// does: the rules left might deny.
			if err := ctx.Err(); err != nil {
				d = registry.Decision{Effect: registry.Deny, Rule: r.name,
					Reason: "the rule's condition was not evaluated: the call ended first (" + err.Error() + ")"}
				best = &d
				break
			}
			if spent >= p.callLimit {
				d = registry.Decision{Effect: registry.Deny, Rule: r.name,
					Reason: fmt.Sprintf("the rule's condition was not evaluated: the policy's conditions had cost %d for this call, and one call's may cost %d in all; smaller arguments cost less to check", spent, p.callLimit)}
				best = &d
				break
			}
			if vars == nil && varsErr == nil {
				vars, varsErr = variables(in)
			}
			ok, err := false, varsErr
			if err == nil {
				var cost uint64
				ok, cost, err = r.eval(ctx, vars)
				spent += cost
			}
			if err != nil {
				// Fail closed: a condition that cannot be evaluated denies.
				d = registry.Decision{Effect: registry.Deny, Rule: r.name,
					Reason: "the rule's condition could not be evaluated for this call: " + err.Error()}
			} else if !ok {
				continue
			}
		}
		if best == nil || d.Effect.Strictness() > best.Effect.Strictness() ||
			// Between ask rules, approvers only is stricter than the
			// caller may approve: one rule that keeps the call to
			// approvers keeps it there.
			(d.Effect == registry.Ask && best.Effect == registry.Ask && best.CallerMayApprove && !d.CallerMayApprove) {
			best = &d
			if d.Effect == registry.Deny {
				break
			}
		}
	}
	if best != nil {
		return *best, nil
	}
	e, ok := p.defaults[in.Tool.Tier]
	if !ok {
		e = registry.Ask
	}
	return registry.Decision{Effect: e, Rule: "tier-default:" + string(in.Tool.Tier)}, nil
}

// decodeArgs decodes an arguments object for CEL: integers become int64,
// other numbers float64.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("arguments are not a JSON object: %v", err)
	}
	return convertNumbers(m).(map[string]any), nil
}

func convertNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = convertNumbers(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = convertNumbers(e)
		}
		return x
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}
