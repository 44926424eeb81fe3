package registry

import (
	"fmt"
	"strings"
)

// MaxNameLength is the longest tool name OpenAI and Anthropic accept.
const MaxNameLength = 64

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
// starting or ending with "_", at most 64 characters in all.
func ValidateName(name string) error {
	if len(name) > MaxNameLength {
		return fmt.Errorf("tool name %q is %d characters long; the limit is %d", name, len(name), MaxNameLength)
	}
	resource, export, ok := SplitName(name)
	if !ok {
		return fmt.Errorf("tool name %q must have the form resource__export", name)
	}
	if err := validateNamePart(resource); err != nil {
		return fmt.Errorf("tool name %q: resource %w", name, err)
	}
	if err := validateNamePart(export); err != nil {
		return fmt.Errorf("tool name %q: export %w", name, err)
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
