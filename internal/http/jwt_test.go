package http

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/ratelimit"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// idp is a test identity provider on loopback: OIDC discovery and a JWKS
// whose keys the test rotates.
type idp struct {
	t       *testing.T
	ts      *httptest.Server
	mu      sync.Mutex
	keys    map[string]*rsa.PrivateKey // published, by kid
	fetches atomic.Int64
}

func newIDP(t *testing.T) *idp {
	p := &idp{t: t, keys: map[string]*rsa.PrivateKey{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": p.ts.URL, "jwks_uri": p.ts.URL + "/jwks", "authorization_endpoint": p.ts.URL + "/auth",
			"token_endpoint": p.ts.URL + "/token", "id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		defer p.mu.Unlock()
		var set jose.JSONWebKeySet
		for kid, k := range p.keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "RS256", Use: "sig"})
		}
		_ = json.NewEncoder(w).Encode(set)
	})
	p.ts = httptest.NewServer(mux)
	t.Cleanup(p.ts.Close)
	return p
}

func newRSA(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func (p *idp) publish(kid string, k *rsa.PrivateKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys[kid] = k
}

// sign makes an RS256 JWT with key kid and claims over the defaults.
func sign(t *testing.T, k *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: k}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (p *idp) claims(sub string, extra map[string]any) map[string]any {
	now := time.Now()
	c := map[string]any{"iss": p.ts.URL, "aud": "toolsvc", "sub": sub, "scope": "call", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

// issuers checks an Issuer resource of p as cmd/toolsvc does.
func (p *idp) issuers(t *testing.T, discovery bool) []JWTIssuer {
	spec := policy.IssuerSpec{
		Issuer: p.ts.URL, Audience: "toolsvc", Algorithms: []string{"RS256"},
		Callers: []policy.IssuerRule{
			{Name: "ops", Match: map[string][]string{"team": {"ops"}}, Tools: []string{"text__*", "test__priv"}},
			{Name: "others", Tools: []string{"text__*"}, RateLimit: &policy.RateLimitSpec{PerSecond: 0.01, Burst: 2}},
		},
	}
	if discovery {
		spec.Discovery = true
	} else {
		spec.JWKSURL = p.ts.URL + "/jwks"
	}
	iss, err := policy.NewIssuers([]policy.IssuerDocument{{Name: "test", Source: "test.yaml:1", Spec: spec}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	is := iss[0]
	return []JWTIssuer{{Name: is.Name, Issuer: is.Issuer, Audience: is.Audience, Discovery: is.Discovery, JWKSURL: is.JWKSURL,
		Algorithms: is.Algorithms, ClockSkew: is.ClockSkew, Map: is.Caller}}
}

type clock struct{ off atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *clock) advance(d time.Duration) { c.off.Add(int64(d)) }

func jwtEnv(t *testing.T, p *idp, discovery bool, clk *clock, logs *bytes.Buffer, pol registry.Policy) *env {
	var mu sync.Mutex
	return newEnv(t, func(d *Deps, o *registry.Options) {
		d.Identity = NewTokenIdentity(JWTOptions{Issuers: p.issuers(t, discovery), Now: clk.now, MinRefresh: time.Minute}, nil)
		d.RateLimiter = ratelimit.NewLocal(0, nil)
		d.Registerer = prometheus.NewRegistry()
		if logs != nil {
			o.Logger = slog.New(slog.NewJSONHandler(lockedWriter{&mu, logs}, nil))
		}
		if pol != nil {
			o.Policy = pol
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func bearerHeader(tok string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"}
}

func toolNames(t *testing.T, r response) []string {
	var out struct {
		Tools []struct{ Name string } `json:"tools"`
	}
	r.json(t, &out)
	var names []string
	for _, tl := range out.Tools {
		names = append(names, tl.Name)
	}
	return names
}

func TestJWTCallers(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	clk := &clock{}
	var logs bytes.Buffer
	e := jwtEnv(t, p, false, clk, &logs, nil)

	good := sign(t, k1, "k1", p.claims("alice", nil))
	r := e.do("GET", "/tools", nil, bearerHeader(good), true)
	if r.status != 200 {
		t.Fatalf("valid token: %d %s", r.status, r.body)
	}
	if got := strings.Join(toolNames(t, r), ","); got != "text__transform" {
		t.Errorf("the mapped caller sees %s, want only text__transform", got)
	}
	if r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims("ann", map[string]any{"team": "ops"}))), true); !strings.Contains(strings.Join(toolNames(t, r), ","), "test__priv") {
		t.Errorf("the ops rule did not apply: %s", r.body)
	}

	// alg none: the header says none, there is no signature.
	b64 := base64.RawURLEncoding.EncodeToString
	payload, _ := json.Marshal(p.claims("mallory", nil))
	none := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64(payload) + "."
	// HS256 with the public key as the HMAC secret.
	pub, _ := x509.MarshalPKIXPublicKey(&k1.PublicKey)
	head := b64([]byte(`{"alg":"HS256","typ":"JWT","kid":"k1"}`)) + "." + b64(payload)
	mac := hmac.New(sha256.New, pub)
	mac.Write([]byte(head))
	hmacTok := head + "." + b64(mac.Sum(nil))
	k9 := newRSA(t)
	for _, tc := range []struct {
		name, token, desc string
	}{
		{"expired", sign(t, k1, "k1", p.claims("alice", map[string]any{"exp": time.Now().Add(-time.Hour).Unix()})), "expired"},
		{"wrong audience", sign(t, k1, "k1", p.claims("alice", map[string]any{"aud": "other"})), "not meant for this service"},
		{"wrong issuer", sign(t, k1, "k1", p.claims("alice", map[string]any{"iss": "https://evil.example"})), "issuer is not accepted"},
		{"alg none", none, "accepted algorithm"},
		{"HMAC with the public key", hmacTok, "accepted algorithm"},
		{"unknown kid", sign(t, k9, "k9", p.claims("alice", nil)), "signature could not be verified"},
		{"wrong key, known kid", sign(t, k9, "k1", p.claims("alice", nil)), "signature could not be verified"},
		{"not yet valid", sign(t, k1, "k1", p.claims("alice", map[string]any{"nbf": time.Now().Add(time.Hour).Unix()})), "not valid yet"},
		// NumericDates are numbers: a string was read for exp and ignored for nbf.
		{"nbf a string", sign(t, k1, "k1", p.claims("alice", map[string]any{"nbf": strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)})), "nbf is not a number"},
		{"exp a string", sign(t, k1, "k1", p.claims("alice", map[string]any{"exp": "9999999999"})), "exp is not a number"},
		{"iat a string", sign(t, k1, "k1", p.claims("alice", map[string]any{"iat": "1"})), "iat is not a number"},
		// Claims the verifier reads with fixed types: a signed token whose
		// claim has another is not a bad signature.
		{"iat not a number", sign(t, k1, "k1", p.claims("alice", map[string]any{"iat": "x"})), "the token's iat is not a number"},
		{"aud a number", sign(t, k1, "k1", p.claims("alice", map[string]any{"aud": 5})), "the token's aud is not a string or a list of strings"},
		{"sub a number", sign(t, k1, "k1", p.claims("alice", map[string]any{"sub": 5})), "the token's sub is not a string"},
		{"_claim_names odd", sign(t, k1, "k1", p.claims("alice", map[string]any{"_claim_names": []int{1}})), "_claim_names or _claim_sources"},
		{"aud a number, wrong key", sign(t, k9, "k1", p.claims("alice", map[string]any{"aud": 5})), "signature could not be verified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.do("GET", "/tools", nil, bearerHeader(tc.token), true)
			wa := r.header.Get("WWW-Authenticate")
			if r.status != 401 || !strings.HasPrefix(wa, `Bearer realm="toolsvc", error="invalid_token", error_description="`) || !strings.Contains(wa, tc.desc) {
				t.Errorf("%d, WWW-Authenticate %s; want 401 invalid_token mentioning %q", r.status, wa, tc.desc)
			}
			if !strings.Contains(wa, `issuer="`) {
				t.Errorf("the challenge does not name the expected issuer: %s", wa)
			}
		})
	}
	if r := e.do("GET", "/tools", nil, nil, true); r.status != 401 || r.header.Get("WWW-Authenticate") != `Bearer realm="toolsvc", issuer="`+p.ts.URL+`"` {
		t.Errorf("no credentials: %d %q (RFC 6750: no error code)", r.status, r.header.Get("WWW-Authenticate"))
	}

	// Unknown kids refetch the key set at most once per MinRefresh.
	before := p.fetches.Load()
	for range 5 {
		e.do("GET", "/tools", nil, bearerHeader(sign(t, k9, "k9", p.claims("alice", nil))), true)
	}
	if n := p.fetches.Load() - before; n > 1 {
		t.Errorf("5 tokens with an unknown kid fetched the key set %d times; want at most 1", n)
	}

	// Rotation: a new key is published; once the refresh interval has
	// passed, its tokens are accepted without a restart.
	k2 := newRSA(t)
	p.publish("k2", k2)
	clk.advance(2 * time.Minute)
	if r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k2, "k2", p.claims("alice", nil))), true); r.status != 200 {
		t.Errorf("rotated key: %d %s", r.status, r.body)
	}

	// The call log carries issuer and subject, never the token.
	if r, _ := e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`); r.status != 401 {
		t.Fatalf("anonymous call: %d", r.status)
	}
	r = e.do("POST", "/calls", []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`), bearerHeader(good), true)
	if r.status != 200 {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	out := logs.String()
	if !strings.Contains(out, `"issuer":"`+p.ts.URL+`"`) || !strings.Contains(out, `"subject":"alice"`) || !strings.Contains(out, `"caller":"test:alice"`) {
		t.Errorf("the call log lacks issuer, subject or caller:\n%s", out)
	}
	if strings.Contains(out, good) || strings.Contains(out, strings.Split(good, ".")[2]) {
		t.Error("the token reached the log")
	}
}

func TestJWTDiscovery(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	e := jwtEnv(t, p, true, &clock{}, nil, nil)
	if r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims("alice", nil))), true); r.status != 200 {
		t.Fatalf("token through OIDC discovery: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/tools", nil, bearerHeader(sign(t, k1, "k1", p.claims("alice", map[string]any{"exp": time.Now().Add(-time.Minute).Unix()}))), true); r.status != 401 {
		t.Errorf("expired token through discovery: %d", r.status)
	}
}

func TestJWTClaimsReachPolicy(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	pol, err := policy.New([]policy.Document{{Name: "claims", Source: "p.yaml:1", Spec: policy.Spec{Rules: []policy.Rule{{
		Name: "ops-only", Tools: []string{"text__*"}, Decision: registry.Deny, Reason: "ops only",
		Condition: `!("team" in caller.claims) || caller.claims.team != "ops" || caller.issuer == ""`,
	}}}}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := jwtEnv(t, p, false, &clock{}, nil, pol)
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)
	var res registry.Result
	r := e.do("POST", "/calls", body, bearerHeader(sign(t, k1, "k1", p.claims("ann", map[string]any{"team": "ops"}))), true)
	r.json(t, &res)
	if res.Status != registry.StatusOK {
		t.Errorf("ops claim: %s", r.body)
	}
	r = e.do("POST", "/calls", body, bearerHeader(sign(t, k1, "k1", p.claims("bob", map[string]any{"team": "dev"}))), true)
	res = registry.Result{}
	r.json(t, &res)
	if res.Error == nil || res.Error.Code != registry.CodePolicyDenied {
		t.Errorf("dev claim was not denied by the condition on caller.claims: %s", r.body)
	}
}

func TestRateLimitHTTPAndMCP(t *testing.T) {
	p := newIDP(t)
	k1 := newRSA(t)
	p.publish("k1", k1)
	e := jwtEnv(t, p, false, &clock{}, nil, nil)
	h := bearerHeader(sign(t, k1, "k1", p.claims("bob", nil))) // rule "others": burst 2, 0.01/s
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)
	for i := range 2 {
		if r := e.do("POST", "/calls", body, h, true); r.status != 200 || r.header.Get("RateLimit-Policy") != `"caller";q=2;w=200` {
			t.Fatalf("call %d: %d, RateLimit-Policy %q", i, r.status, r.header.Get("RateLimit-Policy"))
		}
	}
	r := e.do("POST", "/calls", body, h, true)
	var prob Problem
	r.json(t, &prob)
	if r.status != 429 || prob.Code != "rate_limited" || r.header.Get("Retry-After") == "" || !strings.HasPrefix(r.header.Get("RateLimit"), `"caller";r=0;t=`) {
		t.Errorf("over the limit: %d %s, headers %v", r.status, r.body, r.header)
	}
	// A batch over the limit runs none of its calls.
	if r := e.do("POST", "/calls/batch", []byte(`{"calls":[`+string(body)+`]}`), h, true); r.status != 429 {
		t.Errorf("batch over the limit: %d", r.status)
	}
	// /mcp answers tools/call with a JSON-RPC error.
	var rpc struct {
		ID    int `json:"id"`
		Error *struct {
			Code int `json:"code"`
			Data struct {
				Code       string `json:"code"`
				RetryAfter int    `json:"retryAfter"`
			} `json:"data"`
		} `json:"error"`
	}
	mcpCallAs(t, e, h, &rpc)
	if rpc.ID != 7 || rpc.Error == nil || rpc.Error.Code != mcpRateLimited || rpc.Error.Data.Code != "rate_limited" || rpc.Error.Data.RetryAfter < 1 {
		t.Errorf("MCP over the limit: %+v", rpc)
	}
	// Another caller of the same rule has a bucket of its own; the metric
	// is labelled by the rule, not by the subject.
	if r := e.do("POST", "/calls", body, bearerHeader(sign(t, k1, "k1", p.claims("carol", nil))), true); r.status != 200 {
		t.Errorf("another caller: %d", r.status)
	}
	if n := testutil.ToFloat64(e.srv.rate.limited.WithLabelValues("Issuer/test/others", "caller")); n != 3 {
		t.Errorf("toolsvc_rate_limited_total = %v, want 3", n)
	}
}

func TestToolRateLimit(t *testing.T) {
	caller := &registry.Caller{ID: "x", Scopes: []registry.Scope{registry.ScopeCall}, RateLimit: &registry.RateLimit{
		Name: "x", PerSecond: 100, Burst: 100, Tools: []registry.ToolRateLimit{{Tools: []string{"json__*"}, PerSecond: 0.01, Burst: 1}},
	}}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"tok": caller}
		d.RateLimiter = ratelimit.NewLocal(0, nil)
	})
	h := bearerHeader("tok")
	jq := []byte(`{"toolName":"json__query","arguments":{"filter":".","input":{}}}`)
	text := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)
	r := e.do("POST", "/calls", jq, h, true)
	if r.status != 200 || len(r.header.Values("RateLimit-Policy")) != 2 {
		t.Fatalf("first json call: %d, RateLimit-Policy %v", r.status, r.header.Values("RateLimit-Policy"))
	}
	if r := e.do("POST", "/calls", jq, h, true); r.status != 429 {
		t.Errorf("second json call: %d, want 429 from the tool's bucket", r.status)
	}
	if r := e.do("POST", "/calls", text, h, true); r.status != 200 || len(r.header.Values("RateLimit-Policy")) != 1 {
		t.Errorf("a tool without a bucket of its own: %d %v", r.status, r.header.Values("RateLimit-Policy"))
	}
	// A batch with more calls of a bucket than its burst can never run:
	// it is told to split, not to retry.
	r = e.do("POST", "/calls/batch", []byte(`{"calls":[`+string(text)+`,`+string(jq)+`,`+string(jq)+`]}`), h, true)
	var prob Problem
	r.json(t, &prob)
	if r.status != 400 || prob.Code != "invalid_batch" || r.header.Get("Retry-After") != "" || !strings.Contains(prob.Detail, "2 calls") || !strings.Contains(prob.Detail, "burst is 1") {
		t.Errorf("batch over a burst: %d %s, headers %v", r.status, r.body, r.header)
	}
}
