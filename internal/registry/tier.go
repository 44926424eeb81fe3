package registry

import (
	"encoding/json"
	"fmt"
)

// Tier is a tool's safety tier.
type Tier string

// The safety tiers, from least to most dangerous.
const (
	// ReadOnly tools have no side effects.
	ReadOnly Tier = "read_only"
	// SideEffecting tools change state inside the sandbox or reach the open network.
	SideEffecting Tier = "side_effecting"
	// Privileged tools run programs, or are marked so by an operator.
	Privileged Tier = "privileged"
)

// Tiers returns every tier, least dangerous first.
func Tiers() []Tier { return []Tier{ReadOnly, SideEffecting, Privileged} }

// Rank orders tiers: 0 for read_only, 1 for side_effecting, 2 for
// privileged, and -1 for anything else.
func (t Tier) Rank() int {
	switch t {
	case ReadOnly:
		return 0
	case SideEffecting:
		return 1
	case Privileged:
		return 2
	}
	return -1
}

// Valid reports whether t is one of the defined tiers.
func (t Tier) Valid() bool { return t.Rank() >= 0 }

// AtMost reports whether t is no more dangerous than max.
func (t Tier) AtMost(max Tier) bool { return t.Rank() <= max.Rank() }

// ParseTier parses a tier name.
func ParseTier(s string) (Tier, error) {
	t := Tier(s)
	if !t.Valid() {
		return "", fmt.Errorf("unknown tier %q (want read_only, side_effecting or privileged)", s)
	}
	return t, nil
}

// UnmarshalJSON rejects unknown tiers.
func (t *Tier) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := ParseTier(s)
	if err != nil {
		return err
	}
	*t = v
	return nil
}
