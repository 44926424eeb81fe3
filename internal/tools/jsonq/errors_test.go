package jsonq

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// An inputText that is not JSON is said with the line, the column and
// the whole character at fault; text after the value is refused, as is
// what input would refuse. Before, a typographic quote was "invalid
// character 'â'" with no place, `{"a":1}}` was read as {"a":1}, and
// 1e400 became a number beyond what JSON output can hold.
func TestInputTextErrorsNameTheirPlace(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"{\n  \"a\": “b”\n}", `line 2, column 8: invalid character '“' looking for beginning of value`},
		{`{"a": 1, "b": 2,}`, `line 1, column 17: invalid character '}' looking for beginning of object key string`},
		{"{\"a\": 1", "line 1, column 8: the text ends before the JSON value does"},
		{`{"a":1}}`, "line 1, column 8: text after the JSON value: }"},
		{`{"a":1} {"b":2}`, "line 1, column 9: text after the JSON value"},
		{`[1e400]`, "not interoperable JSON (RFC 7493)"},
		{`{"a":1,"a":2}`, `duplicate object member name "a"`},
	} {
		args, _ := json.Marshal(map[string]any{"program": ".", "inputText": c.text})
		res := call(t, string(args), 0)
		if res.Code() != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, c.want) || res.Error.Suggestion == "" {
			t.Errorf("%q: %+v; want %q", c.text, res.Error, c.want)
		}
	}
	res := call(t, `{"program":".a","inputText":"\n {\"a\": 2}\n"}`, 0)
	if string(res.Output) != `{"count":1,"results":[2]}` {
		t.Errorf("white space around the value: %s %+v", res.Output, res.Error)
	}
}

// A runtime error's suggestion fits the error: before, every one, an
// invalid regular expression or a string repeated beyond jq's limit too,
// was told to guard optional fields.
func TestRuntimeErrorHints(t *testing.T) {
	for _, c := range []struct{ program, message, hint string }{
		{`.a + 1`, "cannot add", "Guard optional fields"},
		{`"x" | test("(")`, "invalid regular expression", "RE2"},
		{`"x" | test("a"; "q")`, "unsupported regular expression flag", "flags are g, i and m"},
		{`"x" * 1e10`, "repeat string result too large", "larger than jq allows"},
		{`1 / (.b // 0)`, "cannot divide", "zero divisor"},
		{`error("custom")`, "error: custom", "try"},
	} {
		args, _ := json.Marshal(map[string]any{"program": c.program, "input": map[string]any{"a": "x"}})
		res := call(t, string(args), 0)
		if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, c.message) || !strings.Contains(res.Error.Suggestion, c.hint) {
			t.Errorf("%s: %+v; want %q and a suggestion with %q", c.program, res.Error, c.message, c.hint)
		}
		if c.hint != "Guard optional fields" && strings.Contains(res.Error.Suggestion, "Guard optional fields") {
			t.Errorf("%s: suggestion %q", c.program, res.Error.Suggestion)
		}
	}
}
