package http

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestJWTOutageLogsWarn: an identity provider that is down refuses every
// token it signed until it is back; each refused request is a warning,
// like a full store, not an error line per request to page about.
func TestJWTOutageLogsWarn(t *testing.T) {
	k1 := newRSA(t)
	for _, tc := range []struct {
		name string
		down func(p *faultyIDP)
	}{
		{"key set 500", func(p *faultyIDP) { p.fail = 500 }},
		{"key set hangs", func(p *faultyIDP) { p.hang = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFaultyIDP(t)
			p.publish("/jwks", "k1", k1)
			p.set(tc.down)
			var logs bytes.Buffer
			id := p.identity(t, false, &clock{}, nil)
			e := newEnv(t, func(d *Deps, o *registry.Options) {
				d.Identity = id
				d.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&sync.Mutex{}, &logs}, nil))
			})
			r := e.do("POST", "/calls", callBody, bearerHeader(sign(t, k1, "k1", p.claims(nil))), true)
			if r.status != 503 {
				t.Fatalf("a good token while the provider is down: %d %s; want 503", r.status, r.body)
			}
			out := logs.String()
			if strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, `"level":"WARN","msg":"request failed"`) ||
				!strings.Contains(out, "keys could not be fetched") {
				t.Errorf("log:\n%s\nwant one warning saying the keys could not be fetched, no error", out)
			}
		})
	}
}
