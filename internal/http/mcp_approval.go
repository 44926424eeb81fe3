package http

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Approval by the caller over MCP. A rule with callerMayApprove lets the
// calling user decide a call it sends for approval. A client of revision
// 2026-07-28 or later that declares form elicitation then gets, instead of
// the pending result, an input_required result whose one input request
// (mcpApprovalInput) asks the user to approve that exact call, and whose
// requestState is the approval request's id. The client retries the call
// with the answer; the answer decides the same approval request that
// POST /approvals/{id} decides (Executor.DecideAsCaller), so whichever
// decision comes first wins and the call runs once:
//
//   - accept approves, runs the call and answers with its result;
//   - decline denies (E_APPROVAL_DENIED);
//   - cancel decides nothing: the request stays pending for an approver
//     (or expires), and the answer is the pending result.
//
// Clients that cannot answer (older revisions, no elicitation capability)
// get the pending result. The service serves /mcp statelessly, so it
// cannot send a 2025-11-25 client an elicitation/create request: that
// needs a session and a stream back to the client.

// mcpInputRequestsVersion is the first revision with input_required
// results (multi round-trip requests).
const mcpInputRequestsVersion = "2026-07-28"

// mcpApprovalInput is the key of the approval's input request.
const mcpApprovalInput = "approval"

// mcpApprovalMeta is the _meta key of the elicitation that carries the
// approval request, for clients that show more than the message.
const mcpApprovalMeta = "toolsvc/approval"

// mcpApprovalSchema is the form of the elicitation: nothing to fill in
// but an optional reason; accept or decline is the decision.
var mcpApprovalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"reason": map[string]any{
			"type":        "string",
			"title":       "Reason (optional)",
			"description": "Why you approve or decline; kept with the decision.",
			"maxLength":   registry.MaxReason,
		},
	},
}

// canElicit reports whether the client of a tools/call can answer an
// input_required result with a form elicitation.
func canElicit(req *mcp.CallToolRequest) bool {
	if req.ProtocolVersion() < mcpInputRequestsVersion {
		return false
	}
	caps := req.ClientCapabilities()
	if caps == nil || caps.Elicitation == nil {
		return false
	}
	// No mode declared means form (the revisions before modes).
	return caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
}

// mcpAskCaller is the input_required result that asks the caller to
// decide approval request id, or nil when they may not (the rule keeps it
// to approvers), it is no longer pending, or it cannot be read: then the
// pending result stands.
func (s *Server) mcpAskCaller(ctx context.Context, caller *registry.Caller, id string) *mcp.CallToolResult {
	a, err := s.deps.Executor.CallerApproval(ctx, caller, id)
	if err != nil {
		if !errors.Is(err, registry.ErrCallerMayNotApprove) {
			s.deps.Logger.Warn("mcp: reading an approval request to ask the caller failed; answering pending", "approvalId", id, "error", err)
		}
		return nil
	}
	if a.Status != registry.ApprovalPending {
		return nil // expired already: nothing left to decide
	}
	return &mcp.CallToolResult{
		InputRequests: mcp.InputRequestMap{mcpApprovalInput: approvalElicitation(a)},
		RequestState:  a.ID,
	}
}

// approvalElicitation asks the user to approve the call of a: its tool,
// its arguments exactly as they will run, and the rule that asked.
func approvalElicitation(a *registry.Approval) *mcp.ElicitParams {
	var b strings.Builder
	fmt.Fprintf(&b, "Approve this tool call? It runs only if you approve.\n\nTool: %s\nArguments: %s\nRule: %s", a.ToolName, a.Arguments, a.Rule)
	if a.Reason != "" {
		fmt.Fprintf(&b, " (%s)", a.Reason)
	}
	fmt.Fprintf(&b, "\nApproval id: %s (expires at %s)", a.ID, a.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
	return &mcp.ElicitParams{
		Mode:            "form",
		Message:         b.String(),
		RequestedSchema: mcpApprovalSchema,
		Meta: mcp.Meta{mcpApprovalMeta: map[string]any{
			"id": a.ID, "toolCallId": a.ToolCallID, "toolName": a.ToolName, "arguments": a.Arguments,
			"argumentsDigest": a.ArgumentsDigest, "rule": a.Rule, "reason": a.Reason, "expiresAt": a.ExpiresAt,
		}},
	}
}

// mcpAnswer takes the retry of a tools/call that got the approval's
// input_required result: the caller's answer decides the approval request
// named by requestState, which must be the caller's own, filed for this
// very call. An answer that does not fit is a protocol error.
func (s *Server) mcpAnswer(ctx context.Context, caller *registry.Caller, p *mcp.CallToolParamsRaw) (*mcp.CallToolResult, error) {
	if !caller.Has(registry.ScopeCall) {
		return mcpText(fmt.Sprintf("This caller lacks the %q scope and cannot call tools.", registry.ScopeCall)), nil
	}
	id := p.RequestState
	// What the client sent is quoted back cut, as a problem's echo is.
	quoted := clipTo(id, maxEchoBytes)
	if id == "" {
		return nil, invalidParams("inputResponses came without requestState: echo the requestState of the input_required result")
	}
	answer, ok := p.InputResponses[mcpApprovalInput].(*mcp.ElicitResult)
	if !ok {
		return nil, invalidParams(fmt.Sprintf("inputResponses lacks %q, the answer to the approval's elicitation", mcpApprovalInput))
	}
	ex := s.deps.Executor
	a, err := ex.CallerApproval(ctx, caller, id)
	switch {
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrNoStore):
		return nil, invalidParams(fmt.Sprintf("requestState %q names no approval request of this caller", quoted))
	case errors.Is(err, registry.ErrCallerMayNotApprove):
		return nil, invalidParams(fmt.Sprintf("approval request %s is not the caller's to decide: %v", quoted, err))
	case err != nil:
		s.deps.Logger.Error("mcp: reading an approval request failed", "approvalId", id, "error", err)
		return mcpText("The approval request could not be read (the service's store is not answering). Try again in a few seconds."), nil
	}
	if !a.Binds(p.Name, p.Arguments, s.deps.Limits.MaxJSONDepth) {
		return nil, invalidParams(fmt.Sprintf("approval request %s is for another call (tool %s and its arguments): retry the call exactly as it was made", quoted, a.ToolName))
	}
	var v registry.Verdict
	switch answer.Action {
	case "accept":
		v = registry.VerdictApprove
	case "decline":
		v = registry.VerdictDeny
	case "cancel":
		// Dismissed without a choice: decide nothing, answer where the
		// call stands (pending, or what an approver decided meanwhile).
		return s.mcpStanding(ctx, a), nil
	default:
		return nil, invalidParams(fmt.Sprintf("the answer's action %q is not accept, decline or cancel", clipTo(answer.Action, maxEchoBytes)))
	}
	reason, _ := answer.Content["reason"].(string)
	if msg := registry.CheckReason(reason); msg != "" {
		return nil, invalidParams(msg)
	}
	_, res, err := ex.DecideAsCaller(ctx, caller, id, v, decidedVia(reason))
	if err != nil || res == nil {
		s.deps.Logger.Error("mcp: deciding an approval request failed", "approvalId", id, "error", err)
		return mcpText("The decision could not be recorded (the service's store is not answering). Try again in a few seconds."), nil
	}
	return mcpToolResult(res), nil
}

// decidedVia is the reason recorded with the caller's decision: that it
// came over MCP, and the caller's own reason.
func decidedVia(reason string) string {
	if reason = strings.TrimSpace(reason); reason != "" {
		return "via MCP: " + reason
	}
	return "via MCP"
}

// mcpStanding answers with where the call of a stands: its stored result,
// which is the pending result while nobody has decided.
func (s *Server) mcpStanding(ctx context.Context, a *registry.Approval) *mcp.CallToolResult {
	rec, err := s.deps.Executor.Store().GetCall(ctx, a.CallerID, a.ToolCallID)
	if err != nil || rec.Result == nil {
		return mcpToolResult(&registry.Result{ToolCallID: a.ToolCallID, ToolName: a.ToolName, Status: registry.StatusPendingApproval,
			Approval: &registry.ApprovalTicket{ID: a.ID, ExpiresAt: a.ExpiresAt, ArgumentsDigest: a.ArgumentsDigest}})
	}
	res := rec.Result
	if rec.State == registry.CallRunning {
		res = &registry.Result{ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Status: registry.StatusRunning}
	}
	return mcpToolResult(res)
}

func invalidParams(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}
