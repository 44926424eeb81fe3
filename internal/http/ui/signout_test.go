package ui

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// storeExecutor is an executor with a store and nothing else: enough for
// signing in and out and for the inbox.
type storeExecutor struct {
	Executor
	st registry.Store
}

func (e storeExecutor) Store() registry.Store { return e.st }

func (e storeExecutor) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	return e.st.GetCall(ctx, callerID, toolCallID)
}

// faultyStore is a real store whose session methods fail on demand.
type faultyStore struct {
	registry.Store
	failCheck, failRevoke atomic.Bool
}

var errStoreDown = errors.New("connection refused")

func (f *faultyStore) SessionRevoked(ctx context.Context, id string) (bool, error) {
	if f.failCheck.Load() {
		return false, errStoreDown
	}
	return f.Store.SessionRevoked(ctx, id)
}

func (f *faultyStore) RevokeSession(ctx context.Context, id string, until time.Time) error {
	if f.failRevoke.Load() {
		return errStoreDown
	}
	return f.Store.RevokeSession(ctx, id, until)
}

func openStore(t *testing.T) registry.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// serveConsole serves a console over st on a loopback server; the token
// "oncall-token" signs in as oncall, an approver. Consoles given the
// same key share sessions, as replicas do.
func serveConsole(t *testing.T, st registry.Store, key []byte) string {
	t.Helper()
	c, err := New(Options{
		Executor: storeExecutor{st: st},
		Key:      key,
		Authenticate: func(token string) (*registry.Caller, bool) {
			if token != "oncall-token" {
				return nil, false
			}
			return &registry.Caller{ID: "oncall", Scopes: []registry.Scope{registry.ScopeCall, registry.ScopeApprove}}, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	c.Routes(r)
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL
}

// client is a person's browser, reduced to the console's one cookie,
// which a test may copy, as someone who found it would.
type client struct {
	t      *testing.T
	base   string
	cookie string
	hc     *http.Client
}

func newClient(t *testing.T, base string) *client {
	hc := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &client{t: t, base: base, hc: hc}
}

func (c *client) do(method, path string, form url.Values) (int, string, http.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if c.cookie != "" {
		req.AddCookie(&http.Cookie{Name: cookieName, Value: c.cookie})
	}
	res, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ck := range res.Cookies() {
		if ck.Name == cookieName {
			c.cookie = ck.Value
		}
	}
	return res.StatusCode, string(b), res.Header
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrf reads the form token from the page at path.
func (c *client) csrf(path string) string {
	c.t.Helper()
	status, body, _ := c.do(http.MethodGet, path, nil)
	m := csrfField.FindStringSubmatch(body)
	if status != http.StatusOK || m == nil {
		c.t.Fatalf("GET %s = %d without a CSRF token:\n%.2000s", path, status, body)
	}
	return m[1]
}

func (c *client) signIn() {
	c.t.Helper()
	csrf := c.csrf("/ui/signin")
	status, body, h := c.do(http.MethodPost, "/ui/signin", url.Values{"csrf": {csrf}, "token": {"oncall-token"}})
	if status != http.StatusSeeOther || h.Get("Location") != "/ui" {
		c.t.Fatalf("sign-in = %d to %q:\n%.2000s", status, h.Get("Location"), body)
	}
}

// signedInAt checks that the cookie the client holds opens the inbox.
func (c *client) signedInAt() bool {
	c.t.Helper()
	status, body, h := c.do(http.MethodGet, "/ui", nil)
	switch {
	case status == http.StatusOK && strings.Contains(body, `<span id="who">oncall</span>`):
		return true
	case status == http.StatusSeeOther && strings.HasPrefix(h.Get("Location"), "/ui/signin"):
		return false
	}
	c.t.Fatalf("GET /ui = %d (Location %q):\n%.2000s", status, h.Get("Location"), body)
	return false
}

// holding returns a client that holds cookie, as someone who copied it.
func holding(t *testing.T, base, cookie string) *client {
	c := newClient(t, base)
	c.cookie = cookie
	return c
}

// A copy of the session cookie taken before sign-out (a shared computer,
// a proxy's log) is refused once the person signed out, for pages and
// posts alike; a sign-out without the CSRF token ends nothing.
func TestSignOutEndsCopiedSession(t *testing.T) {
	base := serveConsole(t, openStore(t), nil)
	person := newClient(t, base)
	person.signIn()
	copied := person.cookie
	if !holding(t, base, copied).signedInAt() {
		t.Fatal("the copied cookie does not open the console before sign-out")
	}
	copiedCSRF := holding(t, base, copied).csrf("/ui")

	if status, _, _ := person.do(http.MethodPost, "/ui/signout", url.Values{}); status != http.StatusForbidden {
		t.Errorf("sign-out without the CSRF token = %d; want 403", status)
	}
	if !holding(t, base, copied).signedInAt() {
		t.Fatal("a sign-out refused for its missing CSRF token ended the session")
	}

	status, body, h := person.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {person.csrf("/ui")}})
	if status != http.StatusSeeOther || h.Get("Location") != "/ui/signin" {
		t.Fatalf("sign-out = %d to %q; want 303 to /ui/signin:\n%.2000s", status, h.Get("Location"), body)
	}
	if holding(t, base, copied).signedInAt() {
		t.Fatal("the copied cookie still opens the console after sign-out")
	}
	// A post with the copy and its CSRF token is refused too.
	if status, body, _ := holding(t, base, copied).do(http.MethodPost, "/ui/approvals/apr_1", url.Values{"csrf": {copiedCSRF}, "decision": {"deny"}}); status != http.StatusUnauthorized {
		t.Errorf("a decision posted with the copied cookie after sign-out = %d; want 401:\n%.2000s", status, body)
	}
	// The person signs in again: a new session, not the revoked one.
	person.signIn()
	if !person.signedInAt() {
		t.Error("signing in again after sign-out does not open the console")
	}
}

// When the store cannot say whether a session was signed out, the console
// refuses the request with a page saying so: never a page let through
// unchecked, and not a sign-in form that hides the outage.
func TestSessionCheckFailsClosed(t *testing.T) {
	st := &faultyStore{Store: openStore(t)}
	base := serveConsole(t, st, nil)
	person := newClient(t, base)
	person.signIn()
	csrf := person.csrf("/ui")
	st.failCheck.Store(true)
	for _, req := range []struct {
		method, path string
		form         url.Values
	}{
		{http.MethodGet, "/ui", nil},
		{http.MethodGet, "/ui/calls", nil},
		{http.MethodGet, "/ui/signin", nil},
		{http.MethodPost, "/ui/approvals/apr_1", url.Values{"csrf": {csrf}, "decision": {"approve"}}},
	} {
		status, body, _ := person.do(req.method, req.path, req.form)
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "Your session cannot be checked right now") {
			t.Errorf("%s %s while the store fails = %d; want 503 with a page saying so:\n%.2000s", req.method, req.path, status, body)
		}
	}
	st.failCheck.Store(false)
	if !person.signedInAt() {
		t.Error("the session did not work again once the store answered")
	}
	// Sign-out needs no check: a session signed out again stays so.
	copied := person.cookie
	csrf = person.csrf("/ui")
	st.failCheck.Store(true)
	if status, body, _ := person.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {csrf}}); status != http.StatusSeeOther {
		t.Errorf("sign-out while only the check fails = %d; want 303:\n%.2000s", status, body)
	}
	st.failCheck.Store(false)
	if holding(t, base, copied).signedInAt() {
		t.Error("the copied cookie still opens the console after a sign-out made while the check failed")
	}
}

// A sign-out whose revocation the store does not take tells the person
// that the session lives on on the server, and until when; the browser's
// cookie is cleared all the same.
func TestSignOutSaysWhenItCouldNotEndTheSession(t *testing.T) {
	for _, storeDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("storeDown=%v", storeDown), func(t *testing.T) {
			st := &faultyStore{Store: openStore(t)}
			base := serveConsole(t, st, nil)
			person := newClient(t, base)
			person.signIn()
			copied := person.cookie
			csrf := person.csrf("/ui")
			// The revocation fails alone, or the store answers nothing at
			// all (the check before it fails too).
			st.failRevoke.Store(true)
			st.failCheck.Store(storeDown)
			status, body, h := person.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {csrf}})
			if status != http.StatusServiceUnavailable {
				t.Fatalf("sign-out while the store fails = %d; want 503:\n%.2000s", status, body)
			}
			for _, want := range []string{"could not be ended on the server", "stays valid until 20"} {
				if !strings.Contains(body, want) {
					t.Errorf("the sign-out page does not say %q:\n%.2000s", want, body)
				}
			}
			if strings.Contains(body, `action="/ui/signout"`) {
				t.Error("the page offers to sign out again, as if the person were still signed in here")
			}
			cleared := false
			for _, ck := range h.Values("Set-Cookie") {
				cleared = cleared || strings.HasPrefix(ck, cookieName+"=;") && strings.Contains(ck, "Max-Age=0")
			}
			if !cleared {
				t.Errorf("the cookie was not cleared: Set-Cookie %q", h.Values("Set-Cookie"))
			}
			// What the page says is true: the copy still works.
			st.failRevoke.Store(false)
			st.failCheck.Store(false)
			if !holding(t, base, copied).signedInAt() {
				t.Error("the session ended though the page said it stays valid")
			}
		})
	}
}

// Sign-out through one replica ends the session on the others: two
// consoles with one key over one PostgreSQL database.
func TestSignOutEndsSessionOnEveryReplica(t *testing.T) {
	a, b := sharedPostgres(t)
	key := []byte(strings.Repeat("k", 32))
	baseA, baseB := serveConsole(t, a, key), serveConsole(t, b, key)
	person := newClient(t, baseA)
	person.signIn()
	copied := person.cookie
	if !holding(t, baseB, copied).signedInAt() {
		t.Fatal("the session does not open the other replica's console")
	}
	if status, body, _ := person.do(http.MethodPost, "/ui/signout", url.Values{"csrf": {person.csrf("/ui")}}); status != http.StatusSeeOther {
		t.Fatalf("sign-out = %d:\n%.2000s", status, body)
	}
	if holding(t, baseB, copied).signedInAt() {
		t.Fatal("the copied cookie still opens the other replica's console after sign-out")
	}
}

// A form body declared larger than the console takes is refused with 413
// before any of it is read: a client that asked "Expect: 100-continue" is
// not invited to upload it. One sent without a length is cut off at the
// limit, with 413 too.
func TestOversizedFormRefusedBeforeUpload(t *testing.T) {
	base := serveConsole(t, openStore(t), nil)
	person := newClient(t, base)
	person.signIn()
	addr := strings.TrimPrefix(base, "http://")
	for _, path := range []string{"/ui/signin", "/ui/signout", "/ui/approvals/apr_1"} {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nCookie: %s=%s\r\nContent-Type: application/x-www-form-urlencoded\r\n"+
			"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n", path, addr, cookieName, person.cookie, 100<<20)
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if err != nil {
			t.Fatalf("%s: reading the answer: %v", path, err)
		}
		if got := strings.TrimSpace(line); got != "HTTP/1.1 413 Request Entity Too Large" {
			t.Errorf("%s with Content-Length 100 MiB and Expect: 100-continue answered %q first; want 413", path, got)
		}
	}
	// Without a length: read up to the limit, then refused as too large
	// (not as an unreadable form).
	req, err := http.NewRequest(http.MethodPost, base+"/ui/signin", io.MultiReader(strings.NewReader("token="), strings.NewReader(strings.Repeat("a", maxForm))))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := person.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if req.ContentLength != 0 || res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a chunked form over the limit (length %d) = %d; want 413", req.ContentLength, res.StatusCode)
	}
}

// sharedPostgres opens two stores over one new schema of the test
// database (TOOLSVC_TEST_POSTGRES_URL), as two replicas; it skips without
// the database.
func sharedPostgres(t *testing.T) (registry.Store, registry.Store) {
	t.Helper()
	u := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	if u == "" {
		t.Skip("TOOLSVC_TEST_POSTGRES_URL is not set; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the replica test")
	}
	schema := storetest.PostgresSchema(t, u)
	var stores [2]registry.Store
	for i := range stores {
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		st, err := postgres.Open(ctx, postgres.Options{URL: u, Schema: schema})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() }) // before the schema is dropped
		stores[i] = st
	}
	return stores[0], stores[1]
}
