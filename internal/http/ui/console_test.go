package ui

import (
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type noExecutor struct{ Executor }

func (noExecutor) Store() registry.Store { return nil }

func TestSessionCookieIsSecureOnTLS(t *testing.T) {
	c, err := New(Options{Executor: noExecutor{}, Authenticate: func(string) (*registry.Caller, bool) { return nil, false }})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	c.Routes(r)
	for url, secure := range map[string]bool{"https://toolsvc.example/ui/signin": true, "http://127.0.0.1/ui/signin": false} {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, url, nil))
		ck := w.Header().Get("Set-Cookie")
		if !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Strict") || strings.Contains(ck, "Secure") != secure {
			t.Errorf("%s: Set-Cookie = %q; want HttpOnly, SameSite=Strict, Secure %v", url, ck, secure)
		}
	}
}

func TestSealedSessionsCannotBeForgedOrOutlive(t *testing.T) {
	s, err := newSealer(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v := session{Nonce: "n", Token: "secret-token", Expires: now.Add(time.Hour).Unix()}
	sealed := s.seal(v)
	if strings.Contains(sealed, "secret-token") {
		t.Error("the token is readable in the cookie")
	}
	if got, ok := s.open(sealed, now); !ok || got != v {
		t.Errorf("open = %+v, %v", got, ok)
	}
	if _, ok := s.open(sealed, now.Add(2*time.Hour)); ok {
		t.Error("an expired session opened")
	}
	flipped := []byte(sealed)
	flipped[len(flipped)/2] ^= 1
	if _, ok := s.open(string(flipped), now); ok {
		t.Error("a changed cookie opened")
	}
	other, _ := newSealer(nil)
	if _, ok := other.open(sealed, now); ok {
		t.Error("a cookie sealed under another key opened")
	}
	if s.csrf(v) == s.csrf(session{Nonce: "m"}) {
		t.Error("two sessions share a CSRF token")
	}
}

func TestFoldKeepsRunesWhole(t *testing.T) {
	s := strings.Repeat("€", 1000)
	f := fold(s)
	if f.Head+f.Rest != s || !strings.HasPrefix(f.Rest, "€") || len(f.Head) > foldAt {
		t.Errorf("fold cut a rune: head %d bytes, rest %d bytes", len(f.Head), len(f.Rest))
	}
	if g := fold(strings.Repeat("x", maxShown+foldAt+10)); g.Omitted != 10 {
		t.Errorf("omitted = %d; want 10", g.Omitted)
	}
}

// A toolCallId is the caller's own string; the links to its page must
// lead to that call, whatever the id holds.
func TestCallLinksKeepTheCallersID(t *testing.T) {
	c, err := New(Options{Executor: noExecutor{}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	r := chi.NewRouter()
	r.Get("/ui/calls/{toolCallId}", func(w http.ResponseWriter, r *http.Request) {
		got = append(got, PathParam(r, "toolCallId")+" of "+r.URL.Query().Get("caller"))
	})
	href := regexp.MustCompile(`href="(/ui/calls/[^"]*)"`)
	for _, id := range []string{"x?caller=oncall#", "a/b", "a%2Fb", `a"b<c>`, "a b\t"} {
		a := &registry.Approval{ID: "apr_1", CallerID: "agent&x", ToolCallID: id, ToolName: "t", Status: registry.ApprovalPending, Arguments: []byte(`{}`)}
		pages := map[string]any{
			"approval": &approvalPage{A: a},
			"calls":    &callsPage{Calls: []*registry.AuditEntry{{CallerID: a.CallerID, ToolCallID: id, ToolName: "t"}}},
		}
		for page, data := range pages {
			w := httptest.NewRecorder()
			c.render(w, httptest.NewRequest(http.MethodGet, "/ui", nil), http.StatusOK, page, &view{Caller: &registry.Caller{ID: "oncall"}, Data: data})
			m := href.FindStringSubmatch(w.Body.String())
			if m == nil {
				t.Fatalf("%s: no link to the call in\n%s", page, w.Body)
			}
			// As a browser follows it: entities decoded, resolved against the page.
			u, err := url.Parse("http://127.0.0.1/ui/x")
			if err != nil {
				t.Fatal(err)
			}
			link, err := u.Parse(html.UnescapeString(m[1]))
			if err != nil {
				t.Fatalf("%s: %q: %v", page, m[1], err)
			}
			got = nil
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, link.String(), nil))
			if want := id + " of " + a.CallerID; len(got) != 1 || got[0] != want {
				t.Errorf("%s: the link %s leads to %q; want %q", page, m[1], got, want)
			}
		}
	}
}
