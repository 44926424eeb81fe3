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
	// Issuer and Subject name who vouched for a token caller (a JWT's
	// iss and sub); empty for static credentials.
	Issuer  string `json:"issuer,omitempty"`
	Subject string `json:"subject,omitempty"`
	// Claims are a token caller's verified claims, for policy conditions;
	// nil for static credentials. Never the token itself.
	Claims map[string]any `json:"-"`
	// RateLimit bounds how fast the caller may call tools; nil means no
	// limit.
	RateLimit *RateLimit `json:"-"`
	// Workspace, when set, names a file workspace the caller shares with
	// every caller that names the same one; otherwise the caller's files
	// are its own.
	Workspace string `json:"workspace,omitempty"`
}

// RateLimit is a token bucket: Burst calls at once, refilled at
// PerSecond; Tools narrow it per tool.
type RateLimit struct {
	// Name is the limit's configured name (the Caller resource, or the
	// Issuer and mapping rule that set it): a bounded label for metrics.
	Name      string
	PerSecond float64
	Burst     int
	// Tools are stricter buckets for some tools, checked in addition.
	Tools []ToolRateLimit
}

// ToolRateLimit is a bucket for the tools matching Tools (globs).
type ToolRateLimit struct {
	Tools     []string
	PerSecond float64
	Burst     int
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
