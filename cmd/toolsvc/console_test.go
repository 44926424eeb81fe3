package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolsvc/toolsvc/internal/notify"
	"github.com/toolsvc/toolsvc/internal/registry"
)

const hookSecret = "console-test-hook-secret"

// hook is a webhook receiver that verifies every delivery's signature.
type hook struct {
	mu     sync.Mutex
	events []notify.Message
	bad    []string
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := notify.Verify([]byte(hookSecret), r.Header.Get(notify.SignatureHeader), body, time.Now(), 5*time.Minute); err != nil {
		h.bad = append(h.bad, err.Error())
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var m notify.Message
	_ = json.Unmarshal(body, &m)
	h.events = append(h.events, m)
}

// waitFor waits until the receiver holds event for approval id.
func (h *hook) waitFor(t *testing.T, event, id string) notify.Message {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		h.mu.Lock()
		for _, m := range h.events {
			if m.Event == event && m.Approval != nil && m.Approval.ID == id {
				h.mu.Unlock()
				return m
			}
		}
		bad := h.bad
		h.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("deliveries with bad signatures: %v", bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s notification for %s arrived", event, id)
	return notify.Message{}
}

// startConsole starts toolsvc with the console example's callers and
// policy, and a signed webhook notifier pointing at a receiver.
func startConsole(t *testing.T, extra ...string) (*instance, *hook) {
	t.Helper()
	h := &hook{}
	recv := httptest.NewServer(h)
	t.Cleanup(recv.Close)
	dir := t.TempDir()
	for _, f := range []string{"callers.yaml", "policy.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "console", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	notifier := `apiVersion: toolsvc/v1
kind: Notifier
metadata:
  name: oncall-hook
spec:
  type: webhook
  urlFrom: {env: HOOK_URL}
  secretFrom: {env: HOOK_SECRET}
  events: [requested, decided, expired]
`
	if err := os.WriteFile(filepath.Join(dir, "notifier.yaml"), []byte(notifier), 0o600); err != nil {
		t.Fatal(err)
	}
	in := start(t, append([]string{"TOOLSVC_CONFIG=" + dir, "HOOK_URL=" + recv.URL, "HOOK_SECRET=" + hookSecret, "TOOLSVC_LOG_LEVEL=warn"}, extra...)...)
	return in, h
}

// apiCall posts a call with token and returns the status and result.
func apiCall(t *testing.T, base, token, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/calls", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func approvalID(t *testing.T, res map[string]any) string {
	t.Helper()
	a, _ := res["approval"].(map[string]any)
	id, _ := a["id"].(string)
	if id == "" {
		t.Fatalf("no approval ticket in %v", res)
	}
	return id
}

// browser is a person's session in the console, without a browser: a
// cookie jar and the page's CSRF token.
type browser struct {
	t      *testing.T
	base   string
	client *http.Client
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

var traceRow = regexp.MustCompile(`<dt>trace id</dt><dd><code>([0-9a-f]{32})</code></dd>`)

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, client: &http.Client{Jar: jar, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (b *browser) get(path string) (int, string, http.Header) {
	b.t.Helper()
	resp, err := b.client.Get(b.base + path)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func (b *browser) post(path string, form url.Values, header map[string]string) (int, string, http.Header) {
	b.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.client.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}

func (b *browser) csrf(page string) string {
	b.t.Helper()
	_, body, _ := b.get(page)
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		b.t.Fatalf("no CSRF token on %s:\n%s", page, body)
	}
	return m[1]
}

func (b *browser) signIn(token string) {
	b.t.Helper()
	status, _, h := b.post("/ui/signin", url.Values{"csrf": {b.csrf("/ui/signin")}, "token": {token}, "next": {"/ui"}}, nil)
	if status != http.StatusSeeOther || h.Get("Location") != "/ui" {
		b.t.Fatalf("sign-in = %d to %q", status, h.Get("Location"))
	}
}

func TestConsoleSignInAndCookies(t *testing.T) {
	in, _ := startConsole(t, "TOOLSVC_PUBLIC_URL=https://toolsvc.example.com")
	b := newBrowser(t, in.base)
	if status, _, h := b.get("/ui"); status != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/signin") {
		t.Fatalf("GET /ui without a session = %d to %q; want a redirect to sign in", status, h.Get("Location"))
	}
	csrf := b.csrf("/ui/signin")
	status, body, _ := b.post("/ui/signin", url.Values{"csrf": {csrf}, "token": {"wrong-token"}}, nil)
	if status != http.StatusUnauthorized || !strings.Contains(body, "not valid") {
		t.Errorf("sign-in with a wrong token = %d", status)
	}
	status, _, h := b.post("/ui/signin", url.Values{"csrf": {csrf}, "token": {"oncall-token"}, "next": {"//evil.example/x"}}, nil)
	if status != http.StatusSeeOther || h.Get("Location") != "/ui" {
		t.Errorf("sign-in with an off-site next = %d to %q; want /ui", status, h.Get("Location"))
	}
	var cookie string
	for _, c := range h.Values("Set-Cookie") {
		if strings.HasPrefix(c, "toolsvc_console=") {
			cookie = c
		}
	}
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Secure", "Path=/ui"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("session cookie %q lacks %s", cookie, want)
		}
	}
	if strings.Contains(cookie, "oncall-token") {
		t.Error("the session cookie holds the token in the clear")
	}
	status, body, h = b.get("/ui")
	if status != 200 || !strings.Contains(body, `<span id="who">oncall</span>`) {
		t.Fatalf("GET /ui after sign-in = %d:\n%s", status, body)
	}
	for k, want := range map[string]string{"Content-Security-Policy": "default-src 'none'; script-src 'self'", "X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
		if !strings.Contains(h.Get(k), want) {
			t.Errorf("%s = %q; want %q", k, h.Get(k), want)
		}
	}
	// Signing out ends the session.
	if status, _, _ := b.post("/ui/signout", url.Values{"csrf": {b.csrf("/ui")}}, nil); status != http.StatusSeeOther {
		t.Errorf("sign-out = %d", status)
	}
	if status, _, _ := b.get("/ui"); status != http.StatusSeeOther {
		t.Errorf("GET /ui after sign-out = %d; want a redirect to sign in", status)
	}
}

func TestConsoleRendersHostileArgumentsAsText(t *testing.T) {
	in, _ := startConsole(t)
	long := strings.Repeat("A", 100000)
	body := `{"toolCallId":"hostile","toolName":"text__transform","arguments":{"operation":"upper","text":"</pre><script>alert(1)</script><img src=x onerror=alert(2)> \u003cscript\u003ealert(3) \ud83d\ude00 ` + long + `"}}`
	status, res := apiCall(t, in.base, "agent-token", body)
	if status != http.StatusAccepted {
		t.Fatalf("call = %d %v", status, res)
	}
	b := newBrowser(t, in.base)
	b.signIn("oncall-token")
	// The inbox lists the request without its arguments, too long for a
	// list; the request's own page has them.
	if status, html, _ := b.get("/ui"); status != 200 || !strings.Contains(html, "bytes of arguments, too many for a list") || strings.Contains(html, "<script>alert") {
		t.Errorf("/ui = %d, want the request listed without its arguments:\n%.3000s", status, html)
	}
	for _, page := range []string{"/ui/approvals/" + approvalID(t, res), "/ui/calls/hostile?caller=agent"} {
		status, html, _ := b.get(page)
		if status != 200 {
			t.Fatalf("%s = %d", page, status)
		}
		for _, raw := range []string{"<script>alert", "<img src=x", "</pre><script>"} {
			if strings.Contains(html, raw) {
				t.Errorf("%s carries %q unescaped", page, raw)
			}
		}
		if !strings.Contains(html, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("%s does not show the script tag as text", page)
		}
		if !strings.Contains(html, `\u003cscript\u003ealert(3) \ud83d\ude00`) {
			t.Errorf("%s does not show the escapes as written", page)
		}
		if !strings.Contains(html, "<details><summary>show ") || strings.Count(html, "AAAA") == 0 {
			t.Errorf("%s does not fold the long value", page)
		}
		if strings.Count(html, "<script") != 1 {
			t.Errorf("%s has %d script elements; want only the console's own", page, strings.Count(html, "<script"))
		}
	}
}

func TestConsoleRefusesCrossSiteAndUnscopedPosts(t *testing.T) {
	in, _ := startConsole(t)
	_, res := apiCall(t, in.base, "agent-token", `{"toolCallId":"guarded","toolName":"text__transform","arguments":{"operation":"upper","text":"hi"}}`)
	id := approvalID(t, res)

	oncall := newBrowser(t, in.base)
	oncall.signIn("oncall-token")
	csrf := oncall.csrf("/ui")
	for name, tc := range map[string]struct {
		form   url.Values
		header map[string]string
	}{
		"cross-site fetch metadata": {url.Values{"csrf": {csrf}, "decision": {"approve"}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"foreign origin":            {url.Values{"csrf": {csrf}, "decision": {"approve"}}, map[string]string{"Origin": "https://evil.example"}},
		"no csrf token":             {url.Values{"decision": {"approve"}}, nil},
		"wrong csrf token":          {url.Values{"csrf": {strings.Repeat("0", 64)}, "decision": {"approve"}}, nil},
	} {
		if status, _, _ := oncall.post("/ui/approvals/"+id, tc.form, tc.header); status != http.StatusForbidden {
			t.Errorf("%s: post = %d; want 403", name, status)
		}
	}

	// The agent may sign in but lacks approve: no buttons, 403 on a forged post.
	agent := newBrowser(t, in.base)
	agent.signIn("agent-token")
	_, page, _ := agent.get("/ui")
	if !strings.Contains(page, "guarded") || strings.Contains(page, `value="approve"`) || strings.Contains(page, "<button type=\"submit\" name=\"decision\"") {
		t.Errorf("a caller without approve sees decision buttons or not its request:\n%s", page)
	}
	if status, _, _ := agent.post("/ui/approvals/"+id, url.Values{"csrf": {agent.csrf("/ui")}, "decision": {"approve"}}, nil); status != http.StatusForbidden {
		t.Errorf("forged approve by a caller without approve = %d; want 403", status)
	}
	// Nobody's post decided it.
	_, page, _ = oncall.get("/ui/approvals/" + id)
	if !strings.Contains(page, `value="approve"`) {
		t.Errorf("the request is no longer pending after refused posts:\n%s", page)
	}
	// The same-origin post with the token works.
	status, _, h := oncall.post("/ui/approvals/"+id, url.Values{"csrf": {csrf}, "decision": {"approve"}}, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": in.base})
	if status != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/ui/calls/guarded") {
		t.Fatalf("approve = %d to %q", status, h.Get("Location"))
	}
	_, page, _ = oncall.get(h.Get("Location"))
	if !strings.Contains(page, "HI") {
		t.Errorf("the call page does not show the result:\n%s", page)
	}
}

// chromium finds Debian's headless browser, or skips.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed (apt-get install -y chromium); the browser tests need it")
	return ""
}

// newChrome starts headless Chromium for one test.
func newChrome(t *testing.T) context.Context {
	t.Helper()
	path := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// screenshot saves the page as docs/<name> when TOOLSVC_SCREENSHOTS names
// a directory (make docs-screenshots: TOOLSVC_SCREENSHOTS=../../docs).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("TOOLSVC_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signInWithChrome opens the console, is sent to sign in, and signs in.
func signInWithChrome(t *testing.T, ctx context.Context, base, token string) {
	t.Helper()
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/ui"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin")),
		chromedp.WaitVisible(chromedp.ID("inbox")),
	)
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	who, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("who")))
	if err != nil {
		t.Fatalf("signing in: %v", err)
	}
	if who != "oncall" {
		t.Fatalf("signed in as %q; want oncall", who)
	}
}

// fileWhileWatching marks the page, files a call through the API, and
// waits until the request shows in the inbox with the page never reloaded.
func fileWhileWatching(t *testing.T, ctx context.Context, base, toolCallID, text string) string {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded = true`)); err != nil {
		t.Fatal(err)
	}
	got := make(chan map[string]any, 1)
	go func() {
		_, res := apiCall(t, base, "agent-token", `{"toolCallId":"`+toolCallID+`","toolName":"text__transform","arguments":{"operation":"upper","text":"`+text+`"}}`)
		got <- res
	}()
	res := <-got
	id := approvalID(t, res)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#req-`+id+` button.approve`))); err != nil {
		t.Fatalf("the request did not appear: %v", err)
	}
	still, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`window.notReloaded === true`))
	if err != nil {
		t.Fatal(err)
	}
	if !still {
		t.Fatal("the page reloaded to show the request; it should appear in place")
	}
	return id
}

func TestBrowserApprove(t *testing.T) {
	ctx := newChrome(t)
	in, h := startConsole(t)
	signInWithChrome(t, ctx, in.base, "oncall-token")
	// An earlier decision, so the inbox shows both lists.
	_, res := apiCall(t, in.base, "agent-token", `{"toolCallId":"earlier","toolName":"text__transform","arguments":{"operation":"lower","text":"NOT NOW"}}`)
	b := newBrowser(t, in.base)
	b.signIn("oncall-token")
	b.post("/ui/approvals/"+approvalID(t, res), url.Values{"csrf": {b.csrf("/ui")}, "decision": {"deny"}, "reason": {"duplicate of another request"}}, nil)

	id := fileWhileWatching(t, ctx, in.base, "greet-1", "hello from the agent")
	h.waitFor(t, "approval.requested", id)
	screenshot(t, ctx, "console-inbox.png")

	err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#req-`+id+` input[name=reason]`), "looks fine"),
		chromedp.Click(chromedp.CSS(`#req-`+id+` button.approve`)),
		chromedp.WaitVisible(chromedp.ID("result")),
	)
	if err != nil {
		t.Fatalf("approving: %v", err)
	}
	result, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("result")))
	if err != nil {
		t.Fatalf("approving: %v", err)
	}
	if !strings.Contains(result, `"status": "ok"`) || !strings.Contains(result, "HELLO FROM THE AGENT") {
		t.Errorf("call page result = %s", result)
	}
	screenshot(t, ctx, "console-call.png")
	m := h.waitFor(t, "approval.decided", id)
	if m.Approval.Status != "approved" || m.Approval.DecidedBy != "oncall" || m.Approval.DecisionReason != "looks fine" || !strings.HasSuffix(m.URL, "/ui/approvals/"+id) {
		t.Errorf("decided notification = %+v", m)
	}
	// The API agrees.
	req, _ := http.NewRequest(http.MethodGet, in.base+"/calls/greet-1", nil)
	req.Header.Set("Authorization", "Bearer agent-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var final map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&final)
	if final["status"] != "ok" {
		t.Errorf("GET /calls/greet-1 = %v", final)
	}
}

func TestBrowserDeny(t *testing.T) {
	ctx := newChrome(t)
	in, h := startConsole(t)
	signInWithChrome(t, ctx, in.base, "oncall-token")
	id := fileWhileWatching(t, ctx, in.base, "greet-2", "rm everything")
	err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#req-`+id+` input[name=reason]`), "not during the freeze"),
		chromedp.Click(chromedp.CSS(`#req-`+id+` button.deny`)),
		chromedp.WaitVisible(chromedp.ID("result")),
	)
	if err != nil {
		t.Fatalf("denying: %v", err)
	}
	result, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("result")))
	if err != nil {
		t.Fatalf("denying: %v", err)
	}
	if !strings.Contains(result, "E_APPROVAL_DENIED") || !strings.Contains(result, "not during the freeze") {
		t.Errorf("call page result = %s", result)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(in.base+"/ui"), chromedp.WaitVisible(chromedp.ID("inbox"))); err != nil {
		t.Fatal(err)
	}
	inbox, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("inbox")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(inbox, "denied") || !strings.Contains(inbox, "not during the freeze") || strings.Contains(inbox, "rm everything") {
		t.Errorf("the inbox does not list the denial among the decided:\n%s", inbox)
	}
	m := h.waitFor(t, "approval.decided", id)
	if m.Approval.Status != "denied" {
		t.Errorf("decided notification = %+v", m)
	}
}

// TestConsoleShowsTraceID: a recorded call made with a traceparent shows
// that trace id on its page in the console; a call without one shows the
// trace the server started for it. Without credentials the console is
// open, as the API is.
func TestConsoleShowsTraceID(t *testing.T) {
	in := start(t, "TOOLSVC_LOG_LEVEL=warn")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for id, traceparent := range map[string]string{"traced": "00-" + traceID + "-00f067aa0ba902b7-01", "untraced": ""} {
		req, _ := http.NewRequest(http.MethodPost, in.base+"/calls",
			strings.NewReader(`{"toolCallId":"`+id+`","toolName":"text__transform","record":true,"arguments":{"operation":"upper","text":"hi"}}`))
		req.Header.Set("Content-Type", "application/json")
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("call %s = %d", id, resp.StatusCode)
		}
	}
	b := newBrowser(t, in.base)
	status, html, _ := b.get("/ui/calls/traced?caller=anonymous")
	if status != 200 || !strings.Contains(html, "<dt>trace id</dt><dd><code>"+traceID+"</code></dd>") {
		t.Errorf("call page = %d, without trace id %s:\n%s", status, traceID, html)
	}
	status, html, _ = b.get("/ui/calls/untraced?caller=anonymous")
	if m := traceRow.FindStringSubmatch(html); status != 200 || m == nil || m[1] == traceID {
		t.Errorf("page of a call without a traceparent = %d, trace id %v; want one of its own:\n%s", status, m, html)
	}
}

// TestDoneCallDropsLongArguments: a finished call keeps arguments of at
// most registry.KeptArgumentsBytes. A large fs__write's content is not
// kept in its record (the console says so, and shows the short call's
// arguments), and a repeat of it is still answered from the record.
func TestDoneCallDropsLongArguments(t *testing.T) {
	in := start(t, "TOOLSVC_LOG_LEVEL=warn")
	big := strings.Repeat("x", registry.KeptArgumentsBytes)
	bodies := map[string]string{
		"long":  `{"toolCallId":"long","toolName":"fs__write","arguments":{"path":"long.txt","content":"` + big + `"}}`,
		"short": `{"toolCallId":"short","toolName":"fs__write","arguments":{"path":"short.txt","content":"kept here"}}`,
	}
	for id, body := range bodies {
		for range 2 { // the second is a repeat, answered from the record
			if status, res := apiCall(t, in.base, "", body); status != http.StatusOK || res["status"] != "ok" {
				t.Fatalf("call %s = %d %v", id, status, res)
			}
		}
	}
	b := newBrowser(t, in.base)
	status, html, _ := b.get("/ui/calls/long?caller=anonymous")
	if status != 200 || !strings.Contains(html, "Not kept: a finished call keeps arguments of at most 65536 bytes") || strings.Contains(html, big[:1000]) {
		t.Errorf("page of the long call = %d, want the arguments said not kept:\n%.2000s", status, html)
	}
	if status, html, _ = b.get("/ui/calls/short?caller=anonymous"); status != 200 || !strings.Contains(html, "kept here") {
		t.Errorf("page of the short call = %d, want its arguments:\n%.2000s", status, html)
	}
	_, res := apiCall(t, in.base, "", `{"toolName":"fs__stat","arguments":{"path":"long.txt"}}`)
	if out, _ := res["output"].(map[string]any); out["size"] != float64(len(big)) {
		t.Errorf("fs__stat of long.txt = %v, want %d bytes", res, len(big))
	}
}
