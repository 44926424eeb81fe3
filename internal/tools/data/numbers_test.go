package data

import (
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestYAMLStringsAreNotNumbers: a large integer was marked by a prefix,
// "\x00number:", on a string, and YAML's double quotes can write a NUL:
// "\0number:5" came back as the number 5, "\0number:abc" failed with
// `json: invalid number literal "abc"`, and "\0number:1e999" came back as
// 1e999, which Go's json.Unmarshal refuses, failing the whole response.
// Strings in CSV, TSV and JSON Lines were never marked; they stay so.
func TestYAMLStringsAreNotNumbers(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	for _, c := range []struct{ format, text, want string }{
		{"yaml", `a: "\0number:5"`, `[{"a":"\u0000number:5"}]`},
		{"yaml", `a: "\0number:abc"`, `[{"a":"\u0000number:abc"}]`},
		{"yaml", `a: "\0number:1e999"`, `[{"a":"\u0000number:1e999"}]`},
		{"yaml", "a: \"\\0number:7\"\nb: 123456789012345678901234567890\n", `[{"a":"\u0000number:7","b":123456789012345678901234567890}]`},
		{"yaml", `"\0number:5": x`, `[{"\u0000number:5":"x"}]`},
		// The tag that marks large integers, written in the text, is a
		// tag the decoder does not know: the scalar is a string.
		{"yaml", "a: !toolsvc/exact-integer 5\nb: !toolsvc/exact-integer abc\n", `[{"a":"5","b":"abc"}]`},
		{"yaml", "a: !toolsvc/exact-integer 5\nb: 123456789012345678901234567890\n", `[{"a":"5","b":123456789012345678901234567890}]`},
		{"csv", "a\n\x00number:5\n", `[{"a":"\u0000number:5"}]`},
		{"tsv", "a\n\x00number:1e999\n", `[{"a":"\u0000number:1e999"}]`},
		{"jsonl", `{"a":"\u0000number:5"}` + "\n" + `"\u0000number:1e999"`, `[{"a":"\u0000number:5"},"\u0000number:1e999"]`},
	} {
		_, rows := h.ok(map[string]any{"format": c.format, "text": c.text})
		if rows != c.want {
			t.Errorf("%s %q:\n got %s\nwant %s", c.format, c.text, rows, c.want)
		}
		if err := registry.Interoperable([]byte(rows)); err != nil {
			t.Errorf("%s %q: rows are not I-JSON: %v", c.format, c.text, err)
		}
	}
}

// TestYAMLLargeIntegersJSONReadersTake: a large integer stays a number
// with every digit only while it is within a 64-bit float's range, the
// bar the service sets for numbers in arguments. Before, !!int with 400
// digits came back as a 400-digit number, which Go's json.Unmarshal
// refuses; leading zeros (YAML's 000123…, a decimal integer) made
// `json: invalid number literal`.
func TestYAMLLargeIntegersJSONReadersTake(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	huge := "1" + strings.Repeat("0", 400)
	for _, c := range []struct{ text, want string }{
		{"a: !!int " + huge, `[{"a":"` + huge + `"}]`},
		{"a: !!int -" + huge, `[{"a":"-` + huge + `"}]`},
		// Untagged, the decoder itself resolves it to a string.
		{"a: " + huge, `[{"a":"` + huge + `"}]`},
		{"a: 00012345678901234567890123", `[{"a":12345678901234567890123}]`},
		{"a: -00012345678901234567890123", `[{"a":-12345678901234567890123}]`},
		{"a: +12345678901234567890123", `[{"a":12345678901234567890123}]`},
		// Beyond 2^53, within the float's range: every digit, as an
		// argument may have them.
		{"a: 179769313486231570000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000",
			`[{"a":179769313486231570000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000}]`},
		{"[" + huge + ", !!int " + huge + "]", `[["` + huge + `","` + huge + `"]]`},
	} {
		_, rows := h.ok(map[string]any{"format": "yaml", "text": c.text})
		if rows != c.want {
			t.Errorf("%.60q:\n got %.200s\nwant %.200s", c.text, rows, c.want)
		}
		if err := registry.Interoperable([]byte(rows)); err != nil {
			t.Errorf("%.60q: rows are not I-JSON: %v", c.text, err)
		}
	}
}

// TestYAMLLargeIntegerDecodesAlike: a document with a large integer is
// decoded a second time (yamlValue), and every other value in it comes
// back as it does in a document without one: keys of every kind, merge
// keys, aliases, timestamps, binary, infinities.
func TestYAMLLargeIntegerDecodesAlike(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	const big = "zz: 123456789012345678901234567890\n"
	for _, doc := range []string{
		"a: 1\nb: [x, {c: 2001-02-03}, ~, true, 1.5]\n",
		"1.0: x\ntrue: y\nnull: z\n0x1f: w\n",
		"base: &b {1: a, s: b}\nm: {<<: *b, t: c}\n",
		"base: &b {1.0: a}\nm: {<<: *b, t: c}\nn: {<<: [*b, {u: d}], s: 2}\n",
		"s: !!binary aGk=\nf: .inf\ng: -.inf\nn: .nan\nd: 2001-02-03T04:05:06Z\n",
		"l: &l [1, [2, {x: 3}]]\nm: *l\n",
		"e: {}\nq: []\nk: !custom v\n",
	} {
		_, plain := h.ok(map[string]any{"format": "yaml", "text": doc})
		_, with := h.ok(map[string]any{"format": "yaml", "text": doc + big})
		want := strings.TrimSuffix(plain, "}]") + `,"zz":123456789012345678901234567890}]`
		if with != want {
			t.Errorf("%q:\nwith a large integer %s\n           without %s", doc, with, plain)
		}
	}
	// And within nested values and through an alias.
	_, rows := h.ok(map[string]any{"format": "yaml", "text": "a: [{b: &x 123456789012345678901234567890}]\nc: *x\nd: {<<: {e: *x}}\n"})
	if want := `[{"a":[{"b":123456789012345678901234567890}],"c":123456789012345678901234567890,"d":{"e":123456789012345678901234567890}}]`; rows != want {
		t.Errorf("nested:\n got %s\nwant %s", rows, want)
	}
}

// TestYAMLLargeIntegerAliasKeyRepeated: an alias of a large integer as a
// key is the string of its digits, so it repeats a key written so.
func TestYAMLLargeIntegerAliasKeyRepeated(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	res := h.call(map[string]any{"format": "yaml", "text": "ref: &r 99999999999999999999999\n\"99999999999999999999999\": a\n*r : b\n"})
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, `line 3: mapping key "99999999999999999999999" already defined at line 2`) {
		t.Errorf("got %s %+v", res.Output, res.Error)
	}
}
