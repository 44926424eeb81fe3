package http

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// wireCall is every body shape POST /calls accepts: the native call, an
// OpenAI tool call, or an Anthropic tool_use block.
type wireCall struct {
	registry.Call
	// OpenAI: {"id", "type": "function", "function": {"name", "arguments"}}.
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
	// Anthropic: {"type": "tool_use", "id", "name", "input"}.
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// decodeCall reads one call in any accepted shape.
func decodeCall(raw []byte) (*registry.Call, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errBadRequest("invalid_call", "a call must be a JSON object")
	}
	var w wireCall
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, errBadRequest("invalid_call", "the call does not have the expected shape: "+err.Error())
	}
	c := w.Call
	switch {
	case w.Type == "function" && w.Function != nil:
		c.ToolName, c.Arguments = w.Function.Name, w.Function.Arguments
		if c.ToolCallID == "" {
			c.ToolCallID = w.ID
		}
	case w.Type == "tool_use":
		c.ToolName, c.Arguments = w.Name, w.Input
		if c.ToolCallID == "" {
			c.ToolCallID = w.ID
		}
	}
	if c.ToolName == "" {
		return nil, errBadRequest("missing_tool_name", `the call names no tool; send {"toolName": "...", "arguments": {...}} or an OpenAI tool call or Anthropic tool_use block`)
	}
	if len(c.ToolCallID) > 256 {
		return nil, errBadRequest("invalid_call", "toolCallId is longer than 256 characters")
	}
	return &c, nil
}

func (s *Server) handleCall(w http.ResponseWriter, r *http.Request) error {
	format, err := resultFormat(r.URL.Query().Get("format"))
	if err != nil {
		return err
	}
	body, err := s.readJSON(w, r)
	if err != nil {
		return err
	}
	call, err := decodeCall(body)
	if err != nil {
		return err
	}
	res, err := s.deps.Executor.Execute(r.Context(), CallerFrom(r.Context()), call)
	if err != nil {
		return err
	}
	return encode(w, resultStatus(res), format(res))
}

func resultStatus(r *registry.Result) int {
	if r.Status == registry.StatusPendingApproval || r.Status == registry.StatusRunning {
		return http.StatusAccepted
	}
	return http.StatusOK
}
