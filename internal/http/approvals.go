package http

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/http/ui"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// maxWait bounds the long poll of GET /calls/{toolCallId}.
const maxWait = 60 * time.Second

func (s *Server) store() (registry.Store, error) {
	st := s.deps.Executor.Store()
	if st == nil {
		return nil, problem(kindNotFound, "this service keeps no call records")
	}
	return st, nil
}

// handleGetCall returns the stored result of an earlier call of this
// caller; ?wait= long-polls while it runs or waits for approval.
func (s *Server) handleGetCall(w http.ResponseWriter, r *http.Request) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 {
			return problem(kindInvalidParameter, `wait must be a duration such as "30s"`)
		}
		wait = min(wait, maxWait)
	}
	caller := CallerFrom(r.Context())
	id := ui.PathParam(r, "toolCallId")
	if err := checkPathID(id); err != nil {
		return err
	}
	// Through the executor: a call that finished while the store did not
	// take its result is done, with the result it holds in memory.
	ex := s.deps.Executor
	rec, err := ex.GetCall(r.Context(), caller.ID, id)
	if errors.Is(err, registry.ErrNotFound) {
		return problem(kindNotFound, "no call "+id+" of this caller is recorded (read_only calls are recorded only with \"record\": true)")
	}
	if err != nil {
		return storeFailed(err, "")
	}
	if rec.State != registry.CallDone && wait > 0 {
		dctx, stop := s.untilDrain(r.Context())
		defer stop()
		ctx, cancel := context.WithTimeout(dctx, wait)
		defer cancel()
		if got, err := ex.WaitCall(ctx, caller.ID, id); got != nil {
			rec = got
		} else if err != nil && ctx.Err() == nil {
			return storeFailed(err, "")
		}
		if rec.State != registry.CallDone && s.draining.Load() {
			// The wait was cut short: the state as it stands now, and
			// the client asks again elsewhere (Connection: close).
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close")
		}
	}
	if rec.State == registry.CallPendingApproval && rec.ApprovalID != "" {
		// A ticket must name a request that exists: one whose filing
		// failed (and whose record could not be withdrawn either) is
		// filed again only when the call is sent again.
		if _, err := st.GetApproval(r.Context(), rec.ApprovalID); errors.Is(err, registry.ErrNotFound) {
			return problem(kindUnavailable, "the call's approval request was not filed, because the store failed while filing it; send the call again (POST /calls, same toolCallId and arguments) to file it")
		} else if err != nil {
			return storeFailed(err, "")
		}
	}
	res := rec.Result
	if res == nil || rec.State == registry.CallRunning {
		res = &registry.Result{ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Status: registry.StatusRunning}
	}
	status := http.StatusOK
	if rec.State != registry.CallDone {
		status = http.StatusAccepted
	}
	markRecordPending(w, res)
	return encode(w, status, nativeResult(res))
}

// approvalList is the body of GET /approvals.
type approvalList struct {
	Approvals []*registry.Approval `json:"approvals"`
	// Next, when the page is full, is the after of the next page.
	Next string `json:"next,omitempty"`
}

// maxApprovalPage is the most requests one page of GET /approvals holds,
// and the size of a page without ?limit.
const maxApprovalPage = 1000

// encodeCursor and decodeCursor turn an approval's place in listings
// into the opaque ?after= of GET /approvals and back.
func encodeCursor(c *registry.ApprovalCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.ID))
}

func decodeCursor(s string) (*registry.ApprovalCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	at, id, ok := strings.Cut(string(b), ".")
	micros, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" {
		return nil, errors.New("not a cursor")
	}
	// Anyone can write a cursor: its id reaches the store, which must not
	// fail on it as if it were down (PostgreSQL refuses a NUL or invalid
	// UTF-8), so it is held to what an id is.
	if !utf8.ValidString(id) || badText(id, nil) != "" {
		return nil, errors.New("not an approval id")
	}
	return &registry.ApprovalCursor{CreatedAt: time.UnixMicro(micros), ID: id}, nil
}

// canSeeAll: approvers and admins see every caller's requests; others
// only their own.
func canSeeAll(c *registry.Caller) bool {
	return c.Has(registry.ScopeApprove) || c.Has(registry.ScopeAdmin)
}

func (s *Server) handleListApprovals(w http.ResponseWriter, r *http.Request) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := registry.ApprovalFilter{Status: registry.ApprovalPending, Limit: maxApprovalPage}
	switch v := q.Get("status"); v {
	case "":
	case "all":
		f.Status = ""
	default:
		if f.Status, err = registry.ParseApprovalStatus(v); err != nil {
			return problem(kindInvalidParameter, err.Error()+" or all")
		}
	}
	switch q.Get("order") {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		return problem(kindInvalidParameter, "order must be oldest or newest")
	}
	if v := q.Get("limit"); v != "" {
		if f.Limit, err = strconv.Atoi(v); err != nil || f.Limit < 1 || f.Limit > maxApprovalPage {
			return problem(kindInvalidParameter, "limit must be a whole number from 1 to "+strconv.Itoa(maxApprovalPage))
		}
	}
	if v := q.Get("after"); v != "" {
		if f.After, err = decodeCursor(v); err != nil {
			return problem(kindInvalidParameter, "after must be the next of an earlier page of GET /approvals")
		}
	}
	caller := CallerFrom(r.Context())
	if !canSeeAll(caller) {
		f.CallerID = caller.ID
	}
	list, err := st.ListApprovals(r.Context(), f)
	if err != nil {
		return storeFailed(err, "")
	}
	page := approvalList{Approvals: list}
	if list == nil {
		page.Approvals = []*registry.Approval{}
	}
	if len(list) == f.Limit {
		page.Next = encodeCursor(list[len(list)-1].Cursor())
	}
	return encode(w, http.StatusOK, page)
}

func (s *Server) handleGetApproval(w http.ResponseWriter, r *http.Request) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	id := ui.PathParam(r, "id")
	if err := checkPathID(id); err != nil {
		return err
	}
	a, err := st.GetApproval(r.Context(), id)
	caller := CallerFrom(r.Context())
	if errors.Is(err, registry.ErrNotFound) || (err == nil && !canSeeAll(caller) && a.CallerID != caller.ID) {
		return problem(kindNotFound, "no approval request "+id)
	}
	if err != nil {
		return storeFailed(err, "")
	}
	return encode(w, http.StatusOK, a)
}

// decision is the body of POST /approvals/{id}.
type decision struct {
	Decision registry.Verdict `json:"decision"`
	Reason   string           `json:"reason"`
}

// handleDecide approves or denies a request and answers with the call's
// result: on approve, the result of running it.
func (s *Server) handleDecide(w http.ResponseWriter, r *http.Request) error {
	body, err := s.readJSON(w, r)
	if err != nil {
		return err
	}
	if e := decisionShape.check(body); e != nil {
		return problem(kindInvalidDecision, `send {"decision": "approve" | "deny", "reason": "..."}: `+e.detail("the decision"))
	}
	var d decision
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		why := shapeError(err)
		if m := unknownMember(err); m != "" {
			why = fmt.Sprintf("it has a member %q; a decision has only decision and reason", m)
		} else if strings.Contains(why, "Go ") {
			why = "a decision must be a JSON object"
		}
		return problem(kindInvalidDecision, `send {"decision": "approve" | "deny", "reason": "..."}: `+why)
	}
	if d.Decision != registry.VerdictApprove && d.Decision != registry.VerdictDeny {
		return problem(kindInvalidDecision, `decision must be "approve" or "deny"`)
	}
	if msg := registry.CheckReason(d.Reason); msg != "" {
		return problem(kindInvalidDecision, msg)
	}
	id := ui.PathParam(r, "id")
	if err := checkPathID(id); err != nil {
		return err
	}
	_, res, err := s.deps.Executor.Decide(r.Context(), CallerFrom(r.Context()), id, d.Decision, d.Reason)
	if errors.Is(err, registry.ErrNotFound) || errors.Is(err, registry.ErrNoStore) {
		return problem(kindNotFound, "no approval request "+id)
	}
	if err != nil {
		return storeFailed(err, "")
	}
	markRecordPending(w, res)
	return encode(w, resultStatus(res), nativeResult(res))
}
