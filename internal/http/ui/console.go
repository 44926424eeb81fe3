// Package ui is toolsvc's console at /ui: an approvals inbox, the recorded
// calls and the catalog, rendered on the server from embedded templates
// with no external assets under a strict Content-Security-Policy. People
// sign in with the API's credentials (the same token-to-caller resolution)
// into a sealed cookie; every form carries a CSRF token and cross-site
// posts are refused.
package ui

import (
	"context"
	"crypto/hmac"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Executor is what the console needs of the executor.
type Executor interface {
	Decide(ctx context.Context, approver *registry.Caller, id string, v registry.Verdict, reason string) (*registry.Approval, *registry.Result, error)
	Registry() *registry.Registry
	Store() registry.Store
}

// Options configure the console.
type Options struct {
	Executor Executor
	// Authenticate resolves a bearer token to a caller: the API's own
	// authenticator. Nil runs the console open, as the anonymous caller
	// (the API then runs open too, on loopback only).
	Authenticate func(token string) (*registry.Caller, bool)
	// Key seals session cookies (32 bytes); nil makes a random one, so
	// sessions end with the process and do not cross replicas.
	Key []byte
	// SessionTTL is how long a sign-in lasts; 0 is 12 hours.
	SessionTTL time.Duration
	// SecureCookies marks cookies Secure even when the request came in
	// without TLS (behind a TLS-terminating proxy).
	SecureCookies bool
	Logger        *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Admit, when set, wraps the post that decides a request, which runs
	// the call when it approves: the service counts it among its calls in
	// flight (shutdown waits for it) and refuses it while draining.
	Admit func(http.Handler) http.Handler
}

// Console serves the /ui pages.
type Console struct {
	o      Options
	seal   *sealer
	pages  map[string]*template.Template
	cross  *http.CrossOriginProtection
	assets http.Handler
}

// New returns the console.
func New(o Options) (*Console, error) {
	if o.SessionTTL <= 0 {
		o.SessionTTL = 12 * time.Hour
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s, err := newSealer(o.Key)
	if err != nil {
		return nil, err
	}
	c := &Console{o: o, seal: s, pages: map[string]*template.Template{}, cross: http.NewCrossOriginProtection()}
	c.cross.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, "This form was posted from another site, so it was refused.")
	}))
	funcs := template.FuncMap{"ago": c.ago, "left": c.left, "json": prettyJSON, "fold": fold, "when": when, "dict": card, "callLink": callLink,
		"keptArguments": func() int { return registry.KeptArgumentsBytes }}
	for _, page := range []string{"inbox", "approval", "calls", "call", "catalog", "signin", "error"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html", "templates/"+page+".html")
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", page, err)
		}
		c.pages[page] = t
	}
	sub, _ := fs.Sub(assetFS, "assets")
	c.assets = http.StripPrefix("/ui/assets/", http.FileServerFS(sub))
	return c, nil
}

// card is what the request template gets: the request and what the page
// knows of the viewer.
func card(v *view, a *registry.Approval) map[string]any {
	return map[string]any{"A": a, "CSRF": v.CSRF, "CanApprove": v.CanApprove}
}

// Routes adds the console's routes to r.
func (c *Console) Routes(r chi.Router) {
	r.Group(func(r chi.Router) {
		r.Use(c.headers)
		r.Get("/ui/assets/*", c.assets.ServeHTTP)
		r.Get("/ui/signin", c.handleSignInPage)
		r.With(c.checkPost).Post("/ui/signin", c.handleSignIn)
		r.Group(func(r chi.Router) {
			r.Use(c.signedIn)
			r.Get("/ui", c.handleInbox)
			r.Get("/ui/inbox", c.handleInboxFragment)
			r.Get("/ui/approvals/{id}", c.handleApproval)
			decide := r.With(c.checkPost)
			if c.o.Admit != nil {
				decide = decide.With(c.o.Admit)
			}
			decide.Post("/ui/approvals/{id}", c.handleDecide)
			r.Get("/ui/calls", c.handleCalls)
			r.Get("/ui/calls/{toolCallId}", c.handleCall)
			r.Get("/ui/catalog", c.handleCatalog)
			r.With(c.checkPost).Post("/ui/signout", c.handleSignOut)
		})
	})
}

// csp allows only the console's own script and stylesheet.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func (c *Console) headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/ui/assets/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

type ctxKey int

const (
	callerKey ctxKey = iota
	sessionKey
)

// view is what every page template gets.
type view struct {
	Title  string
	Caller *registry.Caller
	// Open is true when the service runs without credentials.
	Open       bool
	CSRF       string
	CanApprove bool
	Nav        string
	Data       any
}

// session reads the request's session, or starts one (not signed in) and
// sets its cookie.
func (c *Console) session(w http.ResponseWriter, r *http.Request) session {
	if ck, err := r.Cookie(cookieName); err == nil {
		if v, ok := c.seal.open(ck.Value, c.o.Now()); ok {
			return v
		}
	}
	v := session{Nonce: newNonce(), Expires: c.o.Now().Add(c.o.SessionTTL).Unix()}
	c.setCookie(w, r, v)
	return v
}

// signedIn resolves the session's token to a caller the way the API does,
// or sends the person to sign in.
func (c *Console) signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := c.session(w, r)
		var caller *registry.Caller
		if c.o.Authenticate == nil {
			caller = registry.Anonymous()
		} else if v.Token != "" {
			var ok bool
			if caller, ok = c.o.Authenticate(v.Token); !ok {
				caller = nil
			}
		}
		if caller == nil {
			if r.Method != http.MethodGet {
				c.fail(w, r, http.StatusUnauthorized, "Your session has ended; sign in again.")
				return
			}
			to := "/ui/signin"
			if uri := r.URL.RequestURI(); len(uri) <= maxNext {
				to += "?next=" + url.QueryEscape(uri)
			}
			http.Redirect(w, r, to, http.StatusSeeOther)
			return
		}
		ctx := context.WithValue(context.WithValue(r.Context(), callerKey, caller), sessionKey, v)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// checkPost refuses cross-site posts (Sec-Fetch-Site or Origin) and posts
// without the session's CSRF token.
func (c *Console) checkPost(next http.Handler) http.Handler {
	return c.cross.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		ck, err := r.Cookie(cookieName)
		var v session
		ok := err == nil
		if ok {
			v, ok = c.seal.open(ck.Value, c.o.Now())
		}
		if !ok || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(c.seal.csrf(v))) {
			c.fail(w, r, http.StatusForbidden, "This form has expired or did not come from this console; reload the page and try again.")
			return
		}
		next.ServeHTTP(w, r)
	}))
}

func (c *Console) view(r *http.Request, title, nav string, data any) *view {
	caller, _ := r.Context().Value(callerKey).(*registry.Caller)
	v, _ := r.Context().Value(sessionKey).(session)
	return &view{Title: title, Caller: caller, Open: c.o.Authenticate == nil, CSRF: c.seal.csrf(v), Nav: nav, Data: data,
		CanApprove: caller != nil && caller.Has(registry.ScopeApprove)}
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, v *view) {
	c.renderTemplate(w, r, status, page, "layout.html", v)
}

func (c *Console) renderTemplate(w http.ResponseWriter, r *http.Request, status int, page, name string, v *view) {
	var buf strings.Builder
	if err := c.pages[page].ExecuteTemplate(&buf, name, v); err != nil {
		c.o.Logger.ErrorContext(r.Context(), "console: rendering", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// maxMessage bounds an error page's message, which may repeat what the
// request sent (an id, a caller): escaped, 1 MB of "&" in a path was 5 MB
// of page.
const maxMessage = 1 << 10

// fail renders an error page.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if len(msg) > maxMessage {
		msg = registry.Clip(msg, maxMessage) + "…"
	}
	v := c.view(r, http.StatusText(status), "", msg)
	c.render(w, r, status, "error", v)
}

func (c *Console) storeUnavailable(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, registry.ErrNoStore) {
		c.fail(w, r, http.StatusNotFound, "This service keeps no call records, so there is nothing to show here.")
		return
	}
	c.o.Logger.ErrorContext(r.Context(), "console: store", "error", err)
	if errors.Is(err, registry.ErrStoreFull) {
		c.fail(w, r, http.StatusServiceUnavailable, "The call store is out of disk space; try again once an operator has freed space.")
		return
	}
	c.fail(w, r, http.StatusServiceUnavailable, "The call store is not answering; try again shortly.")
}

func callerOf(r *http.Request) *registry.Caller {
	c, _ := r.Context().Value(callerKey).(*registry.Caller)
	return c
}

// seesAll: approvers and admins see every caller's requests and calls, as
// in the API.
func seesAll(c *registry.Caller) bool {
	return c.Has(registry.ScopeApprove) || c.Has(registry.ScopeAdmin)
}

func (c *Console) handleSignInPage(w http.ResponseWriter, r *http.Request) {
	if c.o.Authenticate == nil {
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return
	}
	v := c.session(w, r)
	ctx := context.WithValue(r.Context(), sessionKey, v)
	c.render(w, r, http.StatusOK, "signin", c.view(r.WithContext(ctx), "Sign in", "", map[string]string{"Next": safeNext(r.URL.Query().Get("next"))}))
}

// maxNext bounds the address a sign-in returns to. Sent back in a
// Location header and a form field (escaped, up to five times longer), a
// 1 MB one made 6 MB of answer for anyone, signed in or not.
const maxNext = 2 << 10

// safeNext keeps a redirect after sign-in within the console, and short.
func safeNext(next string) string {
	if next == "" || len(next) > maxNext || !strings.HasPrefix(next, "/ui") || strings.HasPrefix(next, "//") ||
		strings.ContainsFunc(next, func(r rune) bool { return r == '\\' || r < 0x20 || r == 0x7f }) {
		return "/ui"
	}
	return next
}

func (c *Console) handleSignIn(w http.ResponseWriter, r *http.Request) {
	if c.o.Authenticate == nil {
		http.Redirect(w, r, "/ui", http.StatusSeeOther)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	next := safeNext(r.PostForm.Get("next"))
	bad := func(msg string) {
		ck, _ := r.Cookie(cookieName)
		v, _ := c.seal.open(ck.Value, c.o.Now())
		ctx := context.WithValue(r.Context(), sessionKey, v)
		c.render(w, r, http.StatusUnauthorized, "signin", c.view(r.WithContext(ctx), "Sign in", "", map[string]string{"Next": next, "Error": msg}))
	}
	if len(token) > maxTokenBytes {
		bad(fmt.Sprintf("That token is longer than %d bytes, more than a session cookie can hold.", maxTokenBytes))
		return
	}
	if _, ok := c.o.Authenticate(token); !ok || token == "" {
		bad("That token is not valid here.")
		return
	}
	// A new nonce: a session fixed before sign-in does not carry over.
	c.setCookie(w, r, session{Nonce: newNonce(), Token: token, Expires: c.o.Now().Add(c.o.SessionTTL).Unix()})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) handleSignOut(w http.ResponseWriter, r *http.Request) {
	c.clearCookie(w, r)
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}
