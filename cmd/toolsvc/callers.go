package main

import (
	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// knownCallers is the policy of a configuration that defines callers,
// with the callers it defines (registry.CallerChecker): a call approved
// after a reload removed the caller that filed it does not run.
type knownCallers struct {
	registry.Policy
	ids     map[string]bool
	issuers map[string]bool
}

// withCallers returns p knowing the callers of a configuration: the API
// key's, the Caller resources' and the token callers of its issuers.
func withCallers(p registry.Policy, apiKey bool, callers []policy.CallerDocument, issuers []*policy.Issuer) knownCallers {
	k := knownCallers{Policy: p, ids: map[string]bool{}, issuers: map[string]bool{}}
	if apiKey {
		k.ids[policy.APIKeyCaller] = true
	}
	for _, c := range callers {
		k.ids[c.Name] = true
	}
	for _, is := range issuers {
		k.issuers[is.Issuer] = true
	}
	return k
}

// CallerExists implements registry.CallerChecker: a token caller exists
// while its issuer does, any other while a resource (or the API key)
// defines its id.
func (k knownCallers) CallerExists(c *registry.Caller) bool {
	if c.Issuer != "" {
		return k.issuers[c.Issuer]
	}
	return k.ids[c.ID]
}
