package registry

import (
	"context"
	"encoding/json"
)

// Effect is what policy decides for a call.
type Effect string

// The effects, from least to most strict.
const (
	Allow Effect = "allow"
	Ask   Effect = "ask"
	Deny  Effect = "deny"
)

// Strictness orders effects: allow < ask < deny.
func (e Effect) Strictness() int {
	switch e {
	case Allow:
		return 0
	case Ask:
		return 1
	case Deny:
		return 2
	}
	return -1
}

// Decision is a policy outcome and the rule that made it.
type Decision struct {
	Effect Effect `json:"effect"`
	// Rule names the rule, or "tier-default:<tier>".
	Rule   string `json:"rule"`
	Reason string `json:"reason,omitempty"`
	// CallerMayApprove, on an ask decision, lets the calling user decide
	// the approval request themselves (in an MCP client that can answer an
	// elicitation), besides approvers; false keeps it to approvers.
	CallerMayApprove bool `json:"callerMayApprove,omitempty"`
}

// PolicyInput is what policy decides on.
type PolicyInput struct {
	Tool      *Definition
	Arguments json.RawMessage
	Caller    *Caller
	Context   CallContext
}

// Policy decides whether a call may run.
type Policy interface {
	Decide(ctx context.Context, in *PolicyInput) (Decision, error)
}

// TierDefaults is the policy that applies only the tier defaults: read_only
// and side_effecting allow, privileged asks.
type TierDefaults map[Tier]Effect

// DefaultTierEffects returns the tier defaults of the contract.
func DefaultTierEffects() TierDefaults {
	return TierDefaults{ReadOnly: Allow, SideEffecting: Allow, Privileged: Ask}
}

// Decide implements Policy.
func (d TierDefaults) Decide(_ context.Context, in *PolicyInput) (Decision, error) {
	e, ok := d[in.Tool.Tier]
	if !ok {
		e = Ask
	}
	return Decision{Effect: e, Rule: tierDefaultRule(in.Tool.Tier)}, nil
}

// tierDefaultRule names the tier default rule of t; the names of the
// defined tiers are constants, so a decision allocates nothing.
func tierDefaultRule(t Tier) string {
	switch t {
	case ReadOnly:
		return "tier-default:" + string(ReadOnly)
	case SideEffecting:
		return "tier-default:" + string(SideEffecting)
	case Privileged:
		return "tier-default:" + string(Privileged)
	}
	return "tier-default:" + string(t)
}
