package registry

import (
	"errors"
	"fmt"
	"testing"
)

// TestUnavailableKeepsWhatAnOperatorMustCure: a store failure that only an
// operator cures stays visible through ErrUnavailable on every path (the
// pending-approval count's too), so the answer says so instead of "retry
// shortly"; a store's ErrNotFound does not, or it would read as "no such
// call".
func TestUnavailableKeepsWhatAnOperatorMustCure(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		keep error
		drop error
	}{
		{"full", fmt.Errorf("write: %w", ErrStoreFull), ErrStoreFull, nil},
		{"broken", fmt.Errorf("relation missing: %w", ErrStoreBroken), ErrStoreBroken, nil},
		{"not found", fmt.Errorf("read: %w", ErrNotFound), nil, ErrNotFound},
	} {
		err := unavailable(c.err)
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v is not ErrUnavailable", c.name, err)
		}
		if c.keep != nil && !errors.Is(err, c.keep) {
			t.Errorf("%s: %v lost %v", c.name, err, c.keep)
		}
		if c.drop != nil && errors.Is(err, c.drop) {
			t.Errorf("%s: %v still reads as %v", c.name, err, c.drop)
		}
	}
}
