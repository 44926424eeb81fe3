package data

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// A jsonl error names the column (in characters) and the whole character
// at fault. Before, every error was at "column 0" (json.Compact reports
// no offset) and a typographic quote was "invalid character 'â'", its
// first byte. A NUL delimiter was "csv: csv: invalid field or comment
// delimiter", with no suggestion.
func TestErrorsNameTheirPlace(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	for _, c := range []struct {
		name string
		args map[string]any
		code registry.Code
		want []string
	}{
		{"trailing comma", map[string]any{"format": "jsonl", "text": "{\"a\": 1}\n{\"a\": 1, \"b\": 2,}\n"}, registry.CodeTool,
			[]string{"jsonl: line 2: invalid JSON: column 17: invalid character '}' looking for beginning of object key string"}},
		{"typographic quotes", map[string]any{"format": "jsonl", "text": "{\"a\": “b”}"}, registry.CodeTool,
			[]string{"line 1: invalid JSON: column 7: invalid character '“' looking for beginning of value", "straight double quotes"}},
		{"columns count characters", map[string]any{"format": "jsonl", "text": "{\"éé\": x}"}, registry.CodeTool,
			[]string{"column 8: invalid character 'x'"}},
		{"end of line", map[string]any{"format": "jsonl", "text": "{\"a\": 1\n"}, registry.CodeTool,
			[]string{"column 8: unexpected end of JSON input"}},
		{"NUL delimiter", map[string]any{"format": "csv", "text": "a\x00b\n", "delimiter": "\x00"}, registry.CodeInvalidArguments,
			[]string{`delimiter "\x00" cannot separate fields`, "NUL"}},
	} {
		err := h.fail(c.args)
		all := err.Message + " | " + err.Suggestion
		if err.Code != c.code || err.Suggestion == "" || strings.Contains(all, "csv: csv:") {
			t.Errorf("%s: %+v", c.name, err)
		}
		for _, w := range c.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: %q lacks %q", c.name, all, w)
			}
		}
	}
	// encoding/csv's own errors are said once, with what to do.
	var re *registry.Error
	if err := csvError("csv", errors.New("csv: invalid field or comment delimiter")); !errors.As(err, &re) ||
		re.Message != "csv: invalid field or comment delimiter" || re.Suggestion == "" {
		t.Errorf("csvError: %+v", err)
	}
}
