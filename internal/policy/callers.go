package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// APIKeyCaller is the id of the caller that TOOLSVC_API_KEY authenticates.
const APIKeyCaller = "api-key"

// CallerSpec is the spec of a kind: Caller resource. The caller's id is
// the resource's metadata.name.
type CallerSpec struct {
	// TokenSHA256 is the hex SHA-256 digest of the caller's bearer token
	// (e.g. printf %s "$TOKEN" | sha256sum). Exactly one of TokenSHA256
	// and TokenFile is set.
	TokenSHA256 string `yaml:"tokenSha256,omitempty"`
	// TokenFile is a file holding the token itself (a mounted secret);
	// surrounding white space is ignored. It is read once, at load.
	TokenFile string `yaml:"tokenFile,omitempty"`
	// Tools are the tool-name globs the caller may see and call; empty
	// means every tool.
	Tools []string `yaml:"tools,omitempty"`
	// MaxTier is the most dangerous tier the caller may see; empty means
	// any.
	MaxTier registry.Tier `yaml:"maxTier,omitempty"`
	// Scopes are the caller's permissions (call, approve, admin); empty
	// means call only.
	Scopes []registry.Scope `yaml:"scopes,omitempty"`
	// ClientCert lets a TLS client certificate (verified against
	// TOOLSVC_TLS_CLIENT_CA_FILE) authenticate the caller.
	ClientCert *ClientCertSpec `yaml:"clientCert,omitempty"`
	// RateLimit bounds the caller's calls; empty is the service default.
	RateLimit *RateLimitSpec `yaml:"rateLimit,omitempty"`
	// Workspace names a file workspace this caller shares with every
	// caller that names the same one; empty gives the caller a file tree
	// of its own (see docs/sandbox.md).
	Workspace string `yaml:"workspace,omitempty"`
}

// ClientCertSpec names the certificates of a caller: by subject (the
// distinguished name as Go prints it, e.g. "CN=build-bot,O=Example") or by
// one of its subject alternative names (DNS, URI, e-mail, IP). Either may
// be set; a certificate matching any one authenticates the caller. A SAN
// matches only a SAN of its own type (see parseSAN).
type ClientCertSpec struct {
	Subject string   `yaml:"subject,omitempty"`
	SANs    []string `yaml:"sans,omitempty"`
}

// CallerDocument is one decoded kind: Caller resource.
type CallerDocument struct {
	// Name is the resource's metadata.name, the caller's id.
	Name string
	// Source is where the resource starts ("file.yaml:12"), for errors.
	Source string
	Spec   CallerSpec
}

// AnonymousCaller is the caller of every request when no credentials are
// configured (registry.Anonymous), held to defaultRate (nil: no limit),
// as a caller of TOOLSVC_API_KEY would be.
func AnonymousCaller(defaultRate *RateLimitSpec) (*registry.Caller, error) {
	c := registry.Anonymous()
	rate, err := rateLimitOf(nil, defaultRate, c.ID)
	if err != nil {
		return nil, fmt.Errorf("default rate limit: %w", err)
	}
	c.RateLimit = rate
	return c, nil
}

// AuthOptions configure an Authenticator.
type AuthOptions struct {
	// APIKey, when set (from TOOLSVC_API_KEY), authenticates the caller
	// "api-key" with every scope and no tool restriction.
	APIKey  string
	Callers []CallerDocument
	// ReadFile reads token files; nil is os.ReadFile.
	ReadFile func(name string) ([]byte, error)
	// DefaultRate is the service's default rate limit; nil is none.
	DefaultRate *RateLimitSpec
}

// Authenticator maps bearer tokens to callers. It is immutable once built
// and safe for concurrent use.
type Authenticator struct {
	entries []credential
	certs   []certCredential
}

type credential struct {
	digest [sha256.Size]byte
	caller registry.Caller
}

type certCredential struct {
	subject string
	sans    []certSAN
	caller  registry.Caller
}

// NewAuthenticator checks the caller specs and builds an authenticator.
// Errors name the file, line and caller.
func NewAuthenticator(o AuthOptions) (*Authenticator, error) {
	readFile := o.ReadFile
	if readFile == nil {
		readFile = os.ReadFile
	}
	a := &Authenticator{}
	seen := map[string]string{}
	digests := map[[sha256.Size]byte]string{}
	add := func(where string, c credential) error {
		if prev, dup := seen[c.caller.ID]; dup {
			return fmt.Errorf("%s: caller %q is already defined (%s)", where, c.caller.ID, prev)
		}
		if c.digest == ([sha256.Size]byte{}) {
			seen[c.caller.ID] = where
			return nil
		}
		if prev, dup := digests[c.digest]; dup {
			return fmt.Errorf("%s: caller %q has the same token as caller %q; every caller needs its own token", where, c.caller.ID, prev)
		}
		seen[c.caller.ID], digests[c.digest] = where, c.caller.ID
		a.entries = append(a.entries, c)
		return nil
	}
	if o.APIKey != "" {
		rate, err := rateLimitOf(nil, o.DefaultRate, APIKeyCaller)
		if err != nil {
			return nil, fmt.Errorf("default rate limit: %w", err)
		}
		err = add("TOOLSVC_API_KEY", credential{
			digest: sha256.Sum256([]byte(o.APIKey)),
			caller: registry.Caller{ID: APIKeyCaller, Scopes: []registry.Scope{registry.ScopeCall, registry.ScopeApprove, registry.ScopeAdmin}, RateLimit: rate},
		})
		if err != nil {
			return nil, err
		}
	}
	for _, d := range o.Callers {
		where := fmt.Sprintf("%s: Caller %q", d.Source, d.Name)
		c, err := credentialOf(&d, readFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if c.caller.RateLimit, err = rateLimitOf(d.Spec.RateLimit, o.DefaultRate, d.Name); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := add(where, c); err != nil {
			return nil, err
		}
		if cc := d.Spec.ClientCert; cc != nil {
			if cc.Subject == "" && len(cc.SANs) == 0 {
				return nil, fmt.Errorf("%s: clientCert names neither a subject nor sans", where)
			}
			e := certCredential{subject: cc.Subject, caller: c.caller}
			for i, v := range cc.SANs {
				san, err := parseSAN(v)
				if err != nil {
					return nil, fmt.Errorf("%s: clientCert.sans[%d] %q: %w", where, i, v, err)
				}
				e.sans = append(e.sans, san)
			}
			a.certs = append(a.certs, e)
		}
	}
	return a, nil
}

func credentialOf(d *CallerDocument, readFile func(string) ([]byte, error)) (credential, error) {
	var c credential
	s := &d.Spec
	if d.Name == "" {
		return c, fmt.Errorf("a caller needs a name")
	}
	switch {
	case s.TokenSHA256 != "" && s.TokenFile != "":
		return c, fmt.Errorf("set tokenSha256 or tokenFile, not both")
	case s.TokenSHA256 != "":
		b, err := hex.DecodeString(strings.TrimSpace(s.TokenSHA256))
		if err != nil || len(b) != sha256.Size {
			return c, fmt.Errorf("tokenSha256 must be 64 hex digits (the SHA-256 of the token, e.g. printf %%s \"$TOKEN\" | sha256sum)")
		}
		copy(c.digest[:], b)
	case s.TokenFile != "":
		b, err := readFile(s.TokenFile)
		if err != nil {
			return c, fmt.Errorf("tokenFile: %w", err)
		}
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return c, fmt.Errorf("tokenFile %s is empty", s.TokenFile)
		}
		c.digest = sha256.Sum256([]byte(tok))
	case s.ClientCert != nil:
		// A certificate-only caller: no bearer token matches it.
	default:
		return c, fmt.Errorf("no token: set tokenSha256 (hex SHA-256 of the token) or tokenFile (or clientCert)")
	}
	for _, g := range s.Tools {
		if _, err := path.Match(g, ""); err != nil {
			return c, fmt.Errorf("tool glob %q is malformed (path.Match syntax: *, ?, [a-z])", g)
		}
	}
	if s.MaxTier != "" && !s.MaxTier.Valid() {
		return c, fmt.Errorf("maxTier %q is not read_only, side_effecting or privileged", s.MaxTier)
	}
	scopes := slices.Clone(s.Scopes)
	if len(scopes) == 0 {
		scopes = []registry.Scope{registry.ScopeCall}
	}
	for _, sc := range scopes {
		if sc != registry.ScopeCall && sc != registry.ScopeApprove && sc != registry.ScopeAdmin {
			return c, fmt.Errorf("scope %q is not call, approve or admin", sc)
		}
	}
	c.caller = registry.Caller{ID: d.Name, Tools: slices.Clone(s.Tools), MaxTier: s.MaxTier, Scopes: scopes, Workspace: s.Workspace}
	return c, nil
}

// Len returns the number of credentials; 0 means none are configured (the
// service then runs open, on loopback only).
func (a *Authenticator) Len() int { return len(a.entries) + len(a.certs) }

// Caller returns the caller with id as this configuration defines it (its
// tools, maximum tier and scopes), or false when it defines none.
func (a *Authenticator) Caller(id string) (*registry.Caller, bool) {
	for i := range a.entries {
		if a.entries[i].caller.ID == id {
			c := a.entries[i].caller
			return &c, true
		}
	}
	for i := range a.certs {
		if a.certs[i].caller.ID == id {
			c := a.certs[i].caller
			return &c, true
		}
	}
	return nil, false
}

// Authenticate returns the caller whose token is token. It compares the
// token's SHA-256 digest with every configured digest in constant time,
// without stopping at a match, so the time taken tells nothing about
// which tokens exist. The caller returned is the caller's own copy.
func (a *Authenticator) Authenticate(token string) (*registry.Caller, bool) {
	if token == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	found, idx := 0, 0
	for i := range a.entries {
		eq := subtle.ConstantTimeCompare(sum[:], a.entries[i].digest[:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	if found == 0 || a.entries[idx].digest == ([sha256.Size]byte{}) {
		return nil, false
	}
	c := a.entries[idx].caller
	c.Tools, c.Scopes = slices.Clone(c.Tools), slices.Clone(c.Scopes)
	return &c, true
}

// AuthenticateCert returns the caller whose clientCert matches a verified
// client certificate: by subject, or by a subject alternative name of the
// type the caller names.
func (a *Authenticator) AuthenticateCert(cert *x509.Certificate) (*registry.Caller, bool) {
	if cert == nil {
		return nil, false
	}
	subject := cert.Subject.String()
	for _, e := range a.certs {
		if (e.subject != "" && e.subject == subject) ||
			slices.ContainsFunc(e.sans, func(s certSAN) bool { return s.in(cert) }) {
			c := e.caller
			c.Tools, c.Scopes = slices.Clone(c.Tools), slices.Clone(c.Scopes)
			return &c, true
		}
	}
	return nil, false
}

// The types of subject alternative name a caller may name.
const (
	sanDNS   = "dns"
	sanEmail = "email"
	sanIP    = "ip"
	sanURI   = "uri"
)

// certSAN is a checked clientCert.sans entry.
type certSAN struct {
	kind  string // sanDNS, sanEmail, sanIP or sanURI
	value string // the name without its prefix; a URI as Go prints it
	ip    net.IP
}

// parseSAN checks a clientCert.sans entry and says which type of SAN it
// names: the type its prefix gives (dns:, email:, uri:, ip:, any case, as
// openssl prints SANs), else the type its value has: an IP address, a URI
// (a scheme and a colon, e.g. spiffe://… or urn:…), an e-mail address
// (with an @), or else a DNS name. A certificate matches only a SAN of
// that type: a CA constrains each type separately, so a DNS name
// "ops@example.com" that it lets a client have must not pass for the
// e-mail address of the caller ops@example.com.
func parseSAN(s string) (certSAN, error) {
	if i := strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }); i >= 0 {
		return certSAN{}, fmt.Errorf("a SAN has no spaces or control characters (byte %d)", i)
	}
	if prefix, rest, ok := strings.Cut(s, ":"); ok {
		switch k := strings.ToLower(prefix); k {
		case sanDNS, sanEmail, sanIP, sanURI:
			return sanOf(k, rest)
		}
	}
	switch {
	case net.ParseIP(s) != nil:
		return sanOf(sanIP, s)
	case strings.Contains(s, ":"):
		return sanOf(sanURI, s)
	case strings.Contains(s, "@"):
		return sanOf(sanEmail, s)
	default:
		return sanOf(sanDNS, s)
	}
}

const sanPrefixHint = "; to name another type of SAN, prefix it with its type: dns:, email:, uri: or ip:"

// sanOf checks value as a SAN of type kind.
func sanOf(kind, value string) (certSAN, error) {
	san := certSAN{kind: kind, value: value}
	switch kind {
	case sanIP:
		if san.ip = net.ParseIP(value); san.ip == nil {
			return san, fmt.Errorf("an ip: SAN must be an IP address (10.0.0.7, 2001:db8::7)")
		}
	case sanURI:
		u, err := url.Parse(value)
		if err != nil || u.Scheme == "" {
			return san, fmt.Errorf("is not a URI with a scheme (spiffe://example.org/build-bot, urn:…)%s", sanPrefixHint)
		}
		san.value = u.String()
	case sanEmail:
		local, domain, ok := cutLast(value, "@")
		if !ok || local == "" || !isDNSName(domain) {
			return san, fmt.Errorf("is not an e-mail address (ops@example.com)%s", sanPrefixHint)
		}
	default:
		if !isDNSName(value) {
			return san, fmt.Errorf("is not a DNS name (letters, digits, -, _ and dots; * as the first label)%s", sanPrefixHint)
		}
	}
	return san, nil
}

// in reports whether cert has the SAN s, of the same type.
func (s certSAN) in(cert *x509.Certificate) bool {
	switch s.kind {
	case sanIP:
		return slices.ContainsFunc(cert.IPAddresses, s.ip.Equal)
	case sanURI:
		return slices.ContainsFunc(cert.URIs, func(u *url.URL) bool { return u.String() == s.value })
	case sanEmail:
		// The domain of an address is case-insensitive, its local part
		// is not (RFC 5280, 7.5).
		local, domain, _ := cutLast(s.value, "@")
		return slices.ContainsFunc(cert.EmailAddresses, func(a string) bool {
			l, d, ok := cutLast(a, "@")
			return ok && l == local && strings.EqualFold(d, domain)
		})
	default:
		return slices.ContainsFunc(cert.DNSNames, func(n string) bool { return strings.EqualFold(n, s.value) })
	}
}

// isDNSName reports whether s is a DNS name: dot-separated labels of
// letters, digits, - and _, the first of which may be the wildcard *.
func isDNSName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for i, label := range strings.Split(s, ".") {
		if label == "*" && i == 0 {
			continue
		}
		if label == "" || len(label) > 63 || strings.TrimLeft(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			return false
		}
	}
	return true
}

// cutLast slices s around the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
