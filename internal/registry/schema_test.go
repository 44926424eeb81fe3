package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// invalidArguments calls a tool of schema with args and returns its
// E_INVALID_ARGUMENTS error.
func invalidArguments(t *testing.T, schema, args string, limit int) *Error {
	t.Helper()
	tool := &Tool{Definition: Definition{Name: "t__check", Description: "Check.", Tier: ReadOnly, Parameters: json.RawMessage(schema)},
		Handler: Func(func(ctx context.Context, r *Request) (any, error) { return "ok", nil })}
	reg, err := New(Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: limit}, tool)
	if err != nil {
		t.Fatal(err)
	}
	res, err := NewExecutor(Options{Registry: reg}).Execute(context.Background(), Anonymous(), &Call{ToolName: "t__check", Arguments: json.RawMessage(args)})
	if err != nil || res.Code() != CodeInvalidArguments {
		t.Fatalf("%s: %v %+v", args, err, res)
	}
	return res.Error
}

// TestChoiceViolations: a choice no alternative matched reads as a choice,
// one detail where the choice is, not as every alternative's failures
// side by side (each of which would read as a requirement).
func TestChoiceViolations(t *testing.T) {
	cases := []struct {
		name, schema, args string
		want               []Detail
	}{
		{"root anyOf of required members",
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"anyOf":[{"required":["a"]},{"required":["b"]}]}`, `{}`,
			[]Detail{{"", "must match one of 2 alternatives: (1) missing required property 'a'; or (2) missing required property 'b'"}}},
		{"nested oneOf of closed objects",
			`{"type":"object","properties":{"p":{"oneOf":[
				{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false},
				{"type":"object","properties":{"b":{"type":"integer"}},"required":["b"],"additionalProperties":false}]}}}`, `{"p":{"a":1}}`,
			[]Detail{{"/p", "must match one of 2 alternatives: (1) at /p/a: expected string, got number; or (2) missing required property 'b' and unknown property 'a' (not in the schema)"}}},
		{"alternatives of types",
			`{"type":"object","properties":{"n":{"anyOf":[{"type":"string"},{"type":"null"},{"type":["integer","string"]}]}}}`, `{"n":true}`,
			[]Detail{{"/n", "expected string or null or integer, got boolean"}}},
		{"a choice beside other failures",
			`{"type":"object","required":["x"],"properties":{"x":{"type":"string"},"p":{"oneOf":[{"type":"string","maxLength":1},{"type":"array"}]}}}`, `{"p":"abc"}`,
			[]Detail{{"", "missing required property 'x'"}, {"/p", "must match one of 2 alternatives: (1) maxLength: got 3, want 1; or (2) expected array, got string"}}},
		{"more than one alternative matches",
			`{"type":"object","properties":{"p":{"oneOf":[{"type":"string"},{"minLength":1}]}}}`, `{"p":"abc"}`,
			[]Detail{{"/p", "matches alternatives 1 and 2, but must match exactly one"}}},
	}
	for _, c := range cases {
		e := invalidArguments(t, c.schema, c.args, 1000)
		if fmt.Sprint(e.Details) != fmt.Sprint(c.want) {
			t.Errorf("%s:\n got %q\nwant %q", c.name, e.Details, c.want)
		}
		if !strings.HasSuffix(e.Message, ": "+c.want[0].String()) && len(c.want) == 1 {
			t.Errorf("%s: message %q", c.name, e.Message)
		}
	}
}

// TestDetailsAreBounded: a detail says what is wrong in a few hundred
// characters however large the enum, value or pattern, cut on a
// character boundary.
func TestDetailsAreBounded(t *testing.T) {
	values := make([]string, 3000)
	for i := range values {
		values[i] = fmt.Sprintf(`"value-%04d"`, i)
	}
	long := strings.Repeat("é", 5000)
	schema := `{"type":"object","properties":{
		"e":{"enum":[` + strings.Join(values, ",") + `]},
		"p":{"type":"string","pattern":"^[a-z]+$"},
		"c":{"const":"` + long + `"},
		"o":{"type":"object","additionalProperties":false}}}`
	many := make([]string, 200)
	for i := range many {
		many[i] = fmt.Sprintf(`"member-%d":1`, i)
	}
	e := invalidArguments(t, schema, `{"e":"nope","p":"`+long+`","c":"x","o":{`+strings.Join(many, ",")+`}}`, 1000)
	if len(e.Details) != 4 {
		t.Fatalf("details: %q", e.Details)
	}
	for _, d := range e.Details {
		if n := utf8.RuneCountInString(d.Message); n > maxDetailMessage || !utf8.ValidString(d.Message) {
			t.Errorf("%s: %d characters: %.200q", d.Path, n, d.Message)
		}
	}
	if got := e.Details[1].Message; !strings.HasPrefix(got, `expected one of 3000 values, e.g. "value-0000", "value-0001"`) {
		t.Errorf("enum: %q", got)
	}
	if got := e.Details[3].Message; !strings.HasPrefix(got, `"éé`) || !strings.HasSuffix(got, `é…" does not match the pattern "^[a-z]+$"`) {
		t.Errorf("pattern: %q", got)
	}
	if got := e.Details[2].Message; !strings.HasPrefix(got, "unknown properties 'member-0', 'member-1', 'member-10', ") || !strings.Contains(got, ", and 190 more (not in the schema)") {
		t.Errorf("members: %q", got)
	}
	// A tool's own smaller limit bounds its details too.
	e = invalidArguments(t, schema, `{"e":"nope"}`, 50)
	if n := utf8.RuneCountInString(e.Details[0].Message); n > 50 {
		t.Errorf("limit 50: %d characters: %q", n, e.Details[0].Message)
	}
}
