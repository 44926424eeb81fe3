package http

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// faultyIDP is an identity provider on loopback whose discovery document
// and key sets can fail, hang, move or redirect.
type faultyIDP struct {
	ts          *httptest.Server
	mu          sync.Mutex
	sets        map[string][]jose.JSONWebKey // key sets by path; other paths 404
	jwksPath    string                       // the discovery document's jwks_uri
	fail        int                          // a status every answer has, when not 0
	hang        bool                         // answers only when the request ends
	redirect    string                       // where /jwks redirects, when set
	discoveries atomic.Int64
}

func newFaultyIDP(t *testing.T) *faultyIDP {
	return startFaultyIDP(t, httptest.NewServer)
}

// startFaultyIDP starts the provider with start (httptest.NewServer or
// httptest.NewTLSServer).
func startFaultyIDP(t *testing.T, start func(http.Handler) *httptest.Server) *faultyIDP {
	p := &faultyIDP{sets: map[string][]jose.JSONWebKey{}, jwksPath: "/jwks"}
	p.ts = start(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		fail, hang, redirect, jwksPath, set, ok := p.fail, p.hang, p.redirect, p.jwksPath, p.sets[r.URL.Path], p.sets[r.URL.Path] != nil
		p.mu.Unlock()
		switch {
		case hang:
			<-r.Context().Done()
			return
		case fail != 0:
			http.Error(w, "provider down", fail)
			return
		case r.URL.Path == "/.well-known/openid-configuration":
			p.discoveries.Add(1)
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": p.ts.URL, "jwks_uri": p.ts.URL + jwksPath})
			return
		case redirect != "" && r.URL.Path == "/jwks":
			http.Redirect(w, r, redirect, http.StatusFound)
			return
		case !ok:
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: set})
	}))
	t.Cleanup(p.ts.Close)
	return p
}

// publish adds the public key of k, as kid, to the key set at path.
func (p *faultyIDP) publish(path, kid string, k *rsa.PrivateKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sets[path] = append(p.sets[path], jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
}

func (p *faultyIDP) set(f func(p *faultyIDP)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

func (p *faultyIDP) claims(extra map[string]any) map[string]any {
	c := map[string]any{"iss": p.ts.URL, "aud": "toolsvc", "sub": "alice", "scope": "call", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// identity is a TokenIdentity of p, its keys read through discovery or
// at p's /jwks, with a client that gives up on a hanging provider soon.
func (p *faultyIDP) identity(t *testing.T, discovery bool, clk *clock, logs *bytes.Buffer) *TokenIdentity {
	spec := policy.IssuerSpec{Issuer: p.ts.URL, Audience: "toolsvc", Algorithms: []string{"RS256", "ES256"}, Discovery: discovery}
	if !discovery {
		spec.JWKSURL = p.ts.URL + "/jwks"
	}
	iss, err := policy.NewIssuers([]policy.IssuerDocument{{Name: "test", Source: "test.yaml:1", Spec: spec}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	is := iss[0]
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(lockedWriter{&sync.Mutex{}, logs}, nil))
	}
	return NewTokenIdentity(JWTOptions{Issuers: []JWTIssuer{{Name: is.Name, Issuer: is.Issuer, Audience: is.Audience,
		Discovery: is.Discovery, JWKSURL: is.JWKSURL, Algorithms: is.Algorithms, ClockSkew: is.ClockSkew, Map: is.Caller}},
		Client: &http.Client{Transport: p.ts.Client().Transport, Timeout: 300 * time.Millisecond}, Now: clk.now, MinRefresh: time.Minute, Logger: log}, nil)
}

// callBody is a call any caller of the test issuers may make. (The
// tests post calls: openapi.yaml has no 503 for GET /tools yet.)
var callBody = []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)

func identityEnv(t *testing.T, id *TokenIdentity) *env {
	return newEnv(t, func(d *Deps, o *registry.Options) { d.Identity = id })
}

// TestJWTKeysUnavailable: while the provider's keys cannot be fetched, a
// token the cached keys cannot check is answered 503 with Retry-After —
// a client told invalid_token would throw a good token away — while the
// tokens the cached keys can check are checked: good ones admitted, bad
// ones refused.
func TestJWTKeysUnavailable(t *testing.T) {
	k1, k2, bad := newRSA(t), newRSA(t), newRSA(t)
	for _, tc := range []struct {
		name      string
		discovery bool
		down      func(p *faultyIDP)
	}{
		{"key set 500", false, func(p *faultyIDP) { p.fail = 500 }},
		{"discovery 500", true, func(p *faultyIDP) { p.fail = 503 }},
		{"discovery hangs", true, func(p *faultyIDP) { p.hang = true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFaultyIDP(t)
			p.publish("/jwks", "k1", k1)
			p.set(tc.down)
			clk := &clock{}
			e := identityEnv(t, p.identity(t, tc.discovery, clk, nil))
			good := bearerHeader(sign(t, k1, "k1", p.claims(nil)))
			unavailable := func(what string, h map[string]string) {
				t.Helper()
				r := e.do("POST", "/calls", callBody, h, true)
				var pr Problem
				r.json(t, &pr)
				if r.status != 503 || r.header.Get("Retry-After") == "" || r.header.Get("WWW-Authenticate") != "" ||
					!strings.Contains(pr.Detail, "keys could not be fetched") {
					t.Errorf("%s: %d %s, Retry-After %q, WWW-Authenticate %q; want 503 with Retry-After saying the keys could not be fetched",
						what, r.status, r.body, r.header.Get("Retry-After"), r.header.Get("WWW-Authenticate"))
				}
			}
			// The first request fetches and fails; the second finds the
			// failure within MinRefresh.
			unavailable("a good token, no keys fetched yet", good)
			unavailable("a good token again", good)

			p.set(func(p *faultyIDP) { p.fail, p.hang = 0, false })
			clk.advance(2 * time.Minute)
			if r := e.do("POST", "/calls", callBody, good, true); r.status != 200 {
				t.Fatalf("the provider is back: %d %s", r.status, r.header.Get("WWW-Authenticate"))
			}

			// Down again, with k1 cached and old.
			p.set(tc.down)
			clk.advance(20 * time.Minute)
			if r := e.do("POST", "/calls", callBody, good, true); r.status != 200 {
				t.Errorf("a good token of a cached key: %d %s", r.status, r.header.Get("WWW-Authenticate"))
			}
			r := e.do("POST", "/calls", callBody, bearerHeader(sign(t, bad, "k1", p.claims(nil))), true)
			if wa := r.header.Get("WWW-Authenticate"); r.status != 401 || !strings.Contains(wa, "signature could not be verified") {
				t.Errorf("a bad signature of a cached kid: %d %s; want 401 invalid_token", r.status, wa)
			}
			// A key rotated in while the provider is down.
			unavailable("a token of a kid not cached", bearerHeader(sign(t, k2, "k2", p.claims(nil))))
		})
	}
}

// TestJWTDiscoveryFollowsMovedKeys: the discovery document is read again
// when the key set it named cannot be fetched, and when it is old, so a
// provider that moves its jwks_uri is followed without a restart.
func TestJWTDiscoveryFollowsMovedKeys(t *testing.T) {
	k1, k2, k3 := newRSA(t), newRSA(t), newRSA(t)
	p := newFaultyIDP(t)
	p.publish("/jwks", "k1", k1)
	clk := &clock{}
	id := p.identity(t, true, clk, nil)
	check := func(what string, k *rsa.PrivateKey, kid string) {
		t.Helper()
		if _, err := id.Token(context.Background(), sign(t, k, kid, p.claims(nil))); err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	check("before the move", k1, "k1")

	// The provider moves its keys; the old URL is gone.
	p.set(func(p *faultyIDP) { p.jwksPath, p.sets = "/jwks2", map[string][]jose.JSONWebKey{} })
	p.publish("/jwks2", "k1", k1)
	p.publish("/jwks2", "k2", k2)
	clk.advance(2 * time.Minute)
	check("a new key at the moved key set (the old one 404s)", k2, "k2")
	if n := p.discoveries.Load(); n != 2 {
		t.Errorf("the discovery document was read %d times; want 2", n)
	}

	// It moves again, and the old URL still serves the old keys: the
	// document is read again once the keys are old.
	p.set(func(p *faultyIDP) { p.jwksPath = "/jwks3" })
	p.publish("/jwks3", "k3", k3)
	clk.advance(20 * time.Minute)
	check("a new key once the keys are old", k3, "k3")
}

// TestJWTCaseVariantClaims: registered claim names are case-sensitive
// (RFC 7519). Go's JSON decoding into a struct (go-oidc's exp and aud,
// the iss that picks the issuer) matches them in any case, a map does
// not: a token with exp in the past and Exp in the future was admitted.
func TestJWTCaseVariantClaims(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	e := jwtEnv(t, p, false, &clock{}, nil, nil)
	now := time.Now().Unix()
	// The claims in this order: the decoders keep the last of two names
	// they fold together.
	claims := func(c string) string {
		return fmt.Sprintf(`{"iss":%q,"sub":"alice","scope":"call",%s}`, p.ts.URL, c)
	}
	for _, tc := range []struct {
		name, claims, claim string
	}{
		{"exp and Exp", claims(fmt.Sprintf(`"aud":"toolsvc","exp":%d,"Exp":%d`, now-30*24*3600, now+365*24*3600)), "Exp"},
		{"aud and AUD", claims(fmt.Sprintf(`"exp":%d,"aud":"other","AUD":"toolsvc"`, now+3600)), "AUD"},
		{"AUD only", claims(fmt.Sprintf(`"exp":%d,"AUD":"toolsvc"`, now+3600)), "AUD"},
		{"nbf and NBF", claims(fmt.Sprintf(`"aud":"toolsvc","exp":%d,"NBF":%d`, now+3600, now+3600)), "NBF"},
		{"sub and ſub (a long s)", claims(fmt.Sprintf(`"aud":"toolsvc","exp":%d,"ſub":"root"`, now+3600)), "'ub"},
		{"iss and Iss", claims(fmt.Sprintf(`"aud":"toolsvc","exp":%d,"Iss":"https://evil.example"`, now+3600)), "Iss"},
	} {
		r := e.do("POST", "/calls", callBody, bearerHeader(signPayload(t, k1, "k1", tc.claims)), true)
		if wa := r.header.Get("WWW-Authenticate"); r.status != 401 || !strings.Contains(wa, `error="invalid_token"`) || !strings.Contains(wa, "claim "+tc.claim+",") {
			t.Errorf("%s: %d %s; want 401 invalid_token naming %s", tc.name, r.status, wa, tc.claim)
		}
	}
	// Claims the RFC does not register may come in any case.
	if r := e.do("POST", "/calls", callBody, bearerHeader(sign(t, k1, "k1", p.claims("bob", map[string]any{"Team": "x", "team": "y"}))), true); r.status != 200 {
		t.Errorf("claims Team and team: %d %s", r.status, r.header.Get("WWW-Authenticate"))
	}
}

// signPayload makes an RS256 JWT of payload, as it is, with key kid.
func signPayload(t *testing.T, k *rsa.PrivateKey, kid, payload string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestJWTKidlessTokens: a token without kid is checked against the keys
// that fit its algorithm, at most 16 of them, and against a set once
// (the second try, after a refresh, only when a new set came): anyone
// can send a token, and checking one against thousands of RSA keys cost
// a second.
func TestJWTKidlessTokens(t *testing.T) {
	k1 := newRSA(t)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := newFaultyIDP(t)
	// 20 EC keys, which cannot have made an RS256 signature, and k1.
	for range 20 {
		p.set(func(p *faultyIDP) {
			p.sets["/jwks"] = append(p.sets["/jwks"], jose.JSONWebKey{Key: &ec.PublicKey, Algorithm: "ES256", Use: "sig"})
		})
	}
	p.publish("/jwks", "", k1)
	id := p.identity(t, false, &clock{}, nil)
	if _, err := id.Token(context.Background(), sign(t, k1, "", p.claims(nil))); err != nil {
		t.Errorf("a kid-less token of the one RSA key among 20 EC keys: %v", err)
	}

	// 17 RSA keys: a kid-less token is refused, saying why.
	for range 16 {
		p.publish("/jwks", "", k1)
	}
	id = p.identity(t, false, &clock{}, nil)
	_, err = id.Token(context.Background(), sign(t, k1, "", p.claims(nil)))
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Status != 401 || !strings.Contains(ae.Description, "names no key (kid)") || !strings.Contains(ae.Description, "more than 16 keys") {
		t.Errorf("a kid-less token, 17 RSA keys: %v; want 401 saying it must carry a kid", err)
	}
	if _, err := id.Token(context.Background(), sign(t, k1, "", p.claims(nil))); err == nil {
		t.Error("a kid-less token was admitted beyond the bound")
	}

	// 12 RSA keys, one kid: a kid-less token of a key the issuer does not
	// publish costs what a token naming that kid costs (12 checks), not
	// twice as much. Allocations stand for the checks: each allocates
	// alike.
	p.set(func(p *faultyIDP) { p.sets["/jwks"] = nil })
	for range 12 {
		p.publish("/jwks", "dup", k1)
	}
	p.publish("/jwks", "one", k1)
	id = p.identity(t, false, &clock{}, nil)
	other := newRSA(t)
	allocs := func(kid string) float64 {
		tok := sign(t, other, kid, p.claims(nil))
		if _, err := id.Token(context.Background(), tok); err == nil {
			t.Fatal("a token of a key not published was admitted")
		}
		return testing.AllocsPerRun(5, func() { _, _ = id.Token(context.Background(), tok) })
	}
	one, dup, none := allocs("one"), allocs("dup"), allocs("")
	check := (dup - one) / 11
	if none > dup+check*6 {
		t.Errorf("a kid-less token cost %.0f allocations, a token naming the 12 keys' kid %.0f (one check: about %.0f): the kid-less one was checked more than once per key",
			none, dup, check)
	}
}

// TestJWTKeyFetchRedirects: the key set is not fetched through a
// redirect to another host: whoever answers there would choose the keys
// that sign tokens. A redirect within the host is followed.
func TestJWTKeyFetchRedirects(t *testing.T) {
	mallory := newRSA(t)
	elsewhere := newFaultyIDP(t)
	elsewhere.publish("/jwks", "m", mallory)
	p := newFaultyIDP(t)
	p.set(func(p *faultyIDP) { p.redirect = elsewhere.ts.URL + "/jwks" })
	var logs bytes.Buffer
	e := identityEnv(t, p.identity(t, false, &clock{}, &logs))
	r := e.do("POST", "/calls", callBody, bearerHeader(sign(t, mallory, "m", p.claims(nil))), true)
	if r.status != 503 {
		t.Errorf("keys redirected to another host: %d %s; want 503, the keys not fetched", r.status, r.body)
	}
	if out := logs.String(); !strings.Contains(out, "issuer "+p.ts.URL) || !strings.Contains(out, "redirects to another host") {
		t.Errorf("the log does not say the issuer's keys were redirected elsewhere:\n%s", out)
	}

	k1 := newRSA(t)
	p = newFaultyIDP(t)
	p.publish("/keys", "k1", k1)
	p.set(func(p *faultyIDP) { p.redirect = "/keys" })
	if _, err := p.identity(t, false, &clock{}, nil).Token(context.Background(), sign(t, k1, "k1", p.claims(nil))); err != nil {
		t.Errorf("keys redirected within the host: %v", err)
	}

	// From https to http on the same host and port.
	p = startFaultyIDP(t, httptest.NewTLSServer)
	p.set(func(p *faultyIDP) { p.redirect = "http://" + p.ts.Listener.Addr().String() + "/keys" })
	logs.Reset()
	_, err := p.identity(t, false, &clock{}, &logs).Token(context.Background(), sign(t, k1, "k1", p.claims(nil)))
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Status != 503 || !strings.Contains(logs.String(), "issuer "+p.ts.URL) || !strings.Contains(logs.String(), "from https to http") {
		t.Errorf("keys redirected from https to http: %v; want 503, and a log line naming the issuer saying so:\n%s", err, logs.String())
	}
}
