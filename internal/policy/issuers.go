package policy

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// IssuerSpec is the spec of a kind: Issuer resource: a token issuer whose
// JWTs authenticate callers, and the rules that map a token's claims to a
// caller.
type IssuerSpec struct {
	// Issuer is the iss every token must carry (for OIDC discovery, the
	// issuer URL).
	Issuer string `yaml:"issuer"`
	// Audience is a value the token's aud must contain.
	Audience string `yaml:"audience"`
	// Keys come from exactly one of Discovery (the issuer's
	// /.well-known/openid-configuration), JWKSURL or JWKSFile (relative to
	// the resource's file).
	Discovery bool   `yaml:"discovery,omitempty"`
	JWKSURL   string `yaml:"jwksUrl,omitempty"`
	JWKSFile  string `yaml:"jwksFile,omitempty"`
	// Algorithms are the signature algorithms accepted; asymmetric only.
	// Empty means RS256 and ES256.
	Algorithms []string `yaml:"algorithms,omitempty"`
	// ClockSkew is the leeway on exp and nbf; empty is 30s, at most 5m.
	ClockSkew string `yaml:"clockSkew,omitempty"`
	// CallerClaim names the claim that identifies the caller: sub (the
	// default), or azp / client_id for machine clients.
	CallerClaim string `yaml:"callerClaim,omitempty"`
	// CallerPrefix is put before the claim's value to make the caller id;
	// empty is the resource's name and a colon ("corp:alice"), so a token
	// can never claim the id of a static caller.
	CallerPrefix *string `yaml:"callerPrefix,omitempty"`
	// ScopesClaim names the claim holding the token's scopes; empty reads
	// scope (space-separated) or scp (a list).
	ScopesClaim string `yaml:"scopesClaim,omitempty"`
	// ScopePrefix is stripped from token scopes ("toolsvc:call" → call);
	// scopes without it are ignored.
	ScopePrefix string `yaml:"scopePrefix,omitempty"`
	// RateLimit is the default limit of this issuer's callers.
	RateLimit *RateLimitSpec `yaml:"rateLimit,omitempty"`
	// Callers are the mapping rules; the first whose match holds decides.
	// A token no rule matches is refused. No rules: every valid token is a
	// caller with the scopes it carries and every tool.
	Callers []IssuerRule `yaml:"callers,omitempty"`
}

// IssuerRule maps the tokens it matches to a caller's catalog and limits.
type IssuerRule struct {
	Name string `yaml:"name"`
	// Match lists claims and the values one of which each must have (a
	// list claim matches when it contains one of them). Empty matches
	// every token.
	Match map[string][]string `yaml:"match,omitempty"`
	// Tools are the tool-name globs the caller may see; empty means all.
	Tools []string `yaml:"tools,omitempty"`
	// MaxTier is the most dangerous tier the caller may see.
	MaxTier registry.Tier `yaml:"maxTier,omitempty"`
	// Scopes cap the token's scopes; empty grants what the token carries.
	Scopes []registry.Scope `yaml:"scopes,omitempty"`
	// RateLimit overrides the issuer's default limit.
	RateLimit *RateLimitSpec `yaml:"rateLimit,omitempty"`
}

// RateLimitSpec is a token bucket in a resource.
type RateLimitSpec struct {
	// PerSecond is the sustained rate of calls.
	PerSecond float64 `yaml:"perSecond"`
	// Burst is how many calls may come at once; 0 is max(1, PerSecond).
	Burst int `yaml:"burst,omitempty"`
	// Tools are stricter buckets for some tools.
	Tools []ToolRateLimitSpec `yaml:"tools,omitempty"`
}

// ToolRateLimitSpec is a bucket for the tools matching Tools.
type ToolRateLimitSpec struct {
	Tools     []string `yaml:"tools"`
	PerSecond float64  `yaml:"perSecond"`
	Burst     int      `yaml:"burst,omitempty"`
}

// IssuerDocument is one decoded kind: Issuer resource.
type IssuerDocument struct {
	Name   string
	Source string
	// Dir is the directory of the resource's file (for jwksFile).
	Dir  string
	Spec IssuerSpec
	// ReadFile reads jwksFile, at start and whenever a token names a key
	// the set lacks; nil is os.ReadFile. The program passes
	// config.ReadFile, which refuses a named pipe or a device (a read that
	// never ends) and bounds the size.
	ReadFile func(name string) ([]byte, error)
}

// The limits of an Issuer resource.
const (
	DefaultClockSkew = 30 * time.Second
	MaxClockSkew     = 5 * time.Minute
)

// asymmetric are the algorithms an issuer may name: never none, never
// HMAC (a public key used as an HMAC secret would let anyone sign).
var asymmetric = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// Issuer is a checked Issuer resource: what verifying its tokens needs,
// and the mapping from claims to a caller. It is immutable.
type Issuer struct {
	Name       string
	Issuer     string
	Audience   string
	Discovery  bool
	JWKSURL    string
	JWKSFile   string
	Algorithms []string
	ClockSkew  time.Duration

	spec        IssuerSpec
	prefix      string
	where       string // the resource, for errors
	defaultRate *registry.RateLimit
	rules       []issuerRule
	readFile    func(name string) ([]byte, error)
}

type issuerRule struct {
	IssuerRule
	rate *registry.RateLimit
}

// NewIssuers checks Issuer resources. defaultRate is the service's
// default limit (nil: none). Errors name the file, line and issuer.
func NewIssuers(docs []IssuerDocument, defaultRate *RateLimitSpec) ([]*Issuer, error) {
	var out []*Issuer
	seen := map[string]string{}
	for _, d := range docs {
		where := fmt.Sprintf("%s: Issuer %q", d.Source, d.Name)
		is, err := newIssuer(d, defaultRate)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if prev, dup := seen[is.Issuer]; dup {
			return nil, fmt.Errorf("%s: issuer %s is already configured (%s)", where, is.Issuer, prev)
		}
		seen[is.Issuer] = where
		is.where = where
		out = append(out, is)
	}
	return out, nil
}

// CheckCallerIDs refuses issuers whose callers' ids could be the id of
// another caller: a static one (callers, and APIKeyCaller when apiKey is
// set) or one of another issuer. A token's caller id is the issuer's
// callerPrefix and a claim the token's holder may choose, so only a prefix
// that no other id starts with, and that starts no other issuer's prefix,
// keeps every token to callers of its own issuer: two callers with one id
// share their calls, results and files.
func CheckCallerIDs(issuers []*Issuer, callers []CallerDocument, apiKey bool) error {
	static := make([]CallerDocument, 0, len(callers)+1)
	if apiKey {
		static = append(static, CallerDocument{Name: APIKeyCaller, Source: "TOOLSVC_API_KEY"})
	}
	static = append(static, callers...)
	for i, is := range issuers {
		for _, c := range static {
			if strings.HasPrefix(c.Name, is.prefix) {
				return fmt.Errorf("%s: callerPrefix %q lets a token name the caller %q (%s): give the issuer a callerPrefix no static caller's name starts with, such as the default %q", is.where, is.prefix, c.Name, c.Source, is.Name+":")
			}
		}
		for _, other := range issuers[:i] {
			if strings.HasPrefix(is.prefix, other.prefix) || strings.HasPrefix(other.prefix, is.prefix) {
				return fmt.Errorf("%s: callerPrefix %q and %s's %q let tokens of the two issuers name the same caller: give each issuer a prefix that does not start the other's", is.where, is.prefix, other.where, other.prefix)
			}
		}
	}
	return nil
}

func newIssuer(d IssuerDocument, defaultRate *RateLimitSpec) (*Issuer, error) {
	s := d.Spec
	if d.Name == "" {
		return nil, fmt.Errorf("an issuer needs a name")
	}
	if s.Issuer == "" {
		return nil, fmt.Errorf("issuer is empty: set the iss value its tokens carry")
	}
	if s.Audience == "" {
		return nil, fmt.Errorf("audience is empty: set the aud value tokens for toolsvc carry")
	}
	n := 0
	for _, set := range []bool{s.Discovery, s.JWKSURL != "", s.JWKSFile != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("set exactly one key source: discovery: true, jwksUrl or jwksFile")
	}
	is := &Issuer{Name: d.Name, Issuer: s.Issuer, Audience: s.Audience, Discovery: s.Discovery, JWKSURL: s.JWKSURL, spec: s, readFile: d.ReadFile}
	if is.readFile == nil {
		is.readFile = os.ReadFile
	}
	if s.Discovery || s.JWKSURL != "" {
		raw := s.JWKSURL
		if s.Discovery {
			raw = s.Issuer
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("%q is not an http(s) URL", raw)
		}
	}
	if s.JWKSFile != "" {
		is.JWKSFile = s.JWKSFile
		if !filepath.IsAbs(is.JWKSFile) {
			is.JWKSFile = filepath.Join(d.Dir, is.JWKSFile)
		}
		if _, err := is.ReadJWKS(); err != nil {
			return nil, err
		}
	}
	is.Algorithms = slices.Clone(s.Algorithms)
	if len(is.Algorithms) == 0 {
		is.Algorithms = []string{"RS256", "ES256"}
	}
	for _, a := range is.Algorithms {
		if !slices.Contains(asymmetric, a) {
			return nil, fmt.Errorf("algorithm %q is not allowed (use one of %s; none and HMAC are never accepted)", a, strings.Join(asymmetric, ", "))
		}
	}
	is.ClockSkew = DefaultClockSkew
	if s.ClockSkew != "" {
		d, err := time.ParseDuration(s.ClockSkew)
		if err != nil || d < 0 || d > MaxClockSkew {
			return nil, fmt.Errorf("clockSkew %q must be a duration between 0s and %s", s.ClockSkew, MaxClockSkew)
		}
		is.ClockSkew = d
	}
	is.prefix = d.Name + ":"
	if s.CallerPrefix != nil {
		is.prefix = *s.CallerPrefix
	}
	rate, err := rateLimitOf(s.RateLimit, defaultRate, "Issuer/"+d.Name)
	if err != nil {
		return nil, err
	}
	is.defaultRate = rate
	names := map[string]bool{}
	for i, r := range s.Callers {
		if r.Name == "" {
			return nil, fmt.Errorf("callers[%d] needs a name", i)
		}
		if names[r.Name] {
			return nil, fmt.Errorf("callers: two rules are named %q", r.Name)
		}
		names[r.Name] = true
		if err := checkCatalog(r.Tools, r.MaxTier, r.Scopes); err != nil {
			return nil, fmt.Errorf("callers %q: %w", r.Name, err)
		}
		rr := issuerRule{IssuerRule: r, rate: rate}
		if r.RateLimit != nil {
			if rr.rate, err = rateLimitOf(r.RateLimit, nil, "Issuer/"+d.Name+"/"+r.Name); err != nil {
				return nil, fmt.Errorf("callers %q: %w", r.Name, err)
			}
		}
		is.rules = append(is.rules, rr)
	}
	return is, nil
}

// maxJWKSBytes bounds a key set file or response.
const maxJWKSBytes = 1 << 20

// ReadJWKS reads the issuer's JWKS file and checks that it is a JSON
// object with keys.
func (is *Issuer) ReadJWKS() ([]byte, error) {
	b, err := is.readFile(is.JWKSFile)
	if err != nil {
		return nil, fmt.Errorf("jwksFile: %w", err)
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("jwksFile %s is larger than %d bytes", is.JWKSFile, maxJWKSBytes)
	}
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil || len(set.Keys) == 0 {
		return nil, fmt.Errorf("jwksFile %s is not a JSON Web Key Set ({\"keys\": [...]}, at least one key)", is.JWKSFile)
	}
	return b, nil
}

// MaxCallerClaim bounds the claim a token caller's id is made of, as
// toolCallId is bounded.
const MaxCallerClaim = 256

// Caller maps verified claims to a caller, or says why the token is not
// admitted. Only call it with claims whose signature, iss, aud and times
// were verified.
func (is *Issuer) Caller(claims map[string]any) (*registry.Caller, error) {
	idClaim := is.spec.CallerClaim
	if idClaim == "" {
		idClaim = "sub"
	}
	id, _ := claims[idClaim].(string)
	if id == "" {
		return nil, unidentified("the token has no %s claim (a string naming its caller)", idClaim)
	}
	// The caller id keys stored calls and approvals: a NUL cannot be
	// stored in PostgreSQL, and a long id overflows its index, which
	// would fail every call with a store error that retrying never
	// cures.
	if utf8.RuneCountInString(id) > MaxCallerClaim || strings.ContainsFunc(id, unicode.IsControl) {
		return nil, unidentified("the token's %s claim cannot name a caller: it must be at most %d characters, without control characters", idClaim, MaxCallerClaim)
	}
	sub, _ := claims["sub"].(string)
	if idClaim != "sub" && (utf8.RuneCountInString(sub) > MaxCallerClaim || strings.ContainsFunc(sub, unicode.IsControl)) {
		// Recorded in the audit trail with every call of the token.
		return nil, unidentified("the token's sub claim must be at most %d characters, without control characters", MaxCallerClaim)
	}
	tokenScopes := is.scopes(claims)
	c := &registry.Caller{ID: is.prefix + id, Issuer: is.Issuer, Subject: sub, Claims: claims}
	if len(is.rules) == 0 {
		c.Scopes, c.RateLimit = tokenScopes, is.defaultRate
		return c, nil
	}
	for _, r := range is.rules {
		if !matches(r.Match, claims) {
			continue
		}
		c.Tools, c.MaxTier, c.RateLimit = slices.Clone(r.Tools), r.MaxTier, r.rate
		for _, sc := range tokenScopes {
			if len(r.Scopes) == 0 || slices.Contains(r.Scopes, sc) {
				c.Scopes = append(c.Scopes, sc)
			}
		}
		return c, nil
	}
	return nil, fmt.Errorf("no caller rule of issuer %q matches the token", is.Name)
}

// unidentifiedError is a refusal of a token that names no caller; it is
// registry.ErrUnidentified to errors.Is, and reads as its message alone.
type unidentifiedError struct{ msg string }

func (e *unidentifiedError) Error() string        { return e.msg }
func (e *unidentifiedError) Is(target error) bool { return target == registry.ErrUnidentified }

func unidentified(format string, args ...any) error {
	return &unidentifiedError{fmt.Sprintf(format, args...)}
}

// scopes reads the token's toolsvc scopes.
func (is *Issuer) scopes(claims map[string]any) []registry.Scope {
	var raw []string
	names := []string{"scope", "scp"}
	if is.spec.ScopesClaim != "" {
		names = []string{is.spec.ScopesClaim}
	}
	for _, n := range names {
		raw = append(raw, stringsOf(claims[n])...)
	}
	var out []registry.Scope
	for _, s := range raw {
		s, ok := strings.CutPrefix(s, is.spec.ScopePrefix)
		sc := registry.Scope(s)
		if ok && (sc == registry.ScopeCall || sc == registry.ScopeApprove || sc == registry.ScopeAdmin) && !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out
}

// stringsOf reads a claim as strings: a space-separated string or a list.
func stringsOf(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

func matches(m map[string][]string, claims map[string]any) bool {
	for claim, want := range m {
		var have []string
		switch v := claims[claim].(type) {
		case string:
			have = []string{v}
		case []any:
			have = stringsOf(v)
		case bool, float64:
			have = []string{fmt.Sprint(v)}
		}
		if !slices.ContainsFunc(have, func(h string) bool { return slices.Contains(want, h) }) {
			return false
		}
	}
	return true
}

func checkCatalog(tools []string, maxTier registry.Tier, scopes []registry.Scope) error {
	for _, g := range tools {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("tool glob %q is malformed (path.Match syntax: *, ?, [a-z])", g)
		}
	}
	if maxTier != "" && !maxTier.Valid() {
		return fmt.Errorf("maxTier %q is not read_only, side_effecting or privileged", maxTier)
	}
	for _, sc := range scopes {
		if sc != registry.ScopeCall && sc != registry.ScopeApprove && sc != registry.ScopeAdmin {
			return fmt.Errorf("scope %q is not call, approve or admin", sc)
		}
	}
	return nil
}

// maxBurst bounds a bucket's size.
const maxBurst = 100000

// rateLimitOf checks a limit; with s nil it falls back to def (which may
// be nil too: no limit).
func rateLimitOf(s, def *RateLimitSpec, name string) (*registry.RateLimit, error) {
	if s == nil {
		s = def
	}
	if s == nil {
		return nil, nil
	}
	bucket := func(perSecond float64, burst int) (int, error) {
		if !(perSecond > 0) || perSecond > maxBurst { // !(> 0) refuses NaN too
			return 0, fmt.Errorf("rateLimit: perSecond must be above 0 and at most %d, got %v", maxBurst, perSecond)
		}
		if burst < 0 || burst > maxBurst {
			return 0, fmt.Errorf("rateLimit: burst must be between 0 and %d, got %d", maxBurst, burst)
		}
		if burst == 0 {
			burst = max(1, int(perSecond))
		}
		return burst, nil
	}
	burst, err := bucket(s.PerSecond, s.Burst)
	if err != nil {
		return nil, err
	}
	out := &registry.RateLimit{Name: name, PerSecond: s.PerSecond, Burst: burst}
	for i, t := range s.Tools {
		if len(t.Tools) == 0 {
			return nil, fmt.Errorf("rateLimit.tools[%d] names no tools", i)
		}
		if err := checkCatalog(t.Tools, "", nil); err != nil {
			return nil, fmt.Errorf("rateLimit.tools[%d]: %w", i, err)
		}
		b, err := bucket(t.PerSecond, t.Burst)
		if err != nil {
			return nil, fmt.Errorf("rateLimit.tools[%d]: %w", i, err)
		}
		out.Tools = append(out.Tools, registry.ToolRateLimit{Tools: slices.Clone(t.Tools), PerSecond: t.PerSecond, Burst: b})
	}
	return out, nil
}
