package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// costly is a pattern whose program is 4,003 instructions, all of which
// can be live at every byte: 1 MB of "a" took 15 to 57 s against it.
const costly = `[a-z]{0,1000}[0-9]{0,1000}X`

// validArguments calls a tool of schema with args and fails unless the
// arguments are accepted.
func validArguments(t *testing.T, schema, args string) {
	t.Helper()
	tool := &Tool{Definition: Definition{Name: "t__check", Description: "Check.", Tier: ReadOnly, Parameters: json.RawMessage(schema)},
		Handler: Func(func(ctx context.Context, r *Request) (any, error) { return "ok", nil })}
	reg, err := New(Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 16384}, tool)
	if err != nil {
		t.Fatal(err)
	}
	res, err := NewExecutor(Options{Registry: reg}).Execute(context.Background(), Anonymous(), &Call{ToolName: "t__check", Arguments: json.RawMessage(args)})
	if err != nil || res.Error != nil {
		t.Fatalf("%.100s: %v %+v", args, err, res.Error)
	}
}

// TestPatternWorkIsBoundedBeforeMatching: a string whose length times its
// patterns' size is over the bound is refused before any pattern is
// matched, saying which string, how long, and what to send; the model's
// error names maxLength when the string is over it too.
func TestPatternWorkIsBoundedBeforeMatching(t *testing.T) {
	long := strings.Repeat("a", 200_000)
	cases := []struct {
		name, schema, args string
		want               Detail
	}{
		{"over maxLength",
			`{"type":"object","properties":{"s":{"type":"string","maxLength":100,"pattern":"` + costly + `"}}}`,
			`{"s":"` + long + `"}`,
			Detail{"/s", `is 200000 characters long, more than its maxLength 100, and too long to check against the pattern "` + costly + `": send at most 100 characters`}},
		{"no maxLength",
			`{"type":"object","properties":{"s":{"type":"string","pattern":"` + costly + `"}}}`,
			`{"s":"` + long + `"}`,
			Detail{"/s", `is 200000 characters long, too long to check against the pattern "` + costly + `" (toolsvc checks at most about 8382 characters against it in one call): send a shorter string`}},
		{"through $defs, beside another pattern",
			`{"type":"object","properties":{"a":{"type":"array","items":{"$ref":"#/$defs/w"}}},"$defs":{"w":{"allOf":[{"pattern":"` + costly + `"},{"pattern":"^a"}]}}}`,
			`{"a":["x","` + long + `"]}`,
			Detail{"/a/1", `is 200000 characters long, too long to check against its 2 patterns (toolsvc checks at most about 8373 characters against it in one call): send a shorter string`}},
		{"a member name",
			`{"type":"object","patternProperties":{"` + costly + `":{}}}`,
			`{"` + long + `":1}`,
			Detail{"", `has a member name 200000 characters long, too long to check against the pattern "` + costly + `" (toolsvc checks at most about 8382 characters against it in one call): use a shorter name`}},
	}
	for _, c := range cases {
		e := invalidArguments(t, c.schema, c.args, 1000)
		if len(e.Details) != 1 || e.Details[0] != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, e.Details, []Detail{c.want})
		}
	}
}

// TestPatternWorkIsBoundedPerCall: many strings each short enough add up,
// and are refused together.
func TestPatternWorkIsBoundedPerCall(t *testing.T) {
	items := make([]string, 2000)
	for i := range items {
		items[i] = `"` + strings.Repeat("a", 100) + `"`
	}
	e := invalidArguments(t, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","pattern":"`+costly+`"}}}}`,
		`{"a":[`+strings.Join(items, ",")+`]}`, 1000)
	want := Detail{"", "the strings are more than toolsvc checks against the schema's patterns in one call (the first 84, the longest 100 characters at /a/0, are too many already): send fewer or shorter strings"}
	if len(e.Details) != 1 || e.Details[0] != want {
		t.Errorf("got %q\nwant %q", e.Details, []Detail{want})
	}
}

// TestPatternWorkFailsClosed: a string too long to check against a
// pattern it must not match is refused, not taken as not matching.
func TestPatternWorkFailsClosed(t *testing.T) {
	e := invalidArguments(t, `{"type":"object","properties":{"s":{"not":{"pattern":"`+costly+`"}}}}`,
		`{"s":"`+strings.Repeat("a", 200_000)+`"}`, 1000)
	if len(e.Details) != 1 || e.Details[0].Path != "/s" || !strings.HasPrefix(e.Details[0].Message, "is 200000 characters long, too long to check") {
		t.Errorf("got %q", e.Details)
	}
}

// TestPatternWorkCountsOnlyWhatApplies: a long string where no pattern
// applies, or one against a small pattern, is checked as before.
func TestPatternWorkCountsOnlyWhatApplies(t *testing.T) {
	schema := `{"type":"object","properties":{
		"content":{"type":"string"},
		"host":{"type":"string","maxLength":253,"pattern":"` + costly + `"},
		"word":{"type":"string","pattern":"^[a-z]+$"}}}`
	validArguments(t, schema, `{"content":"`+strings.Repeat("a", 900_000)+`","host":"abc1X","word":"`+strings.Repeat("b", 100_000)+`"}`)
	e := invalidArguments(t, schema, `{"host":"abc"}`, 1000)
	want := Detail{"/host", `"abc" does not match the pattern "` + costly + `"`}
	if len(e.Details) != 1 || e.Details[0] != want {
		t.Errorf("got %q\nwant %q", e.Details, []Detail{want})
	}
}

// TestPatternTooLargeIsRefusedAtLoad: a pattern that could not check even
// 4 KiB is refused when the tool is registered, with where it is.
func TestPatternTooLargeIsRefusedAtLoad(t *testing.T) {
	huge := strings.Repeat("[a-z]{0,1000}", 5)
	for _, schema := range []string{
		`{"type":"object","properties":{"s":{"type":"string","pattern":"` + huge + `"}}}`,
		`{"type":"object","$defs":{"d":{"pattern":"` + huge + `"}},"properties":{"s":{"$ref":"#/$defs/d"}}}`,
	} {
		tool := &Tool{Definition: Definition{Name: "t__check", Description: "Check.", Tier: ReadOnly, Parameters: json.RawMessage(schema), Source: "tools.yaml:3"},
			Handler: Func(func(ctx context.Context, r *Request) (any, error) { return "ok", nil })}
		_, err := New(Defaults{Timeout: time.Second}, tool)
		if err == nil || !strings.HasPrefix(err.Error(), `tools.yaml:3: tool "t__check": parameters schema: the pattern "[a-z]{0,1000}[a-z]{0,1000}`) ||
			!strings.Contains(err.Error(), "compiles to 10002 instructions, more than the 8192 toolsvc runs") {
			t.Errorf("%.80s: %v", schema, err)
		}
	}
	// Before draft 2019-09, a root $ref hides the guard beside it.
	tool := &Tool{Definition: Definition{Name: "t__check", Description: "Check.", Tier: ReadOnly,
		Parameters: json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","$ref":"#/definitions/a","definitions":{"a":{"properties":{"s":{"pattern":"^a"}}}}}`)},
		Handler: Func(func(ctx context.Context, r *Request) (any, error) { return "ok", nil })}
	if _, err := New(Defaults{Timeout: time.Second}, tool); err == nil || !strings.Contains(err.Error(), "move the $ref into allOf") {
		t.Errorf("draft-07 root $ref: %v", err)
	}
}

// TestOutputPatternWorkIsBounded: an output's strings are bounded the
// same way; the tool, not the model, is at fault.
func TestOutputPatternWorkIsBounded(t *testing.T) {
	tool := &Tool{Definition: Definition{Name: "t__out", Description: "Out.", Tier: ReadOnly, Type: "exec",
		Parameters:   json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"s":{"type":"string","pattern":"` + costly + `"}}}`)},
		Handler: Func(func(ctx context.Context, r *Request) (any, error) {
			return map[string]any{"s": strings.Repeat("a", 200_000)}, nil
		})}
	reg, err := New(Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 1 << 20}, tool)
	if err != nil {
		t.Fatal(err)
	}
	res, err := NewExecutor(Options{Registry: reg}).Execute(context.Background(), Anonymous(), &Call{ToolName: "t__out", Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Code() != CodeTool {
		t.Fatalf("%v %+v", err, res)
	}
	if d := fmt.Sprint(res.Error.Details); !strings.Contains(d, "at /s: is 200000 characters long, too long to check against the pattern") {
		t.Errorf("details %s", d)
	}
}
