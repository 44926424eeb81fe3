package http

import (
	"bytes"
	"strings"
	"testing"
)

// TestJWTIssNotAString: a token whose iss is a list was refused as if its
// claims were not a JSON object; the answer now names the claim.
func TestJWTIssNotAString(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	var logs bytes.Buffer
	e := jwtEnv(t, p, false, &clock{}, &logs, nil)
	tok := sign(t, k1, "k1", p.claims("alice", map[string]any{"iss": []string{p.ts.URL}}))
	r := e.do("GET", "/tools", nil, bearerHeader(tok), true)
	if wa := r.header.Get("WWW-Authenticate"); r.status != 401 || !strings.Contains(wa, `error_description="the token's iss is not a string"`) {
		t.Errorf("%d, WWW-Authenticate %s; want 401 saying iss is not a string", r.status, wa)
	}
}
