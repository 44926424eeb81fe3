package ui

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// inbox is the data of the inbox page and fragment.
type inbox struct {
	// Pending are the newest pending requests, at most pendingShown of
	// PendingCount.
	Pending      []*registry.Approval
	PendingCount int
	Decided      []*registry.Approval
	// Version changes when a request arrives or is decided; the page's
	// script swaps the list in only then.
	Version string
}

const (
	// pendingShown bounds the requests the inbox shows: each may carry
	// 16 KiB of arguments, and the page is read again on every change.
	pendingShown = 100
	decidedShown = 20
)

// inboxFilter selects the requests r's caller sees in the inbox: every
// caller's for approvers and admins, otherwise their own.
func inboxFilter(r *http.Request) registry.ApprovalFilter {
	var f registry.ApprovalFilter
	if caller := callerOf(r); !seesAll(caller) {
		f.CallerID = caller.ID
	}
	return f
}

// inboxVersion reads what the inbox's version is made of, without its
// lists: the page's script asks every 2 seconds whether anything changed,
// and the lists are 160 requests, each with up to 16 KiB of arguments.
// It is the number of pending requests (which falls when one is decided
// or expires), and the newest and the oldest request (the newest changes
// when one arrives, whatever else happened meanwhile; the oldest when
// retention deletes it). Retention deletes the oldest requests first,
// give or take an approval's time to live: one deleted while an older
// one stays is seen at the next change, and only an inbox idle for the
// whole retention period shows it meanwhile.
func inboxVersion(r *http.Request, st registry.Store) (version string, pending int, err error) {
	f := inboxFilter(r)
	f.Status = registry.ApprovalPending
	if pending, err = st.CountApprovals(r.Context(), f); err != nil {
		return "", 0, err
	}
	f.Status, f.Limit = "", 1
	h := sha256.New()
	fmt.Fprintf(h, "%d pending\n", pending)
	for _, newest := range []bool{true, false} {
		f.Newest = newest
		ends, err := st.ListApprovals(r.Context(), f)
		if err != nil {
			return "", 0, err
		}
		for _, a := range ends {
			fmt.Fprintf(h, "%s %s\n", a.ID, a.Status)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8]), pending, nil
}

// loadInbox reads the inbox: its version first, so that a change made
// while the lists are read shows as a new version at the next poll.
func (c *Console) loadInbox(r *http.Request) (*inbox, error) {
	st := c.o.Executor.Store()
	if st == nil {
		return nil, registry.ErrNoStore
	}
	in := &inbox{}
	var err error
	if in.Version, in.PendingCount, err = inboxVersion(r, st); err != nil {
		return nil, err
	}
	f := inboxFilter(r)
	f.Status, f.Limit, f.Newest = registry.ApprovalPending, pendingShown, true
	if in.Pending, err = st.ListApprovals(r.Context(), f); err != nil {
		return nil, err
	}
	// The newest decisions of each kind, merged: decided requests are
	// kept for the retention period, and a listing of them all, oldest
	// first, never reached the new ones.
	for _, s := range []registry.ApprovalStatus{registry.ApprovalApproved, registry.ApprovalDenied, registry.ApprovalExpired} {
		f.Status, f.Limit = s, decidedShown
		list, err := st.ListApprovals(r.Context(), f)
		if err != nil {
			return nil, err
		}
		in.Decided = append(in.Decided, list...)
	}
	slices.SortFunc(in.Decided, func(a, b *registry.Approval) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	in.Decided = in.Decided[:min(len(in.Decided), decidedShown)]
	return in, nil
}

func (c *Console) handleInbox(w http.ResponseWriter, r *http.Request) {
	in, err := c.loadInbox(r)
	if err != nil {
		c.storeUnavailable(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "inbox", c.view(r, "Approvals", "inbox", in))
}

// handleInboxFragment serves the inbox's lists alone, for the page's
// script to refresh them; 204 when nothing changed since ?v=, known from
// the version alone.
func (c *Console) handleInboxFragment(w http.ResponseWriter, r *http.Request) {
	st := c.o.Executor.Store()
	if st == nil {
		c.storeUnavailable(w, r, registry.ErrNoStore)
		return
	}
	v, _, err := inboxVersion(r, st)
	if err != nil {
		c.storeUnavailable(w, r, err)
		return
	}
	if r.URL.Query().Get("v") == v {
		w.Header().Set("X-Inbox-Version", v)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	in, err := c.loadInbox(r)
	if err != nil {
		c.storeUnavailable(w, r, err)
		return
	}
	w.Header().Set("X-Inbox-Version", in.Version)
	c.renderTemplate(w, r, http.StatusOK, "inbox", "inbox-lists", c.view(r, "", "inbox", in))
}

// approvalPage is the data of one request's page.
type approvalPage struct {
	A *registry.Approval
}

func (c *Console) getApproval(w http.ResponseWriter, r *http.Request) (*registry.Approval, bool) {
	st := c.o.Executor.Store()
	if st == nil {
		c.storeUnavailable(w, r, registry.ErrNoStore)
		return nil, false
	}
	id := PathParam(r, "id")
	a, err := st.GetApproval(r.Context(), id)
	caller := callerOf(r)
	if errors.Is(err, registry.ErrNotFound) || (err == nil && !seesAll(caller) && a.CallerID != caller.ID) {
		c.fail(w, r, http.StatusNotFound, "There is no approval request "+id+" that you may see.")
		return nil, false
	}
	if err != nil {
		c.storeUnavailable(w, r, err)
		return nil, false
	}
	return a, true
}

func (c *Console) handleApproval(w http.ResponseWriter, r *http.Request) {
	a, ok := c.getApproval(w, r)
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "approval", c.view(r, "Approval request", "inbox", &approvalPage{A: a}))
}

// handleDecide approves or denies a request, then shows the call.
func (c *Console) handleDecide(w http.ResponseWriter, r *http.Request) {
	caller := callerOf(r)
	if !caller.Has(registry.ScopeApprove) {
		c.fail(w, r, http.StatusForbidden, "You may not decide approval requests: your credentials lack the approve scope.")
		return
	}
	v := registry.Verdict(r.PostForm.Get("decision"))
	if v != registry.VerdictApprove && v != registry.VerdictDeny {
		c.fail(w, r, http.StatusBadRequest, `The decision must be "approve" or "deny".`)
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if msg := registry.CheckReason(reason); msg != "" {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The reason must be text of at most %d characters, without NUL: %s.", registry.MaxReason, msg))
		return
	}
	id := PathParam(r, "id")
	a, _, err := c.o.Executor.Decide(r.Context(), caller, id, v, reason)
	if errors.Is(err, registry.ErrNotFound) || errors.Is(err, registry.ErrNoStore) {
		c.fail(w, r, http.StatusNotFound, "There is no approval request "+id+".")
		return
	}
	if err != nil {
		c.storeUnavailable(w, r, err)
		return
	}
	http.Redirect(w, r, callLink(a.CallerID, a.ToolCallID), http.StatusSeeOther)
}

// callLink is the console page of a call. The id is the caller's own
// string: escaped as a path segment, a "?", "#" or "/" in it cannot turn
// the link into one to another call.
func callLink(callerID, toolCallID string) string {
	return "/ui/calls/" + url.PathEscape(toolCallID) + "?caller=" + url.QueryEscape(callerID)
}

// callsPage is the data of the calls list.
type callsPage struct {
	Calls                 []*registry.AuditEntry
	Caller, Tool, Status  string
	SeesAll               bool
	Scanned, ScannedLimit int
}

const (
	auditPage  = 1000
	auditPages = 10
	callsShown = 200
)

// handleCalls lists recent recorded calls from the audit trail, newest
// first, one line per call as it last stood.
func (c *Console) handleCalls(w http.ResponseWriter, r *http.Request) {
	st := c.o.Executor.Store()
	if st == nil {
		c.storeUnavailable(w, r, registry.ErrNoStore)
		return
	}
	q := r.URL.Query()
	caller := callerOf(r)
	p := &callsPage{Caller: q.Get("caller"), Tool: q.Get("tool"), Status: q.Get("status"), SeesAll: seesAll(caller), ScannedLimit: auditPage * auditPages}
	// The newest first: read oldest first, a busy week's trail filled
	// the pages with its first days, and new calls never showed.
	f := registry.AuditFilter{CallerID: p.Caller, ToolName: p.Tool, Since: c.o.Now().Add(-7 * 24 * time.Hour), Limit: auditPage, Newest: true}
	if !p.SeesAll {
		f.CallerID = caller.ID
	}
	// An entry read first is its call's latest.
	latest := map[string]*registry.AuditEntry{}
	var order []string
	for range auditPages {
		list, err := st.ListAudit(r.Context(), f)
		if err != nil {
			c.storeUnavailable(w, r, err)
			return
		}
		p.Scanned += len(list)
		for _, e := range list {
			if e.Event != "call" || e.ToolCallID == "" {
				continue
			}
			k := e.CallerID + "\x00" + e.ToolCallID
			if _, ok := latest[k]; !ok {
				order = append(order, k)
				latest[k] = e
			}
		}
		if len(list) < auditPage {
			break
		}
		f.AfterID = list[len(list)-1].ID
	}
	for _, k := range order {
		if len(p.Calls) == callsShown {
			break
		}
		e := latest[k]
		if p.Status != "" && string(e.Status) != p.Status && string(e.Code) != p.Status {
			continue
		}
		p.Calls = append(p.Calls, e)
	}
	c.render(w, r, http.StatusOK, "calls", c.view(r, "Calls", "calls", p))
}

// callPage is the data of one call's page.
type callPage struct {
	Rec      *registry.CallRecord
	Approval *registry.Approval
	Result   string
}

func (c *Console) handleCall(w http.ResponseWriter, r *http.Request) {
	st := c.o.Executor.Store()
	if st == nil {
		c.storeUnavailable(w, r, registry.ErrNoStore)
		return
	}
	caller := callerOf(r)
	owner := r.URL.Query().Get("caller")
	if owner == "" || !seesAll(caller) {
		owner = caller.ID
	}
	id := PathParam(r, "toolCallId")
	rec, err := c.o.Executor.GetCall(r.Context(), owner, id)
	if errors.Is(err, registry.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, "No call "+id+" of "+owner+" is recorded.")
		return
	}
	if err != nil {
		c.storeUnavailable(w, r, err)
		return
	}
	p := &callPage{Rec: rec}
	if rec.ApprovalID != "" {
		if a, err := st.GetApproval(r.Context(), rec.ApprovalID); err == nil {
			p.Approval = a
		}
	}
	if rec.Result != nil {
		// As the API answers it: the template escapes it for HTML.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(rec.Result)
		p.Result = strings.TrimSuffix(b.String(), "\n")
	}
	c.render(w, r, http.StatusOK, "call", c.view(r, "Call "+id, "calls", p))
}

func (c *Console) handleCatalog(w http.ResponseWriter, r *http.Request) {
	tools := c.o.Executor.Registry().List(callerOf(r), registry.Filter{})
	c.render(w, r, http.StatusOK, "catalog", c.view(r, "Catalog", "catalog", tools))
}

// Template helpers.

func (c *Console) ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return span(c.o.Now().Sub(t)) + " ago"
}

func (c *Console) left(t time.Time) string {
	d := t.Sub(c.o.Now())
	if d <= 0 {
		return "expired"
	}
	return span(d) + " left"
}

func span(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// maxShown bounds what a page shows of one value.
const maxShown = 64 << 10

// prettyJSON indents JSON for display; what is not JSON is shown as it is.
// html/template escapes the result, so hostile values render as text.
func prettyJSON(v any) string {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case string:
		raw = []byte(x)
	default:
		raw, _ = json.Marshal(x)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return strings.ToValidUTF8(string(raw), "\uFFFD")
	}
	return strings.ToValidUTF8(buf.String(), "\uFFFD")
}

// folded is a long text cut for display: Head is shown, Rest behind a
// disclosure.
type folded struct {
	Head, Rest string
	Omitted    int
}

const foldAt = 600

func fold(s string) folded {
	if len(s) <= foldAt {
		return folded{Head: s}
	}
	head := registry.Clip(s, foldAt)
	f := folded{Head: head, Rest: s[len(head):]}
	if len(f.Rest) > maxShown {
		shown := registry.Clip(f.Rest, maxShown)
		f.Omitted = len(f.Rest) - len(shown)
		f.Rest = shown
	}
	return f
}

// PathParam is chi's URL parameter name of r, unescaped. chi matches the
// escaped path when the request's path has escapes of its own (an id
// holding "/" sent as %2F), and then hands the parameter over escaped.
func PathParam(r *http.Request, name string) string {
	v := chi.URLParam(r, name)
	if r.URL.RawPath == "" {
		return v
	}
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}
