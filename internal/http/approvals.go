package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

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
	rec, err := st.GetCall(r.Context(), caller.ID, id)
	if errors.Is(err, registry.ErrNotFound) {
		return problem(kindNotFound, "no call "+id+" of this caller is recorded (read_only calls are recorded only with \"record\": true)")
	}
	if err != nil {
		return storeFailed(err, "")
	}
	if rec.State != registry.CallDone && wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		if got, err := st.WaitCall(ctx, caller.ID, id); got != nil {
			rec = got
		} else if err != nil && ctx.Err() == nil {
			return storeFailed(err, "")
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
	return encode(w, status, nativeResult(res))
}

// approvalList is the body of GET /approvals.
type approvalList struct {
	Approvals []*registry.Approval `json:"approvals"`
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
	f := registry.ApprovalFilter{Status: registry.ApprovalPending, Limit: 1000}
	switch v := r.URL.Query().Get("status"); v {
	case "":
	case "all":
		f.Status = ""
	default:
		if f.Status, err = registry.ParseApprovalStatus(v); err != nil {
			return problem(kindInvalidParameter, err.Error()+" or all")
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
	if list == nil {
		list = []*registry.Approval{}
	}
	return encode(w, http.StatusOK, approvalList{Approvals: list})
}

func (s *Server) handleGetApproval(w http.ResponseWriter, r *http.Request) error {
	st, err := s.store()
	if err != nil {
		return err
	}
	id := ui.PathParam(r, "id")
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
