package store

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// EncodeResult returns the stored form of a result (nil for nil).
func EncodeResult(r *registry.Result) ([]byte, error) {
	if r == nil {
		return nil, nil
	}
	// Without HTML escaping, as results are answered: json.Marshal would
	// store an output's "<" as "\u003c", and a result read back (GET
	// /calls/{id}, an approved call over MCP) would differ from the one
	// first answered.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("store: encoding result: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// DecodeResult reads a stored result (nil for empty).
func DecodeResult(b []byte) (*registry.Result, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var r registry.Result
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("store: decoding result: %w", err)
	}
	return &r, nil
}

// EncodeContext returns the stored form of a call context.
func EncodeContext(c registry.CallContext) []byte {
	b, _ := json.Marshal(c) // three strings always marshal
	return b
}

// DecodeContext reads a stored call context.
func DecodeContext(b []byte) (registry.CallContext, error) {
	var c registry.CallContext
	if len(b) == 0 {
		return c, nil
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("store: decoding context: %w", err)
	}
	return c, nil
}

// CheckBegin validates a record given to BeginCall.
func CheckBegin(rec *registry.CallRecord) error {
	switch {
	case rec.CallerID == "" || rec.ToolCallID == "":
		return fmt.Errorf("store: BeginCall needs a caller id and a toolCallId")
	case rec.ToolName == "" || rec.ArgumentsDigest == "":
		return fmt.Errorf("store: BeginCall needs a tool name and an arguments digest")
	case rec.State == registry.CallRunning:
		return nil
	case rec.State == registry.CallPendingApproval:
		if rec.ApprovalID == "" || rec.ExpiresAt.IsZero() || rec.Result == nil {
			return fmt.Errorf("store: a pending call needs an approval id, an expiry and its pending result")
		}
		return nil
	}
	return fmt.Errorf("store: BeginCall takes a running or pending_approval record, not %q", rec.State)
}

// CheckApproval validates a request given to CreateApproval.
func CheckApproval(a *registry.Approval) error {
	switch {
	case a.ID == "":
		return fmt.Errorf("store: an approval request needs an id")
	case a.CallerID == "" || a.ToolCallID == "" || a.ToolName == "":
		return fmt.Errorf("store: approval %s needs a caller id, a toolCallId and a tool name", a.ID)
	case a.ExpiresAt.IsZero():
		return fmt.Errorf("store: approval %s needs an expiry", a.ID)
	case a.Status != "" && a.Status != registry.ApprovalPending:
		return fmt.Errorf("store: approval %s must be created pending", a.ID)
	}
	return nil
}

// Arguments returns raw, or an empty object for nothing.
func Arguments(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return []byte("{}")
	}
	return raw
}

// EncodeFiling stores what an approval request was filed with; nil is
// stored as nothing.
func EncodeFiling(f *registry.Filing) ([]byte, error) {
	if f == nil {
		return nil, nil
	}
	return json.Marshal(f)
}

// DecodeFiling reads what EncodeFiling stored; nothing is nil (a request
// filed before filings were kept).
func DecodeFiling(b []byte) (*registry.Filing, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var f registry.Filing
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decoding an approval's filing: %w", err)
	}
	return &f, nil
}
