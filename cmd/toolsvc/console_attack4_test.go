package main

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestConsoleEchoesAreBounded: what a request sends comes back from the
// console at a bounded length. A 300 kB path or next= was sent back
// escaped, in a Location header and a redirect body, a form field or an
// error page: up to five times its size, to anyone, signed in or not.
func TestConsoleEchoesAreBounded(t *testing.T) {
	// Headers up to 1 MiB: the echoes are under test, not the header limit.
	in, _ := startConsole(t, "TOOLSVC_MAX_HEADER_BYTES=1MiB")
	const n = 300 << 10
	const bound = 16 << 10
	amps := strings.Repeat("&", n)
	quotes := strings.Repeat("'", n)
	check := func(what string, status int, body string, h http.Header) {
		t.Helper()
		size := len(body)
		for k, vs := range h {
			for _, v := range vs {
				size += len(k) + len(v)
			}
		}
		if size > bound {
			t.Errorf("%s: %d answered with %d bytes for a %d-byte request", what, status, size, n)
		}
	}

	anon := newBrowser(t, in.base)
	status, body, h := anon.get("/ui/calls/" + amps)
	check("redirect to sign in", status, body, h)
	if status != http.StatusSeeOther || h.Get("Location") != "/ui/signin" {
		t.Errorf("redirect to sign in: %d to %.80q; want /ui/signin without next", status, h.Get("Location"))
	}
	status, body, h = anon.get("/ui/signin?next=" + url.QueryEscape("/ui/calls/"+quotes))
	check("sign-in page", status, body, h)
	if !strings.Contains(body, `name="next" value="/ui"`) {
		t.Errorf("sign-in page keeps a %d-byte next: %.300s", n, body)
	}

	b := newBrowser(t, in.base)
	b.signIn("oncall-token")
	status, body, h = b.get("/ui/calls/" + amps + "?caller=" + url.QueryEscape(quotes[:n/4]))
	check("no such call", status, body, h)
	if status != http.StatusNotFound || !strings.Contains(body, "No call &amp;&amp;") {
		t.Errorf("no such call: %d", status)
	}
	status, body, h = b.get("/ui/approvals/" + amps)
	check("no such approval request", status, body, h)
	if status != http.StatusNotFound || !strings.Contains(body, "There is no approval request &amp;&amp;") {
		t.Errorf("no such approval request: %d", status)
	}
	// A next with a control character (a tab a browser drops) is not
	// followed either.
	csrf := b.csrf("/ui/signin")
	status, _, h = b.post("/ui/signin", url.Values{"csrf": {csrf}, "token": {"oncall-token"}, "next": {"/ui/../\t/evil.example"}}, nil)
	if status != http.StatusSeeOther || h.Get("Location") != "/ui" {
		t.Errorf("sign-in with a tab in next = %d to %q; want /ui", status, h.Get("Location"))
	}
}
