package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// wireCall is every body shape POST /calls accepts: the native call, an
// OpenAI tool call, an OpenAI Responses function_call item, an Anthropic
// tool_use block, or a Gemini functionCall part.
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
	// OpenAI Responses: {"type": "function_call", "call_id", "name",
	// "arguments"}; arguments land in Call.Arguments.
	CallID string `json:"call_id"`
	// Gemini: {"functionCall": {"id", "name", "args"}}.
	FunctionCall *struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
}

// decodeCall reads one call in any accepted shape. When the call is an
// object that cannot be read, it also returns what could be read of it (its
// id, for a batch to answer in the right slot).
func decodeCall(raw []byte) (*registry.Call, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errBadRequest("invalid_call", "a call must be a JSON object")
	}
	var w wireCall
	// On a type mismatch Unmarshal still fills the other fields.
	uerr := json.Unmarshal(raw, &w)
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
	case w.Type == "function_call":
		c.ToolName = w.Name
		if c.ToolCallID == "" {
			c.ToolCallID = w.CallID
		}
	case w.FunctionCall != nil:
		c.ToolName, c.Arguments = w.FunctionCall.Name, w.FunctionCall.Args
		if c.ToolCallID == "" {
			c.ToolCallID = w.FunctionCall.ID
		}
	}
	if uerr != nil {
		return &c, errBadRequest("invalid_call", "the call does not have the expected shape: "+shapeError(uerr))
	}
	if c.ToolName == "" {
		return &c, errBadRequest("missing_tool_name", `the call names no tool; send {"toolName": "...", "arguments": {...}}, an OpenAI tool call or function_call item, an Anthropic tool_use block or a Gemini functionCall part`)
	}
	if len(c.ToolCallID) > 256 {
		c.ToolCallID = ""
		return &c, errBadRequest("invalid_call", "toolCallId is longer than 256 characters")
	}
	return &c, nil
}

// shapeError says which member of a call has the wrong type, in JSON
// terms rather than Go's.
func shapeError(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err.Error()
	}
	want := "a " + te.Type.Kind().String()
	switch te.Type.Kind() {
	case reflect.String:
		want = "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "an integer"
	case reflect.Bool:
		want = "a boolean"
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		want = "an object"
	}
	return fmt.Sprintf("%s must be %s, not %s", strings.TrimPrefix(te.Field, "Call."), want, te.Value)
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
