package http

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// JWTIssuer is an issuer whose JWTs authenticate callers (a kind: Issuer
// resource, checked by the policy package).
type JWTIssuer struct {
	Name     string
	Issuer   string
	Audience string
	// Keys come from Discovery (the issuer's OpenID configuration),
	// JWKSURL, or ReadJWKS (a file; read again when a key is unknown).
	Discovery bool
	JWKSURL   string
	ReadJWKS  func() ([]byte, error)
	// JWKSFile names ReadJWKS's file, to keep its cache across reloads.
	JWKSFile string
	// Algorithms are the accepted signature algorithms (asymmetric only).
	Algorithms []string
	// ClockSkew is the leeway on exp and nbf.
	ClockSkew time.Duration
	// Map turns verified claims into the caller, or says why the token is
	// not admitted.
	Map func(claims map[string]any) (*registry.Caller, error)
}

// JWTOptions configure a TokenIdentity.
type JWTOptions struct {
	// Static resolves static keys (TOOLSVC_API_KEY, Caller resources) and
	// client certificates; nil accepts none.
	Static interface {
		Authenticator
		AuthenticateCert(cert *x509.Certificate) (*registry.Caller, bool)
	}
	Issuers []JWTIssuer
	// Client fetches discovery documents and key sets; nil is a client
	// with a 5s timeout. Redirects to another host, or from https to
	// http, are refused whatever its CheckRedirect says.
	Client *http.Client
	// Now is the clock for exp and nbf; nil is time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// MinRefresh is the least time between two fetches of one key set
	// (an unknown kid triggers a fetch); 0 is 10s.
	MinRefresh time.Duration
	// MaxKeyAge makes a key set older than this be fetched again on use;
	// 0 is 15m.
	MaxKeyAge time.Duration
}

// TokenIdentity resolves static keys, client certificates and JWTs from
// configured issuers. It is immutable but for its key caches; build a new
// one on reload (NewTokenIdentity reuses the old one's key caches).
type TokenIdentity struct {
	o       JWTOptions
	issuers map[string]*jwtIssuer
	names   []string // accepted issuers, sorted
}

type jwtIssuer struct {
	JWTIssuer
	keys   *keySet
	config *oidc.Config
}

// NewTokenIdentity builds the identity of o; key sets of prev (may be nil)
// with the same source are reused, so a reload does not refetch keys.
func NewTokenIdentity(o JWTOptions, prev *TokenIdentity) *TokenIdentity {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MinRefresh <= 0 {
		o.MinRefresh = 10 * time.Second
	}
	if o.MaxKeyAge <= 0 {
		o.MaxKeyAge = 15 * time.Minute
	}
	t := &TokenIdentity{o: o, issuers: map[string]*jwtIssuer{}}
	for _, is := range o.Issuers {
		src := is.source()
		var ks *keySet
		if prev != nil {
			if old, ok := prev.issuers[is.Issuer]; ok && old.source() == src {
				ks = old.keys
			}
		}
		if ks == nil {
			ks = &keySet{issuer: is, client: sameOrigin(o.Client, is.Issuer), now: o.Now, minRefresh: o.MinRefresh, maxAge: o.MaxKeyAge, log: o.Logger}
		}
		ks.algs = algorithms(is.Algorithms)
		// go-oidc checks the signature (through keys, with the allowed
		// algorithms only) and iss; aud, exp and nbf are checked below
		// with the issuer's clock skew.
		ji := &jwtIssuer{JWTIssuer: is, keys: ks, config: &oidc.Config{
			SkipClientIDCheck: true, SkipExpiryCheck: true, SupportedSigningAlgs: is.Algorithms,
		}}
		t.issuers[is.Issuer] = ji
		t.names = append(t.names, is.Issuer)
	}
	slices.Sort(t.names)
	return t
}

// sameOrigin is c for fetching issuer's keys: it follows a redirect only
// within the host the request was sent to and never from https to http,
// since a redirect elsewhere would let whoever answers there choose the
// keys that sign tokens.
func sameOrigin(c *http.Client, issuer string) *http.Client {
	cc := *c
	cc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		from := via[0].URL
		switch {
		case len(via) >= 10:
			return fmt.Errorf("issuer %s: stopped after 10 redirects", issuer)
		case req.URL.Host != from.Host:
			return fmt.Errorf("issuer %s: %s redirects to another host (%s); keys are fetched from the configured host only, so configure the URL the keys are served at", issuer, from.Redacted(), req.URL.Redacted())
		case from.Scheme == "https" && req.URL.Scheme != "https":
			return fmt.Errorf("issuer %s: %s redirects from https to %s; keys are fetched over https only once the URL is https", issuer, from.Redacted(), req.URL.Redacted())
		}
		return nil
	}
	return &cc
}

func (is JWTIssuer) source() string {
	switch {
	case is.Discovery:
		return "discovery " + is.Issuer
	case is.JWKSURL != "":
		return "url " + is.JWKSURL
	}
	return "file " + is.JWKSFile
}

func algorithms(names []string) []jose.SignatureAlgorithm {
	out := make([]jose.SignatureAlgorithm, len(names))
	for i, n := range names {
		out[i] = jose.SignatureAlgorithm(n)
	}
	return out
}

// Challenge implements Identity.
func (t *TokenIdentity) Challenge() string {
	return (&AuthError{Issuers: t.names}).challenge()
}

// Certificate implements Identity.
func (t *TokenIdentity) Certificate(cert *x509.Certificate) (*registry.Caller, bool) {
	if t.o.Static == nil {
		return nil, false
	}
	return t.o.Static.AuthenticateCert(cert)
}

// Token implements Identity: a static key, else a JWT of a configured
// issuer.
func (t *TokenIdentity) Token(ctx context.Context, token string) (*registry.Caller, error) {
	if t.o.Static != nil {
		if c, ok := t.o.Static.Authenticate(token); ok {
			return c, nil
		}
	}
	refuse := func(desc string, err error) error {
		return &AuthError{Status: http.StatusUnauthorized, Code: "invalid_token", Description: desc, Issuers: t.names, Err: err}
	}
	if len(t.issuers) == 0 || strings.Count(token, ".") != 2 {
		return nil, refuse("the token is not valid", nil)
	}
	// Pick the issuer by the (not yet verified) iss; the signature is
	// checked with that issuer's keys only.
	var all []jose.SignatureAlgorithm
	for _, is := range t.issuers {
		all = append(all, is.keys.algs...)
	}
	jws, err := jose.ParseSigned(token, all)
	if err != nil {
		return nil, refuse("the token is not a JWT signed with an accepted algorithm", err)
	}
	// Pick the issuer by the (not yet verified) iss, from the payload
	// read once here.
	var payload map[string]json.RawMessage
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &payload); err != nil {
		return nil, refuse("the token's claims are not a JSON object", err)
	}
	// go-oidc reads claims into a struct, which matches names in any
	// case, and this function reads them from a map, which does not: a
	// token with both exp and Exp would be checked against one and
	// admitted by the other.
	if name, claim := caseVariant(payload); name != "" {
		return nil, refuse(fmt.Sprintf("the token has a claim %s, the registered claim %s in another case; claim names are case-sensitive (RFC 7519), so a token must not carry both or a variant", name, claim), nil)
	}
	var iss string
	if raw, ok := payload["iss"]; ok {
		if err := json.Unmarshal(raw, &iss); err != nil {
			// An iss that is not a string (a list, say) is not a broken
			// claims object: say which claim is wrong.
			return nil, refuse("the token's iss is not a string", err)
		}
	}
	is, ok := t.issuers[iss]
	if !ok {
		return nil, refuse("the token's issuer is not accepted", fmt.Errorf("iss %q", iss))
	}
	refuse = func(desc string, err error) error {
		return &AuthError{Status: http.StatusUnauthorized, Code: "invalid_token", Description: desc, Issuers: []string{is.Issuer},
			Err: fmt.Errorf("issuer %s: %w", is.Name, err)}
	}
	// go-oidc keeps only the text of the key set's error: keys keeps the
	// error itself, to tell keys that could not be fetched (the token
	// may be good: 503) from a signature that does not verify (401).
	keys := &tokenKeys{keySet: is.keys}
	idt, err := oidc.NewVerifier(is.Issuer, keys, is.config).Verify(ctx, token)
	if err != nil {
		// Say the signature failed, not how: the detail is logged.
		t.o.Logger.DebugContext(ctx, "token refused", "issuer", is.Issuer, "error", err)
		var down *keysUnavailableError
		switch {
		case errors.As(keys.err, &down):
			// The token is not at fault: a client told invalid_token
			// would throw it away.
			return nil, &AuthError{Status: http.StatusServiceUnavailable,
				Description: "the identity provider's keys could not be fetched, so the token could not be checked; retry shortly",
				Err:         fmt.Errorf("issuer %s: %w", is.Name, keys.err)}
		case errors.Is(keys.err, context.Canceled) || errors.Is(keys.err, context.DeadlineExceeded):
			return nil, &AuthError{Status: http.StatusServiceUnavailable, Description: "the token could not be checked in time; retry",
				Err: fmt.Errorf("issuer %s: %w", is.Name, &keysUnavailableError{keys.err})}
		case errors.Is(keys.err, errKidRequired):
			return nil, refuse(fmt.Sprintf("the token names no key (kid) and the issuer publishes more than %d keys for its algorithm; tokens of this issuer must carry a kid", maxKidless), keys.err)
		}
		if strings.HasPrefix(err.Error(), "oidc: failed to unmarshal claims") {
			// The signature verified; a claim the verifier reads has a
			// type of its own.
			return nil, refuse(wrongClaim(jws.UnsafePayloadWithoutVerification()), err)
		}
		return nil, refuse("the token's signature could not be verified", err)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return nil, refuse("the token's claims are not a JSON object", err)
	}
	if !slices.Contains(idt.Audience, is.Audience) {
		return nil, refuse("the token is not meant for this service (aud)", fmt.Errorf("aud %v", idt.Audience))
	}
	for _, k := range []string{"exp", "nbf", "iat"} {
		// A NumericDate is a JSON number (RFC 7519, section 2); a string
		// is read by some libraries and ignored by others.
		if v, ok := claims[k]; ok {
			if _, num := v.(float64); !num {
				return nil, refuse("the token's "+k+" is not a number (RFC 7519 NumericDate)", fmt.Errorf("%s %v", k, v))
			}
		}
	}
	now := t.o.Now()
	exp, ok := claims["exp"].(float64)
	if !ok {
		return nil, refuse("the token has no exp", nil)
	}
	// go-oidc converts exp to int64 seconds, which for an exp beyond them
	// is implementation-defined (the distant past on amd64): such a token
	// would be "expired" whatever its issuer meant.
	if !(math.Abs(exp) < 1<<63) {
		return nil, refuse("the token's exp is out of range (more seconds than 64 bits hold)", fmt.Errorf("exp %g", exp))
	}
	// Beyond 2^62 seconds, exp is billions of years ahead, and time.Time
	// (which counts from year 1) would overflow.
	if exp < 1<<62 && now.After(idt.Expiry.Add(is.ClockSkew)) {
		return nil, refuse("the token has expired", fmt.Errorf("exp %s", idt.Expiry))
	}
	// Compared as numbers: an nbf beyond int64 seconds would convert to
	// an implementation-defined time (the distant past on amd64).
	if nbf, ok := claims["nbf"].(float64); ok && nbf > float64(now.Add(is.ClockSkew).Unix()) {
		return nil, refuse("the token is not valid yet (nbf)", nil)
	}
	// sub is recorded with every call of the token, and names its caller
	// unless the issuer names another claim: one that cannot be (bounded
	// as a caller claim and a call's identifiers are) is the token's
	// fault, invalid_token, not a want of scope.
	if sub, ok := claims["sub"].(string); ok && (utf8.RuneCountInString(sub) > maxCallText || strings.ContainsFunc(sub, unicode.IsControl)) {
		return nil, refuse(fmt.Sprintf("the token's sub must be at most %d characters, without control characters", maxCallText), fmt.Errorf("sub %.40q", sub))
	}
	c, err := is.Map(claims)
	if errors.Is(err, registry.ErrUnidentified) {
		return nil, refuse(err.Error(), nil)
	}
	if err != nil {
		return nil, &AuthError{Status: http.StatusForbidden, Code: "insufficient_scope", Description: err.Error(), Issuers: []string{is.Issuer}}
	}
	return c, nil
}

// caseRegistered are the claims whose names RFC 7519 registers (and
// OpenID Connect's azp), checked for variants in case.
var caseRegistered = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "azp"}

// caseVariant returns a claim of payload whose name is a registered
// claim's in another case (Exp, AUD, or ſub with a long s, which Go's
// JSON decoding folds too), and that claim; "" when there is none.
func caseVariant(payload map[string]json.RawMessage) (name, claim string) {
	for _, n := range slices.Sorted(maps.Keys(payload)) {
		for _, r := range caseRegistered {
			if n != r && strings.EqualFold(n, r) {
				return n, r
			}
		}
	}
	return "", ""
}

// wrongClaim says which registered claim of a token's payload does not
// have the JSON type RFC 7519 (or OpenID Connect, for the claims the
// verifier reads) gives it.
func wrongClaim(payload []byte) string {
	var c map[string]json.RawMessage
	if json.Unmarshal(payload, &c) != nil {
		return "the token's claims are not a JSON object"
	}
	is := func(k string, v any) bool {
		r, ok := c[k]
		return !ok || json.Unmarshal(r, v) == nil
	}
	var s string
	var list []string
	var n json.Number
	var names map[string]string
	var sources map[string]struct {
		Endpoint    string `json:"endpoint"`
		AccessToken string `json:"access_token"`
	}
	for _, k := range []string{"sub", "nonce", "at_hash"} {
		if !is(k, &s) {
			return "the token's " + k + " is not a string"
		}
	}
	if !is("aud", &s) && !is("aud", &list) {
		return "the token's aud is not a string or a list of strings"
	}
	for _, k := range []string{"exp", "nbf", "iat"} {
		if !is(k, &n) {
			return "the token's " + k + " is not a number (RFC 7519 NumericDate)"
		}
	}
	if !is("_claim_names", &names) || !is("_claim_sources", &sources) {
		return "the token's _claim_names or _claim_sources is not of the form OpenID Connect gives distributed claims"
	}
	return "the token's claims do not have the types JWT gives them"
}

// keySet is an issuer's cached keys. It implements oidc.KeySet: a kid it
// does not know makes it fetch the keys again, at most once per
// minRefresh, so rotation needs no restart and unknown kids cannot make
// it hammer the issuer. One fetch runs at a time, and tokens whose keys
// are cached never wait for it: a slow issuer (or a token naming a kid
// nobody knows while the issuer is slow) holds up only the requests that
// need the new keys.
type keySet struct {
	issuer     JWTIssuer
	algs       []jose.SignatureAlgorithm
	client     *http.Client
	now        func() time.Time
	minRefresh time.Duration
	maxAge     time.Duration
	log        *slog.Logger

	mu       sync.Mutex
	keys     *jose.JSONWebKeySet
	fetched  time.Time     // last attempt
	loaded   time.Time     // last success
	failure  error         // of the last attempt; nil when it succeeded
	fetching chan struct{} // closed when the fetch under way ends; nil when none is
	// jwksURL is the discovered key set's URL, read at discovered; only
	// the fetch under way reads and writes them.
	jwksURL    string
	discovered time.Time
}

// keysUnavailableError is why a token could not be checked: the keys it
// needs could not be fetched. The token is not at fault.
type keysUnavailableError struct{ err error }

func (e *keysUnavailableError) Error() string {
	return "the issuer's keys could not be fetched: " + e.err.Error()
}

func (e *keysUnavailableError) Unwrap() error { return e.err }

// maxKidless is how many keys a token without a kid is checked against.
// Checking a signature with an RSA key costs tens of microseconds, and
// anyone can send a token: without a bound, a token naming no key would
// cost a check of every key the issuer publishes (a second or more for
// thousands of keys).
const maxKidless = 16

var errKidRequired = errors.New("the token has no kid and the issuer publishes more keys for its algorithm than are tried without one")

// tokenKeys is the issuer's keys as one token's check sees them: go-oidc
// wraps the key set's error with %v, so err keeps it.
type tokenKeys struct {
	*keySet
	err error
}

// VerifySignature implements oidc.KeySet.
func (k *tokenKeys) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	payload, err := k.keySet.VerifySignature(ctx, token)
	k.err = err
	return payload, err
}

// VerifySignature implements oidc.KeySet.
func (k *keySet) VerifySignature(ctx context.Context, token string) ([]byte, error) {
	jws, err := jose.ParseSigned(token, k.algs)
	if err != nil {
		return nil, err
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("the token has more than one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	keys, err := k.current(ctx, "", false)
	if err != nil {
		return nil, err
	}
	payload, tried, err := verifyWith(jws, keys, kid)
	if err == nil || errors.Is(err, errKidRequired) || (kid != "" && tried > 0) {
		return payload, err
	}
	// An unknown kid, or no kid and no key that verifies: the issuer may
	// have rotated its keys. Only a set other than the one just tried is
	// worth trying.
	newer, ferr := k.current(ctx, kid, true)
	if newer != nil && newer != keys {
		if payload, _, err = verifyWith(jws, newer, kid); err == nil {
			return payload, nil
		}
	}
	if ferr != nil {
		return nil, ferr
	}
	return nil, err
}

// verifyWith checks jws with the keys of set that kid names (all, when
// it names none) and whose type and alg fit the token's algorithm; tried
// is how many it checked.
func verifyWith(jws *jose.JSONWebSignature, set *jose.JSONWebKeySet, kid string) (payload []byte, tried int, err error) {
	alg := jws.Signatures[0].Header.Algorithm
	var candidates []jose.JSONWebKey
	if set != nil {
		candidates = set.Keys
		if kid != "" {
			candidates = set.Key(kid)
		}
	}
	candidates = slices.DeleteFunc(slices.Clone(candidates), func(key jose.JSONWebKey) bool {
		return (key.Use != "" && key.Use != "sig") || !fits(key, alg)
	})
	if len(candidates) == 0 {
		return nil, 0, fmt.Errorf("the issuer has no %s key %q", alg, kid)
	}
	if kid == "" && len(candidates) > maxKidless {
		return nil, 0, fmt.Errorf("%w (%d keys for %s, at most %d are tried)", errKidRequired, len(candidates), alg, maxKidless)
	}
	for _, key := range candidates {
		if payload, err := jws.Verify(key.Key); err == nil {
			return payload, len(candidates), nil
		}
	}
	return nil, len(candidates), fmt.Errorf("no %s key %q verifies the signature", alg, kid)
}

// fits says whether key can have made a signature with alg: its alg, when
// it names one, is alg, and its type and curve are alg's.
func fits(key jose.JSONWebKey, alg string) bool {
	if key.Algorithm != "" && key.Algorithm != alg {
		return false
	}
	switch pub := key.Key.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		curve := map[string]string{"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}[alg]
		return curve != "" && pub.Curve.Params().Name == curve
	case ed25519.PublicKey:
		return alg == string(jose.EdDSA)
	}
	return false
}

// current returns the cached keys, fetching them when there are none,
// when they are old, or (refresh) when kid is not among them, but never
// twice within minRefresh. While a fetch is under way, a request that has
// keys to use (and needs no new ones) uses them; the others wait for it.
// The error is a *keysUnavailableError when the keys wanted could not be
// fetched: there are none, or (refresh) kid is not among them and the
// last fetch failed.
func (k *keySet) current(ctx context.Context, kid string, refresh bool) (*jose.JSONWebKeySet, error) {
	k.mu.Lock()
	for k.fetching != nil {
		if k.keys != nil && !refresh {
			defer k.mu.Unlock()
			return k.keys, nil
		}
		done := k.fetching
		k.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		k.mu.Lock()
	}
	now := k.now()
	stale := k.keys == nil || now.Sub(k.loaded) > k.maxAge
	if refresh && k.has(kid) {
		defer k.mu.Unlock()
		return k.keys, nil // another request fetched it meanwhile
	}
	if (!stale && !refresh) || (!k.fetched.IsZero() && now.Sub(k.fetched) < k.minRefresh) {
		defer k.mu.Unlock()
		return k.keys, k.unavailable(kid, refresh)
	}
	k.fetched = now
	done := make(chan struct{})
	k.fetching = done
	k.mu.Unlock()

	// The fetch serves every request waiting for it, so the one that
	// started it going away does not cut it short.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	keys, err := k.fetch(fctx)
	cancel()

	k.mu.Lock()
	defer k.mu.Unlock()
	k.fetching = nil
	close(done)
	if err != nil {
		k.failure = err
		k.log.Warn("fetching the issuer's keys", "issuer", k.issuer.Issuer, "error", err)
		return k.keys, k.unavailable(kid, refresh) // keep the keys we have
	}
	k.keys, k.loaded, k.failure = keys, now, nil
	k.log.Info("issuer keys loaded", "issuer", k.issuer.Issuer, "keys", len(keys.Keys))
	return k.keys, nil
}

// has says whether the cached keys hold kid. Call with mu held.
func (k *keySet) has(kid string) bool {
	return k.keys != nil && kid != "" && len(k.keys.Key(kid)) > 0
}

// unavailable is the error of a request for keys the issuer could not
// give: there are none, or (refresh) newer ones were wanted, for a kid
// not cached, and the last fetch failed. Cached keys keep serving the
// tokens they verify while the issuer is down. Call with mu held.
func (k *keySet) unavailable(kid string, refresh bool) error {
	switch {
	case k.keys == nil && k.failure == nil:
		return &keysUnavailableError{errors.New("no key set has been fetched yet")}
	case k.keys == nil, refresh && k.failure != nil && !k.has(kid):
		return &keysUnavailableError{k.failure}
	}
	return nil
}

func (k *keySet) fetch(ctx context.Context) (*jose.JSONWebKeySet, error) {
	var raw []byte
	var err error
	switch {
	case k.issuer.ReadJWKS != nil:
		raw, err = k.issuer.ReadJWKS()
	case k.issuer.JWKSURL != "":
		raw, err = k.get(ctx, k.issuer.JWKSURL)
	default:
		raw, err = k.fromDiscovery(ctx)
	}
	if err != nil {
		return nil, err
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("key set: %w", err)
	}
	for _, key := range set.Keys {
		if !key.IsPublic() {
			return nil, fmt.Errorf("key set: key %q is not a public key; publish public keys only", key.KeyID)
		}
	}
	return &set, nil
}

// fromDiscovery fetches the key set at the jwks_uri of the issuer's
// discovery document. The document is read again when it is older than
// maxAge and when the key set it named cannot be fetched, so a provider
// that moves its keys is followed without a restart.
func (k *keySet) fromDiscovery(ctx context.Context) ([]byte, error) {
	var jwksErr error
	if k.jwksURL != "" && k.now().Sub(k.discovered) <= k.maxAge {
		raw, err := k.get(ctx, k.jwksURL)
		if err == nil {
			return raw, nil
		}
		jwksErr = err
	}
	url, err := k.discover(ctx)
	switch {
	case err != nil && jwksErr != nil:
		return nil, fmt.Errorf("%w; and reading the discovery document again: %w", jwksErr, err)
	case err != nil:
		return nil, err
	}
	moved := url != k.jwksURL
	k.jwksURL, k.discovered = url, k.now()
	if jwksErr != nil && !moved {
		return nil, jwksErr // the document still names it: no use asking again
	}
	return k.get(ctx, url)
}

// discover reads the issuer's discovery document and returns its
// jwks_uri. It reads the document itself rather than through
// oidc.NewProvider, which reads it without a bound.
func (k *keySet) discover(ctx context.Context) (string, error) {
	raw, err := k.get(ctx, strings.TrimSuffix(k.issuer.Issuer, "/")+"/.well-known/openid-configuration")
	if err != nil {
		return "", fmt.Errorf("OIDC discovery: %w", err)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return "", fmt.Errorf("OIDC discovery: the configuration is not JSON: %w", err)
	}
	if doc.Issuer != k.issuer.Issuer {
		return "", fmt.Errorf("OIDC discovery: the configuration names issuer %q, not %q", doc.Issuer, k.issuer.Issuer)
	}
	if doc.JWKSURI == "" {
		return "", fmt.Errorf("OIDC discovery: no jwks_uri")
	}
	return doc.JWKSURI, nil
}

func (k *keySet) get(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 1<<20 {
		return nil, fmt.Errorf("GET %s: the document is larger than 1 MiB", url)
	}
	return b, nil
}
