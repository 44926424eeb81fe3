package http

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Identity resolves credentials to callers: bearer tokens (static keys
// and JWTs) and verified TLS client certificates. The API and the
// console sign in through the same Identity (see Server.ResolveCaller).
type Identity interface {
	// Token resolves a bearer token; the error is an *AuthError.
	Token(ctx context.Context, token string) (*registry.Caller, error)
	// Certificate resolves a verified client certificate.
	Certificate(cert *x509.Certificate) (*registry.Caller, bool)
	// Challenge is the WWW-Authenticate value of a request without
	// credentials (RFC 6750: no error code).
	Challenge() string
}

// AuthError is why credentials were refused: Status 401 (or 403), with
// the RFC 6750 error code and a description safe to show the client.
// Err is the detail for the log only.
type AuthError struct {
	Status      int
	Code        string // invalid_token, invalid_request, insufficient_scope; "" when no credentials came
	Description string
	// Issuers are the issuers the service accepts, for the challenge.
	Issuers []string
	Err     error
}

func (e *AuthError) Error() string {
	if e.Err != nil {
		return e.Description + ": " + e.Err.Error()
	}
	return e.Description
}

func (e *AuthError) Unwrap() error { return e.Err }

// challenge is the WWW-Authenticate value of the error.
func (e *AuthError) challenge() string {
	var b strings.Builder
	b.WriteString(`Bearer realm="toolsvc"`)
	if e.Code != "" {
		fmt.Fprintf(&b, `, error=%q`, e.Code)
	}
	if e.Description != "" && e.Code != "" {
		fmt.Fprintf(&b, `, error_description=%q`, quoteSafe(e.Description))
	}
	if len(e.Issuers) > 0 {
		fmt.Fprintf(&b, `, issuer=%q`, quoteSafe(strings.Join(e.Issuers, " ")))
	}
	return b.String()
}

// quoteSafe keeps a value within RFC 6750's quoted-string characters.
func quoteSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '\''
		}
		return r
	}, s)
}

// staticIdentity adapts an Authenticator (static keys only).
type staticIdentity struct{ a Authenticator }

func (s staticIdentity) Token(_ context.Context, token string) (*registry.Caller, error) {
	if c, ok := s.a.Authenticate(token); ok {
		return c, nil
	}
	return nil, &AuthError{Status: http.StatusUnauthorized, Code: "invalid_token", Description: "the token is not valid"}
}

func (staticIdentity) Certificate(*x509.Certificate) (*registry.Caller, bool) { return nil, false }

func (staticIdentity) Challenge() string { return `Bearer realm="toolsvc"` }

// ResolveCaller returns the caller of a request: from its bearer token,
// else from its verified client certificate. Without configured
// credentials every request is the anonymous caller. The error is an
// *AuthError.
func (s *Server) ResolveCaller(r *http.Request) (*registry.Caller, error) {
	id := s.identity()
	if id == nil {
		if a := s.deps.Anonymous; a != nil {
			c := *a // each request its own, as registry.Anonymous gives
			return &c, nil
		}
		return registry.Anonymous(), nil
	}
	if hs := r.Header.Values("Authorization"); len(hs) > 1 {
		// Which one counts would be a guess (Header.Get takes the first,
		// a proxy in front may have read the last): refuse, as RFC 6750
		// does a request with more than one way of sending a token.
		return nil, &AuthError{Status: http.StatusUnauthorized, Code: "invalid_request",
			Description: fmt.Sprintf("the request has %d Authorization headers; send one, Authorization: Bearer <token>", len(hs))}
	}
	if h := r.Header.Get("Authorization"); h != "" {
		token, ok := bearer(h)
		if !ok {
			return nil, &AuthError{Status: http.StatusUnauthorized, Code: "invalid_request",
				Description: "send the token as Authorization: Bearer <token>"}
		}
		return id.Token(r.Context(), token)
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		if c, ok := id.Certificate(r.TLS.VerifiedChains[0][0]); ok {
			return c, nil
		}
		return nil, &AuthError{Status: http.StatusUnauthorized, Code: "invalid_request",
			Description: "the client certificate maps to no caller; send Authorization: Bearer <token>"}
	}
	return nil, &AuthError{Status: http.StatusUnauthorized}
}

func (s *Server) identity() Identity {
	switch {
	case s.deps.Identity != nil:
		return s.deps.Identity
	case s.deps.Auth != nil:
		return staticIdentity{s.deps.Auth}
	}
	return nil
}

// writeAuthError answers a refused request: 401 (or 403) with the
// RFC 6750 challenge and a problem body.
func (s *Server) writeAuthError(w http.ResponseWriter, r *http.Request, err error) {
	var ae *AuthError
	if !errors.As(err, &ae) {
		s.writeProblem(w, r, err)
		return
	}
	challenge := ae.challenge()
	if ae.Code == "" {
		if id := s.identity(); id != nil {
			challenge = id.Challenge()
		}
	}
	w.Header().Set("WWW-Authenticate", challenge)
	detail := "missing or invalid credentials; send Authorization: Bearer <token>"
	if ae.Description != "" {
		detail = ae.Description
	}
	k := kindUnauthorized
	switch {
	case ae.Status == http.StatusForbidden:
		k = kindForbidden
	case ae.Status >= 500:
		k = kindUnavailable
		w.Header().Del("WWW-Authenticate")
	}
	s.writeProblem(w, r, problem(k, detail).because(ae.Err))
}
