package registry

import (
	"path"
	"slices"
)

// Scope is a permission of a caller.
type Scope string

// The scopes a caller may hold.
const (
	ScopeCall    Scope = "call"
	ScopeApprove Scope = "approve"
	ScopeAdmin   Scope = "admin"
)

// Caller is an authenticated client of the service.
type Caller struct {
	ID string `json:"id"`
	// Tools are name globs (path.Match syntax); empty means every tool.
	Tools []string `json:"tools,omitempty"`
	// MaxTier is the most dangerous tier the caller may see; empty means any.
	MaxTier Tier    `json:"maxTier,omitempty"`
	Scopes  []Scope `json:"scopes"`
}

// Anonymous is the caller of a service that runs without credentials: it
// may see and call everything and approve.
func Anonymous() *Caller {
	return &Caller{ID: "anonymous", Scopes: []Scope{ScopeCall, ScopeApprove, ScopeAdmin}}
}

// Has reports whether c holds scope s.
func (c *Caller) Has(s Scope) bool { return slices.Contains(c.Scopes, s) }

// Sees reports whether def is in c's catalog.
func (c *Caller) Sees(def *Definition) bool {
	if c.MaxTier != "" && !def.Tier.AtMost(c.MaxTier) {
		return false
	}
	return len(c.Tools) == 0 || MatchAny(c.Tools, def.Name)
}

// MatchAny reports whether name matches one of the globs.
func MatchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}
