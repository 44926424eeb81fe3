package registry

import (
	"encoding/json"
	"time"
)

// CallContext carries the caller's conversation context.
type CallContext struct {
	// InstanceKey selects an isolated workspace sub-directory.
	InstanceKey string `json:"instanceKey,omitempty"`
	AgentName   string `json:"agentName,omitempty"`
	TurnID      string `json:"turnId,omitempty"`
}

// InlineApproval is a pre-approval given with the call by a gateway that
// has already asked its user.
type InlineApproval struct {
	Granted bool   `json:"granted"`
	By      string `json:"by,omitempty"`
}

// Call is one tool call as requested.
type Call struct {
	ToolCallID string `json:"toolCallId,omitempty"`
	ToolName   string `json:"toolName"`
	// Arguments is a JSON object, or a JSON string holding one.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	TimeoutMs int64           `json:"timeoutMs,omitempty"`
	// Catalog narrows the caller's catalog for this call.
	Catalog  []string        `json:"catalog,omitempty"`
	Context  CallContext     `json:"context,omitzero"`
	Approval *InlineApproval `json:"approval,omitempty"`
	// Record asks that a read_only call with a toolCallId be recorded, so
	// that GET /calls/{toolCallId} and repeats find it; calls of the other
	// tiers are always recorded.
	Record bool `json:"record,omitempty"`
}

// Status is the outcome of a call.
type Status string

// The statuses of a ToolCallResult.
const (
	StatusOK              Status = "ok"
	StatusError           Status = "error"
	StatusPendingApproval Status = "pending_approval"
	// StatusRunning is only reported by GET /calls/{toolCallId}, for a
	// call that has not finished yet.
	StatusRunning Status = "running"
)

// ApprovalTicket tells the caller where its pending call waits.
type ApprovalTicket struct {
	ID              string    `json:"id"`
	ExpiresAt       time.Time `json:"expiresAt"`
	ArgumentsDigest string    `json:"argumentsDigest"`
}

// Result is a ToolCallResult.
type Result struct {
	ToolCallID    string          `json:"toolCallId"`
	ToolName      string          `json:"toolName"`
	Status        Status          `json:"status"`
	Output        json.RawMessage `json:"output,omitempty"`
	Error         *Error          `json:"error,omitempty"`
	Truncated     bool            `json:"truncated"`
	OriginalBytes int64           `json:"originalBytes,omitempty"`
	DurationMs    int64           `json:"durationMs"`
	Approval      *ApprovalTicket `json:"approval,omitempty"`
	// RecordPending says the call ran but its record is not yet in the
	// store: the result is held in memory and retried, and a retry on
	// another instance may not see it yet.
	RecordPending bool `json:"recordPending,omitempty"`
}

// Code returns the error code of r, or "" when r is not an error.
func (r *Result) Code() Code {
	if r.Error == nil {
		return ""
	}
	return r.Error.Code
}
