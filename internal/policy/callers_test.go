package policy_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
)

func digest(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// callerDocs decodes the Caller resources of one YAML text.
func callerDocs(t *testing.T, text string) []policy.CallerDocument {
	t.Helper()
	rs, err := config.Parse("callers.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	var docs []policy.CallerDocument
	for _, r := range rs {
		var spec policy.CallerSpec
		if err := r.Decode(&spec); err != nil {
			t.Fatalf("decode: %v", err)
		}
		docs = append(docs, policy.CallerDocument{Name: r.Metadata.Name, Source: r.Source(), Spec: spec})
	}
	return docs
}

func TestAuthenticate(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "ci-token")
	if err := os.WriteFile(tokenFile, []byte("  tok-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	docs := callerDocs(t, `apiVersion: toolsvc/v1
kind: Caller
metadata: {name: gateway}
spec:
  tokenSha256: `+strings.ToUpper(digest("gw-secret"))+`
  tools: ["fs__*", "json__*"]
  maxTier: side_effecting
  scopes: [call]
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: ci}
spec:
  tokenFile: `+tokenFile+`
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: approver}
spec:
  tokenSha256: `+digest("approver-secret")+`
  scopes: [call, approve]
`)
	a, err := policy.NewAuthenticator(policy.AuthOptions{APIKey: "the-api-key", Callers: docs})
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() != 4 {
		t.Errorf("Len = %d, want 4", a.Len())
	}
	cases := []struct {
		token   string
		id      string
		scopes  []registry.Scope
		maxTier registry.Tier
		tools   []string
	}{
		{"the-api-key", policy.APIKeyCaller, []registry.Scope{registry.ScopeCall, registry.ScopeApprove, registry.ScopeAdmin}, "", nil},
		{"gw-secret", "gateway", []registry.Scope{registry.ScopeCall}, registry.SideEffecting, []string{"fs__*", "json__*"}},
		{"tok-from-file", "ci", []registry.Scope{registry.ScopeCall}, "", nil},
		{"approver-secret", "approver", []registry.Scope{registry.ScopeCall, registry.ScopeApprove}, "", nil},
	}
	for _, tc := range cases {
		c, ok := a.Authenticate(tc.token)
		if !ok {
			t.Errorf("Authenticate(%q) failed", tc.token)
			continue
		}
		if c.ID != tc.id || !slices.Equal(c.Scopes, tc.scopes) || c.MaxTier != tc.maxTier || !slices.Equal(c.Tools, tc.tools) {
			t.Errorf("Authenticate(%q) = %+v, want %s with %v, %q, %v", tc.token, c, tc.id, tc.scopes, tc.maxTier, tc.tools)
		}
	}
	for _, bad := range []string{"", "wrong", "gw-secret ", "GW-SECRET", digest("gw-secret"), "  tok-from-file\n", "the-api-ke"} {
		if c, ok := a.Authenticate(bad); ok {
			t.Errorf("Authenticate(%q) = %s, want refused", bad, c.ID)
		}
	}
	// Callers are copies: changing one does not change the next.
	c, _ := a.Authenticate("gw-secret")
	c.Scopes[0] = registry.ScopeAdmin
	c.Tools[0] = "*"
	if again, _ := a.Authenticate("gw-secret"); again.Scopes[0] != registry.ScopeCall || again.Tools[0] != "fs__*" {
		t.Errorf("a changed caller leaked into the authenticator: %+v", again)
	}
	// The gateway's catalog follows its spec.
	if c, _ := a.Authenticate("gw-secret"); c.Sees(&registry.Definition{Name: "shell__exec", Tier: registry.Privileged}) ||
		!c.Sees(&registry.Definition{Name: "fs__write", Tier: registry.SideEffecting}) {
		t.Error("the gateway caller's catalog does not follow its tools and maxTier")
	}
}

func TestNoCredentials(t *testing.T) {
	a, err := policy.NewAuthenticator(policy.AuthOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a.Len() != 0 {
		t.Errorf("Len = %d, want 0", a.Len())
	}
	if _, ok := a.Authenticate("anything"); ok {
		t.Error("an authenticator without credentials accepted a token")
	}
}

func TestCallerErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	same := filepath.Join(dir, "same")
	if err := os.WriteFile(same, []byte("the-api-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := digest("x")
	cases := []struct {
		name string
		docs []policy.CallerDocument
		want string
	}{
		{"no token", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3"}}, `c.yaml:3: Caller "a": no token`},
		{"both tokens", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: d, TokenFile: same}}}, "not both"},
		{"bad hex", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: "zz"}}}, "64 hex digits"},
		{"short digest", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: d[:62]}}}, "64 hex digits"},
		{"missing file", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenFile: filepath.Join(dir, "nope")}}}, "tokenFile"},
		{"empty file", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenFile: empty}}}, "is empty"},
		{"bad scope", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: d, Scopes: []registry.Scope{"root"}}}}, `scope "root"`},
		{"bad tier", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: d, MaxTier: "admin"}}}, `maxTier "admin"`},
		{"bad glob", []policy.CallerDocument{{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: d, Tools: []string{"["}}}}, "malformed"},
		{"duplicate name", []policy.CallerDocument{
			{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: d}},
			{Name: "a", Source: "c.yaml:9", Spec: policy.CallerSpec{TokenSHA256: digest("y")}},
		}, `c.yaml:9: Caller "a": caller "a" is already defined`},
		{"duplicate token", []policy.CallerDocument{
			{Name: "a", Source: "c.yaml:3", Spec: policy.CallerSpec{TokenSHA256: d}},
			{Name: "b", Source: "c.yaml:9", Spec: policy.CallerSpec{TokenSHA256: d}},
		}, "same token"},
		{"token shared with the API key", []policy.CallerDocument{{Name: "b", Source: "c.yaml:9", Spec: policy.CallerSpec{TokenFile: same}}}, `same token as caller "api-key"`},
		{"name taken by the API key", []policy.CallerDocument{{Name: "api-key", Source: "c.yaml:9", Spec: policy.CallerSpec{TokenSHA256: d}}}, "already defined"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.NewAuthenticator(policy.AuthOptions{APIKey: "the-api-key", Callers: tc.docs})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewAuthenticator = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestCallerSpecIsDecodedStrictly(t *testing.T) {
	rs, err := config.Parse("callers.yaml", []byte("apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: a}\nspec:\n  token: plain\n"))
	if err != nil {
		t.Fatal(err)
	}
	var spec policy.CallerSpec
	if err := rs[0].Decode(&spec); err == nil || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("Decode with a plain token field = %v, want an unknown-field error at line 5", err)
	}
}

func BenchmarkAuthenticate(b *testing.B) {
	var docs []policy.CallerDocument
	for i := range 100 {
		docs = append(docs, policy.CallerDocument{Name: "c" + string(rune('a'+i%26)) + hex.EncodeToString([]byte{byte(i)}), Spec: policy.CallerSpec{TokenSHA256: digest("token-" + hex.EncodeToString([]byte{byte(i)}))}})
	}
	a, err := policy.NewAuthenticator(policy.AuthOptions{Callers: docs})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, ok := a.Authenticate("token-" + hex.EncodeToString([]byte{32})); !ok {
			b.Fatal("not found")
		}
	}
}
