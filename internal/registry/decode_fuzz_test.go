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
	f.Fuzz(func(t *testing.T, in []byte) {
		raw, v, e := decodeArguments(json.RawMessage(in), 64)
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
			raw2, _, e2 := decodeArguments(s, 64)
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
		_, _, e := decodeArguments(json.RawMessage(in), 64)
		if e == nil || e.Code != CodeInvalidArguments || !strings.Contains(e.Message, "not valid UTF-8") {
			t.Errorf("%q: %+v, want E_INVALID_ARGUMENTS about UTF-8", in, e)
		}
	}
	if _, _, e := decodeArguments(json.RawMessage(`{"path":"naïve ✓"}`), 64); e != nil {
		t.Errorf("valid UTF-8 refused: %+v", e)
	}
}
