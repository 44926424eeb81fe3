package ui

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// cookieName is the console's one cookie. It holds the session sealed with
// AES-GCM under the console key: the bearer token the person signed in
// with (resolved again on every request, so a revoked key or an expired
// JWT ends the session), a random nonce the CSRF token is derived from,
// and an expiry. Signing out records the session as revoked in the store
// (see session.id), which every replica checks, so a copy of the cookie
// ends with it.
const cookieName = "toolsvc_console"

// maxTokenBytes keeps the sealed cookie under browsers' 4 KB limit.
const maxTokenBytes = 2800

type session struct {
	Nonce   string `json:"n"`
	Token   string `json:"t,omitempty"`
	Expires int64  `json:"e"`
}

type sealer struct {
	aead cipher.AEAD
	mac  []byte
}

func newSealer(key []byte) (*sealer, error) {
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	if len(key) != 32 {
		return nil, errors.New("the console key must be 32 bytes")
	}
	enc := hmac.New(sha256.New, key)
	enc.Write([]byte("toolsvc console cookie"))
	block, err := aes.NewCipher(enc.Sum(nil))
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("toolsvc console csrf"))
	return &sealer{aead: aead, mac: mac.Sum(nil)}, nil
}

func (s *sealer) seal(v session) string {
	plain, _ := json.Marshal(v)
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(nonce, nonce, plain, []byte(cookieName)))
}

func (s *sealer) open(value string, now time.Time) (session, bool) {
	var v session
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(b) < s.aead.NonceSize() {
		return v, false
	}
	plain, err := s.aead.Open(nil, b[:s.aead.NonceSize()], b[s.aead.NonceSize():], []byte(cookieName))
	if err != nil || json.Unmarshal(plain, &v) != nil || v.Nonce == "" || now.Unix() >= v.Expires {
		return session{}, false
	}
	return v, true
}

// csrf is the form token of a session.
func (s *sealer) csrf(v session) string {
	m := hmac.New(sha256.New, s.mac)
	m.Write([]byte(v.Nonce))
	return hex.EncodeToString(m.Sum(nil))
}

// id names v in the store's record of signed-out sessions: a digest of
// its nonce, so that nothing the store holds is of use as a session or a
// CSRF token.
func (v session) id() string {
	sum := sha256.Sum256([]byte("toolsvc console session\x00" + v.Nonce))
	return hex.EncodeToString(sum[:])
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setCookie stores v in the response.
func (c *Console) setCookie(w http.ResponseWriter, r *http.Request, v session) {
	http.SetCookie(w, &http.Cookie{
		Name: cookieName, Value: c.seal.seal(v), Path: "/ui", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: c.secure(r), Expires: time.Unix(v.Expires, 0),
	})
}

func (c *Console) clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: c.secure(r), MaxAge: -1})
}

func (c *Console) secure(r *http.Request) bool { return r.TLS != nil || c.o.SecureCookies }
