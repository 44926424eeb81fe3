package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The audit events of decisions on approval requests.
const (
	// AuditApproval is an approver's decision (POST /approvals/{id}, the
	// console).
	AuditApproval = "approval"
	// AuditCallerApproval is the calling user's own decision on a call
	// that a rule with callerMayApprove sent for approval.
	AuditCallerApproval = "caller-approval"
)

// MaxReason bounds the reason given with a decision, in characters.
const MaxReason = 1000

// CheckReason says what is wrong with the reason given with a decision,
// or "" when nothing is: it is text of at most MaxReason characters, and
// holds no NUL, which PostgreSQL cannot store (a decision carrying one
// would fail as if the store were down). Line breaks are fine.
func CheckReason(reason string) string {
	switch {
	case !utf8.ValidString(reason):
		return "the reason is not valid UTF-8"
	case utf8.RuneCountInString(reason) > MaxReason:
		return fmt.Sprintf("the reason is longer than %d characters", MaxReason)
	case strings.ContainsRune(reason, 0):
		return "the reason holds a NUL character"
	}
	return ""
}

// CallerChecker is what a Policy may offer so that an approved call whose
// caller the configuration no longer defines, or no longer lets call the
// tool, does not run: CurrentCaller returns c, as a call was filed by it,
// as the configuration the policy was loaded with defines it now (a
// caller resource by its id, a token caller by its issuer), or false when
// it defines it no more. The executor asks it of every call an approval
// resumes, with the policy in force at that moment, and the call runs
// only when the caller then still has the call scope and sees the tool;
// a policy without it lets every filed caller run.
type CallerChecker interface {
	CurrentCaller(c *Caller) (*Caller, bool)
}

// ErrCallerMayNotApprove means the rule that asked for an approval request
// keeps it to approvers: the caller may not decide it.
var ErrCallerMayNotApprove = errors.New("the rule that asked for this approval keeps it to approvers (it does not set callerMayApprove)")

// CallerMayApprove reports whether the rule that filed a lets its caller
// decide it.
func (a *Approval) CallerMayApprove() bool {
	return a != nil && a.Filed != nil && a.Filed.CallerMayApprove
}

// CallerApproval returns approval request id when caller may decide it
// themselves: it is caller's own and the rule that asked for it set
// callerMayApprove. Another caller's request is ErrNotFound, one kept to
// approvers ErrCallerMayNotApprove.
func (e *Executor) CallerApproval(ctx context.Context, caller *Caller, id string) (*Approval, error) {
	if e.store == nil {
		return nil, ErrNoStore
	}
	a, err := e.store.GetApproval(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.CallerID != caller.ID {
		return nil, ErrNotFound
	}
	if !a.CallerMayApprove() {
		return nil, ErrCallerMayNotApprove
	}
	return a, nil
}

// DecideAsCaller records the calling user's own verdict on their approval
// request, as CallerApproval allows. It is Decide with the caller as the
// approver: the same request, decided once whoever comes first (an
// approver's POST /approvals/{id} or the caller), the call run once on
// approve; the loser gets the outcome of the winner's decision. The audit
// entry is an AuditCallerApproval.
func (e *Executor) DecideAsCaller(ctx context.Context, caller *Caller, id string, v Verdict, reason string) (*Approval, *Result, error) {
	if _, err := e.CallerApproval(ctx, caller, id); err != nil {
		return nil, nil, err
	}
	return e.decideApproval(ctx, caller, id, v, reason, AuditCallerApproval)
}

// Binds reports whether a call (its tool name and arguments, as a client
// sends them again) is the call approval request a was filed for: the
// same tool and the same arguments digest. Arguments nested deeper than
// maxDepth (0: unbounded) are not decoded and do not bind.
func (a *Approval) Binds(toolName string, arguments json.RawMessage, maxDepth int) bool {
	if a == nil || toolName != a.ToolName {
		return false
	}
	_, v, derr := decodeArguments(arguments, maxDepth, nil)
	return derr == nil && ArgumentsDigest(v) == a.ArgumentsDigest
}
