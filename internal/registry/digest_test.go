package registry

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// marshalDigest is the definition of the digest: json.Marshal, SHA-256, hex.
func marshalDigest(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var canonicalSeeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e-7`, `-12.25E+3`, `123456789012345678901234567890`,
	`{"b":1,"a":[1,2,{"d":null,"c":true}],"":""}`,
	`{"path":"notes/today.md","limit":3,"mode":"a","items":[1,2,3]}`,
	`{"html":"<a href=\"x\">&amp;</a>","ctl":"\u0000\u0001\b\f\n\r\t\u001f\u007f","sep":"\u2028\u2029","uni":"é€😀"}`,
	`{"z":{"y":{"x":{"w":[[],[{}],[[null]]]}}},"k\u003c":"v"}`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"r":18}`,
	`"\ud800 lone surrogate"`, "\"bad utf-8 \xff\xfe\"",
}

// FuzzCanonical checks the allocation-free canonical form against
// json.Marshal on every value a JSON decoder can produce.
func FuzzCanonical(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return
		}
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal(%q): %v", raw, err)
		}
		got, ok := appendCanonical(nil, v)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("canonical form of %q:\n got %q (ok=%v)\nwant %q", raw, got, ok, want)
		}
		if ArgumentsDigest(v) != marshalDigest(v) {
			t.Fatalf("digest of %q differs from json.Marshal's", raw)
		}
	})
}

func TestDigestFallsBackToMarshal(t *testing.T) {
	for _, v := range []any{
		map[string]any{"f": 1.5, "i": 7, "s": []string{"a"}},
		json.Number("012"), // invalid: json.Marshal fails, and so the digest is of nothing
		map[string]any{"n": json.Number("1e")},
		struct{ A int }{1},
	} {
		if got, want := ArgumentsDigest(v), marshalDigest(v); got != want {
			t.Errorf("ArgumentsDigest(%#v) = %s, want %s", v, got, want)
		}
	}
	if _, ok := appendCanonical(nil, 1.5); ok {
		t.Error("a float64 took the canonical path; it must go to json.Marshal")
	}
}

func TestValidNumber(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "-0": true, "1": true, "10.25": true, "1e5": true, "1E+5": true, "-1.5e-5": true,
		"": false, "-": false, "01": false, "1.": false, ".5": false, "1e": false, "1e+": false, "+1": false, "0x10": false, "1.5.": false,
	} {
		if got := validNumber(s); got != want {
			t.Errorf("validNumber(%q) = %v, want %v", s, got, want)
		}
	}
}

// FuzzQuotedLen checks the word-at-a-time length against the encoder.
func FuzzQuotedLen(f *testing.F) {
	for _, s := range []string{"", "plain ascii text, long enough for words", "tab\there \"quoted\" back\\slash", "é€😀 mixed ascii", "\xff\xfe bad", "\x00\x01\x1f\x7f ctl"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := quotedLen(s), len(appendQuoted(nil, s)); got != want {
			t.Fatalf("quotedLen(%q) = %d, want %d", s, got, want)
		}
	})
}
