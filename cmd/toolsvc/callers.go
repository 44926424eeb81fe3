package main

import (
	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// knownCallers is the policy of a configuration that defines callers,
// with the callers it defines (registry.CallerChecker): a call approved
// after a reload removed the caller that filed it, or took from it the
// tool or the call scope, does not run.
type knownCallers struct {
	registry.Policy
	auth    *policy.Authenticator
	issuers map[string]bool
}

// withCallers returns p knowing the callers of a configuration: the API
// key's and the Caller resources' (auth), and the token callers of its
// issuers.
func withCallers(p registry.Policy, auth *policy.Authenticator, issuers []*policy.Issuer) knownCallers {
	k := knownCallers{Policy: p, auth: auth, issuers: map[string]bool{}}
	for _, is := range issuers {
		k.issuers[is.Issuer] = true
	}
	return k
}

// CurrentCaller implements registry.CallerChecker: a token caller is as it
// was filed while its issuer exists (its claims were mapped when it
// filed); any other is as the resource (or the API key) that defines its
// id now defines it.
func (k knownCallers) CurrentCaller(c *registry.Caller) (*registry.Caller, bool) {
	if c.Issuer != "" {
		return c, k.issuers[c.Issuer]
	}
	return k.auth.Caller(c.ID)
}
