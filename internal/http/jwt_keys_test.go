package http

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolsvc/toolsvc/internal/policy"
)

// A nbf beyond int64 seconds is "not before the end of time", not a
// time in the distant past.
func TestJWTFarFutureNbf(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	e := jwtEnv(t, p, false, &clock{}, nil, nil)
	for _, nbf := range []float64{1e300, 1e19} {
		r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims("alice", map[string]any{"nbf": nbf}))), true)
		if wa := r.header.Get("WWW-Authenticate"); r.status != 401 || !strings.Contains(wa, "not valid yet") {
			t.Errorf("nbf %g: %d %s; want 401 not valid yet", nbf, r.status, wa)
		}
	}
}

// tokenIdentity is a TokenIdentity of one issuer whose keys come from
// url (discovery: the issuer is url).
func tokenIdentity(t *testing.T, url string, discovery bool, clk *clock) *TokenIdentity {
	spec := policy.IssuerSpec{Issuer: url, Audience: "toolsvc", Algorithms: []string{"RS256"}}
	if discovery {
		spec.Discovery = true
	} else {
		spec.JWKSURL = url + "/jwks"
	}
	iss, err := policy.NewIssuers([]policy.IssuerDocument{{Name: "test", Source: "test.yaml:1", Spec: spec}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	is := iss[0]
	return NewTokenIdentity(JWTOptions{Issuers: []JWTIssuer{{Name: is.Name, Issuer: is.Issuer, Audience: is.Audience,
		Discovery: is.Discovery, JWKSURL: is.JWKSURL, Algorithms: is.Algorithms, ClockSkew: is.ClockSkew, Map: is.Caller}},
		Now: clk.now, MinRefresh: time.Minute}, nil)
}

// While the issuer is slow to serve its keys, a token naming a kid
// nobody knows (which anyone can make) refetches them; tokens whose key
// is cached must not wait for that fetch.
func TestJWTSlowKeySetHoldsUpOnlyUnknownKids(t *testing.T) {
	k1 := newRSA(t)
	var slow atomic.Bool
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k1.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	}))
	defer ts.Close()
	// Every fetch waiting is released at once: a token of a cached but
	// stale key may start a fetch of its own beside the unknown kid's.
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()
	clk := &clock{}
	id := tokenIdentity(t, ts.URL, false, clk)
	claims := map[string]any{"iss": ts.URL, "aud": "toolsvc", "sub": "alice", "scope": "call", "exp": time.Now().Add(time.Hour).Unix()}
	good := sign(t, k1, "k1", claims)
	if _, err := id.Token(context.Background(), good); err != nil {
		t.Fatal(err)
	}

	slow.Store(true)
	clk.advance(2 * time.Minute)
	unknown := make(chan error, 1)
	go func() {
		_, err := id.Token(context.Background(), sign(t, newRSA(t), "nobody", claims))
		unknown <- err
	}()
	time.Sleep(200 * time.Millisecond) // the unknown kid's fetch hangs
	// The fetch hangs until released: a token that waited for it would
	// end with this context.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := id.Token(ctx, good); err != nil {
		t.Errorf("a token of a cached key, while the issuer's keys are fetched: %v; want it accepted without waiting for the fetch", err)
	}
	select {
	case err := <-unknown:
		t.Fatalf("the unknown kid did not wait for the fetch: %v", err)
	default:
	}
	slow.Store(false)
	releaseAll()
	if err := <-unknown; err == nil {
		t.Error("a token of an unknown key was accepted")
	}
}

// The discovery document is read with the key set's bound, not whole.
func TestJWTDiscoveryDocumentIsBounded(t *testing.T) {
	var written atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		n, _ := w.Write([]byte(`{"issuer":"` + "http://" + r.Host + `","pad":"`))
		written.Add(int64(n))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for range 1024 { // 64 MiB
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer ts.Close()
	id := tokenIdentity(t, ts.URL, true, &clock{})
	tok := sign(t, newRSA(t), "k1", map[string]any{"iss": ts.URL, "aud": "toolsvc", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	_, err := id.Token(context.Background(), tok)
	var ae *AuthError
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("a discovery document of 64 MiB: %v; want 503 saying it is larger than 1 MiB (the token is not at fault)", err)
	}
	if n := written.Load(); n > 16<<20 {
		t.Errorf("the service read %d bytes of the discovery document", n)
	}
}
