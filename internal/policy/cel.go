package policy

import (
	"context"
	"fmt"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/ext"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// newEnv declares what a condition sees: args, caller, context and tool,
// with the standard library and the string extensions.
func newEnv() (*cel.Env, error) {
	dynMap := cel.MapType(cel.StringType, cel.DynType)
	return cel.NewEnv(
		cel.Variable("args", dynMap),
		cel.Variable("caller", dynMap),
		cel.Variable("context", dynMap),
		cel.Variable("tool", dynMap),
		cel.CrossTypeNumericComparisons(true),
		ext.Strings(),
	)
}

// compileCondition parses and type-checks a condition, which must be of
// type bool, and plans it with a cost limit.
func compileCondition(env *cel.Env, expr string, limit uint64) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("condition does not compile:\n%s", iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) {
		return nil, fmt.Errorf("condition must be a boolean expression, but it has type %s; compare explicitly (for example has(args.force) && args.force == true)", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(limit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, fmt.Errorf("condition: %w", err)
	}
	return prg, nil
}

// variables builds a condition's inputs from a policy input.
func variables(in *registry.PolicyInput) (map[string]any, error) {
	args, err := decodeArgs(in.Arguments)
	if err != nil {
		return nil, err
	}
	caller := map[string]any{"id": "", "scopes": []string{}, "maxTier": "", "tools": []string{}, "issuer": "", "subject": "", "claims": map[string]any{}}
	if c := in.Caller; c != nil {
		scopes := make([]string, len(c.Scopes))
		for i, s := range c.Scopes {
			scopes[i] = string(s)
		}
		tools := append([]string{}, c.Tools...)
		claims := c.Claims
		if claims == nil {
			claims = map[string]any{}
		}
		// A token caller's verified claims (never the token): conditions
		// read them as caller.claims.<name>, with caller.issuer and
		// caller.subject naming who vouched for the caller.
		caller = map[string]any{"id": c.ID, "scopes": scopes, "maxTier": string(c.MaxTier), "tools": tools,
			"issuer": c.Issuer, "subject": c.Subject, "claims": claims}
	}
	return map[string]any{
		"args":   args,
		"caller": caller,
		"context": map[string]any{
			"instanceKey": in.Context.InstanceKey,
			"agentName":   in.Context.AgentName,
			"turnId":      in.Context.TurnID,
		},
		"tool": map[string]any{"name": in.Tool.Name, "tier": string(in.Tool.Tier)},
	}, nil
}

// eval runs a condition and returns its cost too. Errors (a missing key,
// a type mismatch, the cost limit) are returned for the caller to fail
// closed.
func (r *rule) eval(ctx context.Context, vars map[string]any) (bool, uint64, error) {
	out, det, err := r.prg.ContextEval(ctx, vars)
	var cost uint64
	if c := det.ActualCost(); c != nil {
		cost = *c
	}
	if err != nil {
		msg := err.Error()
		if strings.Contains(msg, "no such key") {
			msg += " (test optional arguments with has(args.name) before using them)"
		}
		return false, cost, fmt.Errorf("%s", msg)
	}
	b, ok := out.Value().(bool)
	if !ok {
		return false, cost, fmt.Errorf("condition gave %v, not a boolean", out.Value())
	}
	return b, cost, nil
}
