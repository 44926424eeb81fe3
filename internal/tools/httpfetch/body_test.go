package httpfetch

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestJSONThatParsersReadDifferentlyIsText: JSON that encoding/json
// accepts but that is not I-JSON (invalid UTF-8, a UTF-8-encoded
// surrogate, a member given twice, a number no double holds) is returned
// as text, never passed on as JSON, and the result is valid UTF-8.
func TestJSONThatParsersReadDifferentlyIsText(t *testing.T) {
	bodies := map[string]string{
		"/utf8":      "{\"a\":\"\xff\xfe bad\",\"b\":\"\xed\xa0\x80\"}",
		"/duplicate": `{"a":1,"a":2}`,
		"/huge":      `{"n":1e400}`,
		"/good":      `{"a":"é","n":1e300}`,
	}
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(bodies[r.URL.Path]))
	}))
	for path, why := range map[string]string{"/utf8": "UTF-8", "/duplicate": "duplicate", "/huge": "64-bit float"} {
		for _, format := range []string{"auto", "json"} {
			out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL + path, "format": format}, 0))
			b, err := json.Marshal(out)
			if out.Format != "text" || err != nil || !utf8.Valid(b) || !strings.Contains(out.Note, "not I-JSON") || !strings.Contains(out.Note, why) {
				t.Errorf("%s as %s: format %s, note %q, output valid UTF-8 %v (%v)", path, format, out.Format, out.Note, utf8.Valid(b), err)
			}
		}
	}
	if out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL + "/utf8"}, 0)); out.Body != "{\"a\":\"\uFFFD bad\",\"b\":\"\uFFFD\"}" {
		t.Errorf("invalid UTF-8 JSON as text: %q; want it read as UTF-8, the invalid bytes replaced", out.Body)
	}
	if out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL + "/good"}, 0)); out.Format != "json" || out.Note != "" {
		t.Errorf("I-JSON: format %s, note %q", out.Format, out.Note)
	}
}

// TestTextKeepsItsLastCharacter: a body that was not cut keeps its last
// character whatever its charset; only a UTF-8 body that was cut loses the
// character the cut split. format raw returns the bytes unchanged: text
// when they are UTF-8, base64 otherwise.
func TestTextKeepsItsLastCharacter(t *testing.T) {
	bodies := map[string]struct{ contentType, body string }{
		"/cp1251":  {"text/plain; charset=windows-1251", "\xcf\xf0\xe8\xe2\xe5\xf2"}, // Привет
		"/koi8":    {"text/plain; charset=koi8-r", "\xf0\xd2\xc9\xd7\xc5\xd4"},       // Привет
		"/latin1":  {"text/plain; charset=iso-8859-1", "na\xefve caf\xe9"},           // naïve café
		"/utf16":   {"text/plain; charset=utf-16le", "\x00\xac\x5c\xd5"},             // 가한
		"/nometa":  {"text/plain", "caf\xe9"},                                        // windows-1252, as browsers read it
		"/utf8cut": {"text/plain; charset=utf-8", "caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9e"},
	}
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := bodies[r.URL.Path]
		w.Header().Set("Content-Type", b.contentType)
		w.Write([]byte(b.body))
	}))
	o := Options{AllowCIDRs: allowLoopback()}
	for path, want := range map[string]string{"/cp1251": "Привет", "/koi8": "Привет", "/latin1": "naïve café", "/utf16": "가한", "/nometa": "café"} {
		if out := mustOK(t)(call(t, o, "http__get", map[string]any{"url": srv.URL + path}, 0)); out.Body != want || out.Truncated {
			t.Errorf("%s: %q (truncated %v), want %q", path, out.Body, out.Truncated, want)
		}
	}
	// Cut at maxBytes inside "è" (bytes 7 and 8): the split character goes.
	if out := mustOK(t)(call(t, o, "http__get", map[string]any{"url": srv.URL + "/utf8cut", "maxBytes": 8}, 0)); out.Body != "café cr" || !out.Truncated {
		t.Errorf("UTF-8 cut inside a character: %q (truncated %v), want %q", out.Body, out.Truncated, "café cr")
	}
	if out := mustOK(t)(call(t, o, "http__get", map[string]any{"url": srv.URL + "/nometa", "format": "raw"}, 0)); out.Format != "base64" || out.Body != base64.StdEncoding.EncodeToString([]byte("caf\xe9")) {
		t.Errorf("raw non-UTF-8 bytes: format %s, body %q; want them base64-encoded, unchanged", out.Format, out.Body)
	}
	if out := mustOK(t)(call(t, o, "http__get", map[string]any{"url": srv.URL + "/utf8cut", "format": "raw", "maxBytes": 8}, 0)); out.Format != "text" || out.Body != "café cr" {
		t.Errorf("raw UTF-8 cut inside a character: format %s, body %q", out.Format, out.Body)
	}
}
