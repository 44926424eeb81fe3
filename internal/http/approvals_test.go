package http

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// TestApprovedRunWhoseRecordIsHeld: the answer to an approval whose run's
// result the store did not take carries Toolsvc-Record: pending, as the
// answer to the call itself would.
func TestApprovedRunWhoseRecordIsHeld(t *testing.T) {
	st := openStore(t)
	fs := &storetest.FinishFails{Store: st}
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = fs })
	approvalID := e.askApproval("held_p")
	fs.Down.Store(true)
	r := e.do("POST", "/approvals/"+approvalID, []byte(`{"decision":"approve"}`), jsonCT, true)
	var out registry.Result
	r.json(t, &out)
	if r.status != 200 || out.Status != registry.StatusOK || !out.RecordPending || r.header.Get(RecordHeader) != "pending" {
		t.Errorf("approve while the result cannot be recorded: %d %s, %s %q", r.status, r.body, RecordHeader, r.header.Get(RecordHeader))
	}
}

// A decision that cannot be read says what is wrong in JSON's words.
func TestDecisionProblems(t *testing.T) {
	st := openStore(t)
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	approvalID := e.askApproval("dec_p")
	for body, want := range map[string]string{
		`[]`:                                "a decision must be a JSON object",
		`"approve"`:                         "a decision must be a JSON object",
		`{"decision":1}`:                    "decision must be a string, not number",
		`{"decision":"approve","why":"ok"}`: `it has a member "why"`,
		`{"decision":"maybe"}`:              `decision must be "approve" or "deny"`,
		`{"decision":"deny","reason":"no\u0000pe"}`:                                        "the reason holds a NUL character",
		`{"decision":"deny","reason":"` + strings.Repeat("é", registry.MaxReason+1) + `"}`: "the reason is longer than 1000 characters",
	} {
		r := e.do("POST", "/approvals/"+approvalID, []byte(body), jsonCT, false)
		var p Problem
		r.json(t, &p)
		if r.status != 400 || p.Code != "invalid_decision" || !strings.Contains(p.Detail, want) || strings.Contains(p.Detail, "Go ") {
			t.Errorf("%s: %d %s, want %q", body, r.status, r.body, want)
		}
	}
}

// filingFails is a real store whose approval requests, and the
// withdrawal of their records, fail while down is set.
type filingFails struct {
	registry.Store
	down atomic.Bool
}

func (f *filingFails) CreateApproval(ctx context.Context, a *registry.Approval) error {
	if f.down.Load() {
		return errors.New("store down")
	}
	return f.Store.CreateApproval(ctx, a)
}

func (f *filingFails) WithdrawCall(ctx context.Context, c, id, approvalID string) (bool, error) {
	if f.down.Load() {
		return false, errors.New("store down")
	}
	return f.Store.WithdrawCall(ctx, c, id, approvalID)
}

// TestGetCallWithUnfiledApproval: GET /calls/{id} of a call whose approval
// request was never filed does not hand out a ticket to a request that
// does not exist; sending the call again files it.
func TestGetCallWithUnfiledApproval(t *testing.T) {
	st := openStore(t)
	ff := &filingFails{Store: st}
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = ff })
	body := `{"toolName":"test__priv","toolCallId":"unfiled","arguments":{"n":1}}`
	ff.down.Store(true)
	if r, _ := e.call("/calls", body); r.status != 503 {
		t.Fatalf("filing while the store fails: %d %s", r.status, r.body)
	}
	ff.down.Store(false)
	r := e.do("GET", "/calls/unfiled", nil, nil, true)
	var p Problem
	r.json(t, &p)
	if r.status != 503 || !strings.Contains(p.Detail, "was not filed") {
		t.Errorf("GET of a call whose request was not filed: %d %s", r.status, r.body)
	}
	r, res := e.call("/calls", body)
	if r.status != 202 || res.Approval == nil {
		t.Fatalf("sent again: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/calls/unfiled", nil, nil, true); r.status != 202 {
		t.Errorf("GET once filed: %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/approvals/"+res.Approval.ID, nil, nil, true); r.status != 200 {
		t.Errorf("the ticket's request: %d %s", r.status, r.body)
	}
}

// TestConsoleDecisionIsACall: approving from the console runs the call,
// so it is admitted as the API's decisions are: refused while the service
// drains (nothing runs), and counted among the calls shutdown waits for.
func TestConsoleDecisionIsACall(t *testing.T) {
	st := openStore(t)
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	approvalID := e.askApproval("ui_p")
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page, err := client.Get(e.ts.URL + "/ui/approvals/" + approvalID)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token on the request's page (%d):\n%s", page.StatusCode, body)
	}
	e.srv.Drain()
	req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/ui/approvals/"+approvalID,
		strings.NewReader(url.Values{"csrf": {string(m[1])}, "decision": {"approve"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("approving from the console while draining: %d, want 503", resp.StatusCode)
	}
	if a, err := st.GetApproval(t.Context(), approvalID); err != nil || a.Status != registry.ApprovalPending {
		t.Errorf("the request after a refused decision: %+v, %v; want it pending", a, err)
	}
}

// GET /approvals lists a page at a time: each page's next continues it,
// in either order, so that every request can be reached however many are
// kept. Before, a listing stopped at the oldest 1,000, and requests filed
// after those never showed.
func TestListApprovalsPages(t *testing.T) {
	st := openStore(t)
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	var filed []string
	for i := range 5 {
		filed = append(filed, e.askApproval(fmt.Sprintf("page_%d", i)))
	}
	walk := func(query string) (ids []string, pages int) {
		t.Helper()
		after := ""
		for pages = 1; pages < 10; pages++ {
			r := e.do("GET", "/approvals?status=all&limit=2"+query+after, nil, nil, true)
			var page struct {
				Approvals []registry.Approval `json:"approvals"`
				Next      string              `json:"next"`
			}
			if r.status != 200 {
				t.Fatalf("page %d: %d %s", pages, r.status, r.body)
			}
			r.json(t, &page)
			for _, a := range page.Approvals {
				ids = append(ids, a.ID)
			}
			if page.Next == "" {
				return ids, pages
			}
			after = "&after=" + page.Next
		}
		t.Fatalf("more than 10 pages: %v", ids)
		return nil, 0
	}
	if ids, pages := walk(""); fmt.Sprint(ids) != fmt.Sprint(filed) || pages != 3 {
		t.Errorf("oldest first: %v in %d pages, want %v in 3", ids, pages, filed)
	}
	reversed := slices.Clone(filed)
	slices.Reverse(reversed)
	if ids, _ := walk("&order=newest"); fmt.Sprint(ids) != fmt.Sprint(reversed) {
		t.Errorf("newest first: %v, want %v", ids, reversed)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "order=sideways", "after=not-a-cursor", "after=" + base64.RawURLEncoding.EncodeToString([]byte("12."))} {
		r := e.do("GET", "/approvals?"+q, nil, nil, false)
		if r.status != 400 || !bytes.Contains(r.body, []byte("invalid_parameter")) {
			t.Errorf("?%s: %d %s, want 400 invalid_parameter", q, r.status, r.body)
		}
	}
}

// The console's "Recently decided" shows the newest decisions however many
// older ones are kept. It used to pick them from the oldest 1,000 requests,
// so once more were kept a new decision never showed.
func TestConsoleShowsNewestDecisions(t *testing.T) {
	st := openStore(t)
	old := time.Now().Add(-2 * time.Hour)
	for i := range 1001 {
		id := fmt.Sprintf("apr_old_%04d", i)
		created := old.Add(time.Duration(i) * time.Millisecond)
		fileApproval(t, st, id, created)
		if _, won, err := st.DecideApproval(t.Context(), id, registry.VerdictDeny, "someone", "old", created); !won || err != nil {
			t.Fatalf("deciding %s: %v", id, err)
		}
	}
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	id := e.askApproval("newest")
	if r := e.do("POST", "/approvals/"+id, []byte(`{"decision":"deny","reason":"the newest"}`), jsonCT, true); r.status != 200 {
		t.Fatalf("deny: %d %s", r.status, r.body)
	}
	status, body := e.page("/ui")
	_, decided, _ := strings.Cut(body, "Recently decided")
	if status != 200 || !strings.Contains(decided, "/ui/approvals/"+id) {
		t.Fatalf("the newest decision %s is not among the recently decided (%d):\n%.2000s", id, status, decided)
	}
}

// The console's Calls page shows the newest calls however busy the week
// was. It read the audit trail of the last 7 days from its oldest entry,
// at most 10,000 entries, so past that many a new call never showed.
func TestConsoleCallsShowsNewestCalls(t *testing.T) {
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{SyncNormal: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// 10,001 entries of the past days, written side by side so that they
	// share commits.
	start := time.Now().Add(-3 * 24 * time.Hour)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < 10001; i += 8 {
				if err := st.AppendAudit(t.Context(), &registry.AuditEntry{Time: start.Add(time.Duration(i) * time.Second), CallerID: "anonymous",
					ToolCallID: fmt.Sprintf("old_%05d", i), ToolName: "text__transform", Tier: registry.ReadOnly, Status: registry.StatusOK}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	if r, res := e.call("/calls", `{"toolName":"text__transform","toolCallId":"the_newest","arguments":{"operation":"upper","text":"a"},"record":true}`); r.status != 200 || res.Status != registry.StatusOK {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	status, body := e.page("/ui/calls")
	if status != 200 || !strings.Contains(body, "/ui/calls/the_newest") {
		t.Fatalf("the newest call is not on the calls page (%d):\n%.3000s", status, body)
	}
}

// fileApproval files, straight into st, a pending request id of
// test__priv by the anonymous caller, created at created, with its call.
func fileApproval(t *testing.T, st registry.Store, id string, created time.Time) {
	t.Helper()
	call := "call_" + id
	if _, _, err := st.BeginCall(t.Context(), &registry.CallRecord{CallerID: "anonymous", ToolCallID: call, ToolName: "test__priv", ArgumentsDigest: "d",
		State: registry.CallPendingApproval, Result: &registry.Result{ToolCallID: call, ToolName: "test__priv", Status: registry.StatusPendingApproval},
		ApprovalID: id, ExpiresAt: created.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateApproval(t.Context(), &registry.Approval{ID: id, CallerID: "anonymous", ToolCallID: call, ToolName: "test__priv", ArgumentsDigest: "d",
		Arguments: json.RawMessage(`{}`), Status: registry.ApprovalPending, CreatedAt: created, ExpiresAt: created.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// The inbox shows the newest pending requests, at most 100, and counts
// them all: it showed up to 1,000, each with up to 16 KiB of arguments,
// on every refresh, and counted only those it showed.
func TestInboxShowsAPageOfPendingAndCountsThemAll(t *testing.T) {
	st := openStore(t)
	start := time.Now().Add(-time.Minute)
	for i := range 105 {
		fileApproval(t, st, fmt.Sprintf("apr_p_%03d", i), start.Add(time.Duration(i)*time.Millisecond))
	}
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = st })
	status, body := e.page("/ui")
	if status != 200 || !strings.Contains(body, `id="pending-count">105<`) || !strings.Contains(body, "The newest 100 are shown") {
		t.Errorf("count and note (%d): %.1500s", status, body)
	}
	if n := strings.Count(body, `data-approval="apr_p_`); n != 100 {
		t.Errorf("%d pending requests shown, want 100", n)
	}
	if !strings.Contains(body, `data-approval="apr_p_104"`) || strings.Contains(body, `data-approval="apr_p_004"`) {
		t.Error("not the newest 100 shown")
	}
}

// page GETs path of the console (the service runs open, so no session is
// needed) and returns the status and the page.
func (e *env) page(path string) (int, string) {
	e.t.Helper()
	resp, err := http.Get(e.ts.URL + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
