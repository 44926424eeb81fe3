package registry

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzDecodeArguments: whatever a model sends as arguments, decoding
// either refuses it with E_INVALID_ARGUMENTS or yields a JSON object, the
// same one whether it came as an object or as a string holding it.
func FuzzDecodeArguments(f *testing.F) {
	for _, s := range []string{`{}`, `null`, ``, `"{\"a\":1}"`, `"  "`, `[1]`, `{"a":[1,{"b":"c"}]}`, `"[1]"`, `{"a":1e400}`, `"\u0000"`, `{"a":"\ud800"}`} {
		f.Add([]byte(s))
	}
	var c jsonChecker
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, v, e := decodeArguments(json.RawMessage(in), 64, &c)
		if e != nil {
			if e.Code != CodeInvalidArguments || e.Message == "" {
				t.Fatalf("error %+v for %q", e, in)
			}
			return
		}
		if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
			t.Fatalf("decoded %q from %q: not a JSON object", raw, in)
		}
		if _, ok := v.(map[string]any); !ok {
			t.Fatalf("decoded value %T from %q", v, in)
		}
		// The same object sent as a string decodes to the same bytes.
		if trimmed := bytes.TrimSpace(in); len(trimmed) > 0 && trimmed[0] == '{' {
			s, _ := json.Marshal(string(raw))
			raw2, _, e2 := decodeArguments(s, 64, &c)
			if e2 != nil || !bytes.Equal(raw2, raw) {
				t.Fatalf("as a string %s: %q %v, as an object %q", s, raw2, e2, raw)
			}
		}
	})
}

// TestDecodeArgumentsRefusesBadUTF8: arguments with bytes that are not
// UTF-8, as an object or as a string holding one, are refused with a
// message that says so and where, rather than recorded as sent while
// the tool sees U+FFFD.
func TestDecodeArgumentsRefusesBadUTF8(t *testing.T) {
	for _, in := range []string{"{\"\xe3\":0}", "{\"path\":\"a\xffb\"}", "\"{\\\"a\\\":\\\"\xc3\\\"}\""} {
		_, _, e := decodeArguments(json.RawMessage(in), 64, nil)
		if e == nil || e.Code != CodeInvalidArguments || !strings.Contains(e.Message, "not valid UTF-8") {
			t.Errorf("%q: %+v, want E_INVALID_ARGUMENTS about UTF-8", in, e)
		}
	}
	if _, _, e := decodeArguments(json.RawMessage(`{"path":"naïve ✓"}`), 64, nil); e != nil {
		t.Errorf("valid UTF-8 refused: %+v", e)
	}
}

// TestDecodeArgumentsRefusesWhatParsersReadDifferently: arguments must be
// I-JSON. A member sent twice would show a person approving the call the
// first value while the tool gets the last; a number past a double's
// range fails Go clients and is Infinity to JavaScript; a lone surrogate
// is refused by strict parsers and read as U+FFFD by Go's.
func TestDecodeArgumentsRefusesWhatParsersReadDifferently(t *testing.T) {
	var c jsonChecker
	for in, want := range map[string]string{
		`{"command":"echo safe","command":"rm -rf notes"}`: `duplicate object member name "command"`,
		`{"a":{"b":1,"b":2}}`:                              `duplicate object member name "b"`,
		`"{\"path\":\"a\",\"path\":\"/etc\"}"`:             `duplicate object member name "path"`,
		`{"n":1e999999}`:                                   `the number 1e999999 at "/n" is beyond what a 64-bit float holds`,
		`{"n":[-1e400]}`:                                   `the number -1e400 at "/n/0" is beyond`,
		`{"s":"\ud800"}`:                                   `invalid surrogate pair`,
		`{"s":"\udc00x"}`:                                  `invalid surrogate pair`,
	} {
		_, _, e := decodeArguments(json.RawMessage(in), 64, &c)
		if e == nil || e.Code != CodeInvalidArguments || !strings.Contains(e.Message, "not interoperable JSON (RFC 7493)") || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %+v, want E_INVALID_ARGUMENTS saying %q", in, e, want)
		}
	}
	// What every parser reads alike stays accepted.
	for _, in := range []string{`{"a":{"x":1},"b":{"x":2}}`, `{"s":"\ud83d\ude00"}`, `{"n":1e-400}`, `{"n":123456789012345678901234567890}`, `{"n":1.7976931348623157e308}`} {
		if _, _, e := decodeArguments(json.RawMessage(in), 64, &c); e != nil {
			t.Errorf("%s refused: %+v", in, e)
		}
	}
}
