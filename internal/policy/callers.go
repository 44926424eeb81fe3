package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
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
}

// CallerDocument is one decoded kind: Caller resource.
type CallerDocument struct {
	// Name is the resource's metadata.name, the caller's id.
	Name string
	// Source is where the resource starts ("file.yaml:12"), for errors.
	Source string
	Spec   CallerSpec
}

// AuthOptions configure an Authenticator.
type AuthOptions struct {
	// APIKey, when set (from TOOLSVC_API_KEY), authenticates the caller
	// "api-key" with every scope and no tool restriction.
	APIKey  string
	Callers []CallerDocument
	// ReadFile reads token files; nil is os.ReadFile.
	ReadFile func(name string) ([]byte, error)
}

// Authenticator maps bearer tokens to callers. It is immutable once built
// and safe for concurrent use.
type Authenticator struct {
	entries []credential
}

type credential struct {
	digest [sha256.Size]byte
	caller registry.Caller
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
		if prev, dup := digests[c.digest]; dup {
			return fmt.Errorf("%s: caller %q has the same token as caller %q; every caller needs its own token", where, c.caller.ID, prev)
		}
		seen[c.caller.ID], digests[c.digest] = where, c.caller.ID
		a.entries = append(a.entries, c)
		return nil
	}
	if o.APIKey != "" {
		err := add("TOOLSVC_API_KEY", credential{
			digest: sha256.Sum256([]byte(o.APIKey)),
			caller: registry.Caller{ID: APIKeyCaller, Scopes: []registry.Scope{registry.ScopeCall, registry.ScopeApprove, registry.ScopeAdmin}},
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
		if err := add(where, c); err != nil {
			return nil, err
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
	default:
		return c, fmt.Errorf("no token: set tokenSha256 (hex SHA-256 of the token) or tokenFile")
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
	c.caller = registry.Caller{ID: d.Name, Tools: slices.Clone(s.Tools), MaxTier: s.MaxTier, Scopes: scopes}
	return c, nil
}

// Len returns the number of credentials; 0 means none are configured (the
// service then runs open, on loopback only).
func (a *Authenticator) Len() int { return len(a.entries) }

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
	if found == 0 {
		return nil, false
	}
	c := a.entries[idx].caller
	c.Tools, c.Scopes = slices.Clone(c.Tools), slices.Clone(c.Scopes)
	return &c, true
}
