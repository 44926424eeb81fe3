package http

import (
	"net/http"
	"strings"
	"testing"
)

// TestJWTExpOutOfRange: an exp beyond int64 seconds is converted by
// go-oidc in an implementation-defined way (the distant past on amd64);
// the token is refused for what it is, not as expired. An exp far ahead
// but within range is a valid token.
func TestJWTExpOutOfRange(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	e := jwtEnv(t, p, false, &clock{}, nil, nil)
	for _, exp := range []float64{1e300, 1e19, -1e19} {
		r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims("alice", map[string]any{"exp": exp}))), true)
		if wa := r.header.Get("WWW-Authenticate"); r.status != 401 || !strings.Contains(wa, `error="invalid_token"`) || !strings.Contains(wa, "exp is out of range") {
			t.Errorf("exp %g: %d %s; want 401 invalid_token, exp out of range", exp, r.status, wa)
		}
	}
	for _, exp := range []float64{1e18, 1 << 62, 9007199254740991} {
		if r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims("alice", map[string]any{"exp": exp}))), true); r.status != 200 {
			t.Errorf("exp %g: %d %s; want 200", exp, r.status, r.header.Get("WWW-Authenticate"))
		}
	}
}

// TestJWTUnusableSub: a correctly signed token whose sub cannot be
// recorded (a newline or NUL, more than 256 characters) is a bad token,
// 401 invalid_token naming sub, not a caller lacking a scope (403).
func TestJWTUnusableSub(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	e := jwtEnv(t, p, false, &clock{}, nil, nil)
	for _, sub := range []string{"a\nb", "a\x00b", strings.Repeat("s", 257)} {
		r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims(sub, nil))), true)
		var pr Problem
		r.json(t, &pr)
		if wa := r.header.Get("WWW-Authenticate"); r.status != 401 || pr.Code != "unauthorized" || !strings.Contains(wa, `error="invalid_token"`) || !strings.Contains(wa, "sub must be at most 256 characters") {
			t.Errorf("sub %.20q: %d %s %s; want 401 invalid_token naming sub", sub, r.status, pr.Code, wa)
		}
	}
	if r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims(strings.Repeat("é", 256), nil))), true); r.status != 200 {
		t.Errorf("a sub of 256 characters: %d %s", r.status, r.header.Get("WWW-Authenticate"))
	}
	// A token without sub, or with an empty one, names no
	// caller: also the token's fault.
	noSub := p.claims("", nil)
	delete(noSub, "sub")
	for name, c := range map[string]map[string]any{"no sub": noSub, "empty sub": p.claims("", nil)} {
		r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", c)), true)
		if wa := r.header.Get("WWW-Authenticate"); r.status != 401 || !strings.Contains(wa, `error="invalid_token"`) || !strings.Contains(wa, "no sub claim") {
			t.Errorf("%s: %d %s; want 401 invalid_token naming sub", name, r.status, wa)
		}
	}
}

// TestTwoAuthorizationHeaders: which of two Authorization headers counts
// would be a guess (Go reads the first, a proxy may have checked the
// last), so the request is refused as malformed (invalid_request), as a
// header that is not "Bearer <token>" is, whichever of them is valid.
func TestTwoAuthorizationHeaders(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	e := jwtEnv(t, p, false, &clock{}, nil, nil)
	good := "Bearer " + sign(t, k1, "k1", p.claims("alice", nil))
	for _, hs := range [][]string{{good, "Bearer bad"}, {"Bearer bad", good}, {good, good}} {
		req, err := http.NewRequest("GET", e.ts.URL+"/tools", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header["Authorization"] = hs
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if wa := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || !strings.Contains(wa, `error="invalid_request"`) || !strings.Contains(wa, "2 Authorization headers") {
			t.Errorf("two Authorization headers: %d %s; want 401 invalid_request", resp.StatusCode, wa)
		}
	}
	if r := e.do("GET", "/tools", nil, map[string]string{"Authorization": good}, true); r.status != 200 {
		t.Errorf("one Authorization header: %d", r.status)
	}
}
