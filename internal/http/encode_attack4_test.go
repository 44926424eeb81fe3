package http

import (
	"bytes"
	"compress/gzip"
	"strings"
	"testing"
)

// TestCompressedBodyIsNamed: a body sent with Content-Encoding gzip was
// read as JSON and refused for its first byte ("invalid character
// '\x1f'"); the answer now names the encoding and says what to send.
func TestCompressedBodyIsNamed(t *testing.T) {
	e := newEnv(t)
	call := `{"toolName":"text__transform","arguments":{"operation":"upper","text":"hi"}}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(call))
	_ = zw.Close()
	for _, path := range []string{"/calls", "/calls/batch", "/approvals/apr_x"} {
		r := e.do("POST", path, gz.Bytes(), map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, false)
		var p struct{ Code, Detail string }
		r.json(t, &p)
		if r.status != 415 || p.Code != "unsupported_media_type" || !strings.Contains(p.Detail, `Content-Encoding "gzip"`) || !strings.Contains(p.Detail, "uncompressed") {
			t.Errorf("%s: %d %+v", path, r.status, p)
		}
	}
	// identity is no encoding at all.
	r := e.do("POST", "/calls", []byte(call), map[string]string{"Content-Type": "application/json", "Content-Encoding": "identity"}, true)
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"HI"`)) {
		t.Errorf("identity: %d %s", r.status, r.body)
	}
}
