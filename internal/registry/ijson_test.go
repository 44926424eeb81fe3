package registry_test

import (
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Interoperable says what the executor's argument check says, for tools
// that check JSON from their input.
func TestInteroperable(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"a":2}`:       `duplicate object member name "a"`,
		`{"a":1e400}`:         "beyond what a 64-bit float holds",
		`"\ud800"`:            "surrogate",
		"\"\xff\"":            "invalid UTF-8",
		`1 2`:                 "more than one JSON value",
		``:                    "no JSON value",
		`{"a":{"b":1,"b":2}}`: `duplicate object member name "b"`,
	} {
		err := registry.Interoperable([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error saying %q", in, err, want)
		}
	}
	for _, in := range []string{`{"a":{"x":1},"b":{"x":2}}`, `"\ud83d\ude00"`, `1e-400`, `123456789012345678901234567890`, ` [1, 2] `} {
		if err := registry.Interoperable([]byte(in)); err != nil {
			t.Errorf("%s refused: %v", in, err)
		}
	}
}
