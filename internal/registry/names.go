package registry

import (
	"fmt"
	"strings"
)

// MaxNameLength is the longest tool name every provider accepts (OpenAI,
// Anthropic and Gemini: 64; MCP itself allows 128).
const MaxNameLength = 64

// Provider name rules, which every catalog name satisfies so that no
// catalog shape needs a mapping:
//   - OpenAI (Chat Completions, Responses): ^[a-zA-Z0-9_-]{1,64}$
//   - Anthropic: ^[a-zA-Z0-9_-]{1,64}$
//   - Gemini: starts with a letter or '_', then [a-zA-Z0-9_.:-], at most 64
//   - MCP (2025-11-25 and later): [A-Za-z0-9_.-], 1 to 128 characters
//
// Their intersection, with the resource__export form, is: a letter first,
// then letters, digits, '_' and '-', at most 64 characters.

// Separator joins a resource and an export into a tool name.
const Separator = "__"

// JoinName returns the model-facing name of export in resource.
func JoinName(resource, export string) string { return resource + Separator + export }

// SplitName splits a tool name on its first separator.
func SplitName(name string) (resource, export string, ok bool) {
	return strings.Cut(name, Separator)
}

// ValidateName reports whether name is a well-formed tool name: two parts
// joined by "__", each of [A-Za-z0-9_-]+, neither containing "__" nor
// starting or ending with "_", the resource starting with a letter, at
// most 64 characters in all.
func ValidateName(name string) error {
	if len(name) > MaxNameLength {
		return fmt.Errorf("tool name %q is %d characters long; the limit is %d (OpenAI, Anthropic and Gemini reject longer names): shorten the resource or export name", name, len(name), MaxNameLength)
	}
	resource, export, ok := SplitName(name)
	if !ok {
		return fmt.Errorf("tool name %q must have the form resource__export", name)
	}
	if err := ValidateResourceName(resource); err != nil {
		return fmt.Errorf("tool name %q: resource %w", name, err)
	}
	if err := validateNamePart(export); err != nil {
		return fmt.Errorf("tool name %q: export %w", name, err)
	}
	return nil
}

// ValidateResourceName checks the resource part of a tool name, which
// starts the name: Gemini wants a letter (or '_', which parts may not
// start with) first.
func ValidateResourceName(part string) error {
	if err := validateNamePart(part); err != nil {
		return err
	}
	if c := part[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
		return fmt.Errorf("%q must start with a letter (Gemini rejects tool names that start with %q)", part, c)
	}
	return nil
}

// ValidateNamePart checks one part (resource or export) of a tool name.
func ValidateNamePart(part string) error { return validateNamePart(part) }

func validateNamePart(part string) error {
	if part == "" {
		return fmt.Errorf("is empty")
	}
	for i := 0; i < len(part); i++ {
		c := part[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%q has character %q; only letters, digits, '_' and '-' are allowed", part, c)
		}
	}
	if strings.Contains(part, Separator) {
		return fmt.Errorf("%q must not contain %q", part, Separator)
	}
	if part[0] == '_' || part[len(part)-1] == '_' {
		return fmt.Errorf("%q must not start or end with '_'", part)
	}
	return nil
}
