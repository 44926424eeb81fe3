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
	// GetCall reads a call's record as the API's GET /calls/{id} does: a
	// result held in memory, which the store could not take yet, is the
	// call's result.
	GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error)
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
	c.assets = http.StripPrefix("/ui/assets/", http.FileServerFS(filesOnly{sub}))
	return c, nil
}

// filesOnly serves the files of an FS and none of its directories: a
// directory is not found, rather than listed (GET /ui/assets/ listed the
// assets).
type filesOnly struct{ fs.FS }

func (f filesOnly) Open(name string) (fs.File, error) {
	file, err := f.FS.Open(name)
	if err != nil {
		return nil, err
	}
	if st, err := file.Stat(); err != nil || st.IsDir() {
		file.Close()
		return nil, fs.ErrNotExist
	}
	return file, nil
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
		})
		// Signing out works while the store is down: the cookie is
		// cleared, and the page says the session lives on elsewhere.
		r.With(c.signedInOrUnchecked, c.checkPost).Post("/ui/signout", c.handleSignOut)
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

// opened is the request's session, when its cookie opens and the session
// was not signed out (on this replica or another). err says the store
// could not tell whether it was (v is then the session the cookie holds,
// and ok false): the caller refuses the request, bar a sign-out.
func (c *Console) opened(r *http.Request) (v session, ok bool, err error) {
	ck, err := r.Cookie(cookieName)
	if err != nil {
		return session{}, false, nil
	}
	if v, ok = c.seal.open(ck.Value, c.o.Now()); !ok {
		return session{}, false, nil
	}
	revoked, err := c.revoked(r.Context(), v)
	if err != nil {
		return v, false, err
	}
	return v, !revoked, nil
}

// revoked reports whether v was signed out. A session without a token
// (nobody signed in) grants nothing and is never recorded, so only signed-in
// sessions cost a read of the store. Without a store nothing was ever
// recorded.
func (c *Console) revoked(ctx context.Context, v session) (bool, error) {
	st := c.o.Executor.Store()
	if v.Token == "" || st == nil {
		return false, nil
	}
	return st.SessionRevoked(ctx, v.id())
}

// session reads the request's session, or starts one (not signed in) and
// sets its cookie; a session that was signed out is replaced so. err says
// the store could not tell whether the session was signed out (the
// session returned is then the cookie's, unchecked).
func (c *Console) session(w http.ResponseWriter, r *http.Request) (session, error) {
	v, ok, err := c.opened(r)
	if err != nil {
		return v, err
	}
	if ok {
		return v, nil
	}
	v = session{Nonce: newNonce(), Expires: c.o.Now().Add(c.o.SessionTTL).Unix()}
	c.setCookie(w, r, v)
	return v, nil
}

// sessionUnchecked answers a request whose session could not be checked
// against the signed-out sessions: refused, never let through unchecked.
func (c *Console) sessionUnchecked(w http.ResponseWriter, r *http.Request, err error) {
	c.o.Logger.ErrorContext(r.Context(), "console: checking the session", "error", err)
	c.fail(w, r, http.StatusServiceUnavailable,
		"Your session cannot be checked right now: the call store, which records signed-out sessions, is not answering. Try again shortly.")
}

// signedIn resolves the session's token to a caller the way the API does,
// or sends the person to sign in.
func (c *Console) signedIn(next http.Handler) http.Handler { return c.requireSignIn(next, false) }

// signedInOrUnchecked is signedIn for sign-out, which goes on when the
// store cannot tell whether the session was signed out already: signing
// it out again does no harm, and the person learns that the store did
// not take it.
func (c *Console) signedInOrUnchecked(next http.Handler) http.Handler {
	return c.requireSignIn(next, true)
}

func (c *Console) requireSignIn(next http.Handler, unchecked bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := c.session(w, r)
		if err != nil {
			if !unchecked {
				c.sessionUnchecked(w, r, err)
				return
			}
			c.o.Logger.WarnContext(r.Context(), "console: signing out a session the store could not check", "error", err)
		}
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

// maxForm bounds the body of a console form; the largest, a decision
// with its reason, is a few KiB.
const maxForm = 64 << 10

// checkPost refuses cross-site posts (Sec-Fetch-Site or Origin), bodies
// over maxForm, and posts without the session's CSRF token.
func (c *Console) checkPost(next http.Handler) http.Handler {
	tooLarge := func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("This form is larger than %d KiB, more than any console form can be, so it was refused.", maxForm>>10))
	}
	return c.cross.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Refused before the first read of the body: that read is what
		// answers "100 Continue" to a client that asked, inviting the
		// upload.
		if r.ContentLength > maxForm {
			tooLarge(w, r)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				tooLarge(w, r)
				return
			}
			c.fail(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		// signedIn has read and checked the session of the routes it
		// guards; sign-in's own post is checked here.
		v, ok := r.Context().Value(sessionKey).(session)
		if !ok {
			var err error
			if v, ok, err = c.opened(r); err != nil {
				c.sessionUnchecked(w, r, err)
				return
			}
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
	v, err := c.session(w, r)
	if err != nil {
		c.sessionUnchecked(w, r, err)
		return
	}
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

// handleSignOut ends the session: in this browser by clearing its cookie,
// and everywhere by recording it in the store as signed out, so that a
// copy of the cookie is refused by every replica. When the store does not
// take the record, the person is told that the session lives on, and till
// when.
func (c *Console) handleSignOut(w http.ResponseWriter, r *http.Request) {
	v, _ := r.Context().Value(sessionKey).(session)
	c.clearCookie(w, r)
	if v.Token == "" { // open mode: nobody signed in
		http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
		return
	}
	until := time.Unix(v.Expires, 0)
	err := registry.ErrNoStore
	if st := c.o.Executor.Store(); st != nil {
		// Recorded even when the browser leaves at once (a tab closed
		// after the click); the store's deadline bounds it.
		err = st.RevokeSession(context.WithoutCancel(r.Context()), v.id(), until)
	}
	if err != nil {
		c.o.Logger.ErrorContext(r.Context(), "console: sign-out could not be recorded; the session stays valid until it expires",
			"caller", callerOf(r).ID, "until", until.UTC(), "error", err)
		// The page of someone no longer signed in here: no caller, no
		// sign-out button.
		ctx := context.WithValue(r.Context(), callerKey, (*registry.Caller)(nil))
		c.fail(w, r.WithContext(ctx), http.StatusServiceUnavailable, fmt.Sprintf(
			"This browser no longer holds your session, but the session could not be ended on the server: "+
				"the call store did not take the record. A copy of its cookie stays valid until %s. "+
				"If a copy may be in other hands, have the token you signed in with revoked.", when(until)))
		return
	}
	http.Redirect(w, r, "/ui/signin", http.StatusSeeOther)
}
