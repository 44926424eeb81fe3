package policy

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

func TestIssuerErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := func() IssuerSpec {
		return IssuerSpec{Issuer: "https://idp.example", Audience: "toolsvc", JWKSURL: "https://idp.example/keys"}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*IssuerSpec)
		want   string
	}{
		{"no issuer", func(s *IssuerSpec) { s.Issuer = "" }, "issuer is empty"},
		{"no audience", func(s *IssuerSpec) { s.Audience = "" }, "audience is empty"},
		{"two key sources", func(s *IssuerSpec) { s.Discovery = true }, "exactly one key source"},
		{"no key source", func(s *IssuerSpec) { s.JWKSURL = "" }, "exactly one key source"},
		{"HMAC", func(s *IssuerSpec) { s.Algorithms = []string{"HS256"} }, `algorithm "HS256" is not allowed`},
		{"none", func(s *IssuerSpec) { s.Algorithms = []string{"none"} }, `algorithm "none" is not allowed`},
		{"skew too large", func(s *IssuerSpec) { s.ClockSkew = "1h" }, "clockSkew"},
		{"bad URL", func(s *IssuerSpec) { s.JWKSURL = "ftp://x" }, "not an http(s) URL"},
		{"empty key set file", func(s *IssuerSpec) { s.JWKSURL, s.JWKSFile = "", "bad.json" }, "not a JSON Web Key Set"},
		{"missing key set file", func(s *IssuerSpec) { s.JWKSURL, s.JWKSFile = "", "nope.json" }, "jwksFile"},
		{"rule without name", func(s *IssuerSpec) { s.Callers = []IssuerRule{{}} }, "callers[0] needs a name"},
		{"bad tier", func(s *IssuerSpec) { s.Callers = []IssuerRule{{Name: "r", MaxTier: "root"}} }, "maxTier"},
		{"bad rate", func(s *IssuerSpec) { s.RateLimit = &RateLimitSpec{PerSecond: 0} }, "perSecond"},
		{"NaN rate", func(s *IssuerSpec) { s.RateLimit = &RateLimitSpec{PerSecond: math.NaN()} }, "perSecond must be above 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base()
			tc.mutate(&s)
			_, err := NewIssuers([]IssuerDocument{{Name: "corp", Source: "iss.yaml:3", Dir: dir, Spec: s}}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), `iss.yaml:3: Issuer "corp": `) {
				t.Errorf("error %v; want one naming the file and %q", err, tc.want)
			}
		})
	}
}

func TestIssuerMapping(t *testing.T) {
	empty := ""
	iss, err := NewIssuers([]IssuerDocument{{Name: "corp", Source: "x:1", Spec: IssuerSpec{
		Issuer: "https://idp.example", Audience: "toolsvc", Discovery: true, ScopePrefix: "toolsvc:",
		RateLimit: &RateLimitSpec{PerSecond: 5},
		Callers: []IssuerRule{
			{Name: "bots", Match: map[string][]string{"azp": {"runner"}, "groups": {"ci"}}, Tools: []string{"fs__*"}, Scopes: []registry.Scope{registry.ScopeCall},
				RateLimit: &RateLimitSpec{PerSecond: 1, Burst: 2, Tools: []ToolRateLimitSpec{{Tools: []string{"fs__write"}, PerSecond: 0.5}}}},
			{Name: "people", Match: map[string][]string{"groups": {"staff"}}, MaxTier: registry.ReadOnly},
		},
	}}, {Name: "open", Source: "x:9", Spec: IssuerSpec{Issuer: "https://other.example", Audience: "a", JWKSURL: "https://other.example/k", CallerClaim: "azp", CallerPrefix: &empty}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	corp, open := iss[0], iss[1]
	c, err := corp.Caller(map[string]any{"sub": "svc-1", "azp": "runner", "groups": []any{"ci", "x"}, "scope": "toolsvc:call toolsvc:approve openid"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "corp:svc-1" || c.Subject != "svc-1" || c.Issuer != "https://idp.example" || !slices.Equal(c.Tools, []string{"fs__*"}) ||
		!slices.Equal(c.Scopes, []registry.Scope{registry.ScopeCall}) || c.RateLimit.Name != "Issuer/corp/bots" || c.RateLimit.Burst != 2 ||
		len(c.RateLimit.Tools) != 1 || c.RateLimit.Tools[0].Burst != 1 {
		t.Errorf("bots rule: %+v %+v", c, c.RateLimit)
	}
	c, err = corp.Caller(map[string]any{"sub": "ann", "groups": []any{"staff"}, "scp": []any{"toolsvc:call"}})
	if err != nil || c.MaxTier != registry.ReadOnly || c.RateLimit.Name != "Issuer/corp" || c.RateLimit.PerSecond != 5 || c.RateLimit.Burst != 5 {
		t.Errorf("people rule: %+v %v", c, err)
	}
	if _, err := corp.Caller(map[string]any{"sub": "eve", "groups": []any{"guests"}}); err == nil || !strings.Contains(err.Error(), "no caller rule") {
		t.Errorf("no rule matched, yet: %v", err)
	}
	if _, err := corp.Caller(map[string]any{"groups": []any{"staff"}}); !errors.Is(err, registry.ErrUnidentified) || !strings.Contains(err.Error(), "no sub claim") {
		t.Errorf("no sub: %v", err)
	}
	c, err = open.Caller(map[string]any{"sub": "u", "azp": "machine", "scope": "call admin"})
	if err != nil || c.ID != "machine" || !slices.Equal(c.Scopes, []registry.Scope{registry.ScopeCall, registry.ScopeAdmin}) || c.RateLimit != nil {
		t.Errorf("azp caller without rules: %+v %v", c, err)
	}
}

func TestClientCertCallers(t *testing.T) {
	a, err := NewAuthenticator(AuthOptions{Callers: []CallerDocument{
		{Name: "bot", Source: "c:1", Spec: CallerSpec{ClientCert: &ClientCertSpec{Subject: "CN=bot,O=Example"}, Tools: []string{"text__*"}}},
		{Name: "spiffe", Source: "c:5", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"build.example"}}, RateLimit: &RateLimitSpec{PerSecond: 2}}},
	}, DefaultRate: &RateLimitSpec{PerSecond: 9}})
	if err != nil {
		t.Fatal(err)
	}
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "bot", Organization: []string{"Example"}}}
	if c, ok := a.AuthenticateCert(cert); !ok || c.ID != "bot" || c.RateLimit.PerSecond != 9 {
		t.Errorf("by subject: %+v %v", c, ok)
	}
	if c, ok := a.AuthenticateCert(&x509.Certificate{DNSNames: []string{"build.example"}}); !ok || c.ID != "spiffe" || c.RateLimit.PerSecond != 2 {
		t.Errorf("by SAN: %+v %v", c, ok)
	}
	if _, ok := a.AuthenticateCert(&x509.Certificate{Subject: pkix.Name{CommonName: "bot"}}); ok {
		t.Error("a different subject matched")
	}
	// A certificate-only caller has no bearer token.
	if _, ok := a.Authenticate(""); ok {
		t.Error("the empty token authenticated")
	}
	if _, err := NewAuthenticator(AuthOptions{Callers: []CallerDocument{{Name: "x", Source: "c:9", Spec: CallerSpec{ClientCert: &ClientCertSpec{}}}}}); err == nil {
		t.Error("an empty clientCert was accepted")
	}
}

// A caller id made of a claim must be storable: no NUL (PostgreSQL
// refuses it), no other control characters, and short enough to index.
func TestIssuerRefusesUnusableCallerClaims(t *testing.T) {
	iss, err := NewIssuers([]IssuerDocument{{Name: "corp", Source: "x:1", Spec: IssuerSpec{
		Issuer: "https://idp.example", Audience: "toolsvc", Discovery: true}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"a\x00b", "line\nbreak", strings.Repeat("x", MaxCallerClaim+1)} {
		if _, err := iss[0].Caller(map[string]any{"sub": sub}); err == nil || !strings.Contains(err.Error(), "sub claim cannot name a caller") {
			t.Errorf("sub %.20q: error %v; want it refused", sub, err)
		}
	}
	for _, sub := range []string{"alice", strings.Repeat("é", MaxCallerClaim), "spiffe://example.org/a b"} {
		if c, err := iss[0].Caller(map[string]any{"sub": sub}); err != nil || c.ID != "corp:"+sub {
			t.Errorf("sub %.20q: %v, %v; want the caller corp:<sub>", sub, c, err)
		}
	}
	// When another claim names the caller, sub is still recorded with
	// every call: it is held to the same rule.
	byEmail, err := NewIssuers([]IssuerDocument{{Name: "mail", Source: "x:1", Spec: IssuerSpec{
		Issuer: "https://idp.example", Audience: "toolsvc", Discovery: true, CallerClaim: "email"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := byEmail[0].Caller(map[string]any{"sub": "a\x00b", "email": "alice@example.org"}); err == nil || !strings.Contains(err.Error(), "sub claim must be") {
		t.Errorf("a NUL in sub beside an email caller claim: %v; want it refused", err)
	}
	if c, err := byEmail[0].Caller(map[string]any{"sub": "u-1", "email": "alice@example.org"}); err != nil || c.Subject != "u-1" {
		t.Errorf("an email caller: %v %v", c, err)
	}
}

// TestCallerIDsCannotCollide: a token's caller id is its issuer's prefix
// and a claim its holder chooses, so a prefix that another caller's id
// starts with, or that starts (or is started by) another issuer's, would
// let a token act as that caller.
func TestCallerIDsCannotCollide(t *testing.T) {
	prefix := func(p string) *string { return &p }
	issuer := func(name string, p *string) IssuerDocument {
		return IssuerDocument{Name: name, Source: name + ".yaml:1", Spec: IssuerSpec{
			Issuer: "https://" + name + ".example", Audience: "toolsvc", JWKSURL: "https://" + name + ".example/k", CallerPrefix: p}}
	}
	alice := []CallerDocument{{Name: "alice", Source: "callers.yaml:3"}}
	for _, c := range []struct {
		name    string
		docs    []IssuerDocument
		callers []CallerDocument
		apiKey  bool
		want    string // "" when the ids cannot collide
	}{
		{"default prefixes", []IssuerDocument{issuer("corp", nil), issuer("partner", nil)}, alice, true, ""},
		{"distinct prefixes", []IssuerDocument{issuer("corp", prefix("staff/")), issuer("ci", prefix("bot/"))}, alice, false, ""},
		{"empty prefix, no static callers", []IssuerDocument{issuer("corp", prefix(""))}, nil, false, ""},
		{"empty prefix and a static caller", []IssuerDocument{issuer("corp", prefix(""))}, alice, false, `corp.yaml:1: Issuer "corp": callerPrefix "" lets a token name the caller "alice" (callers.yaml:3)`},
		{"empty prefix and the API key", []IssuerDocument{issuer("corp", prefix(""))}, nil, true, `callerPrefix "" lets a token name the caller "api-key" (TOOLSVC_API_KEY)`},
		{"a static caller under the prefix", []IssuerDocument{issuer("corp", nil)}, []CallerDocument{{Name: "corp:alice", Source: "c.yaml:1"}}, false, `lets a token name the caller "corp:alice"`},
		{"the same prefix twice", []IssuerDocument{issuer("a", prefix("x:")), issuer("b", prefix("x:"))}, nil, false, `b.yaml:1: Issuer "b": callerPrefix "x:" and a.yaml:1: Issuer "a"'s "x:"`},
		{"one prefix starts another", []IssuerDocument{issuer("a", prefix("x:")), issuer("b", prefix("x:y:"))}, nil, false, `callerPrefix "x:y:" and a.yaml:1: Issuer "a"'s "x:"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			iss, err := NewIssuers(c.docs, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckCallerIDs(iss, c.callers, c.apiKey)
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("CheckCallerIDs: %v, want %q", err, c.want)
			}
		})
	}
}
