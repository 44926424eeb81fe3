package http

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// The wire shapes of the model APIs. Each catalog entry is exactly what
// the API takes in its request's tools list, and each result exactly what
// goes back into its conversation; formats_test.go decodes them into the
// official client libraries' own types.

// openAITool is a Chat Completions tools entry.
type openAITool struct {
	Type     string         `json:"type"`
	Function openAIFunction `json:"function"`
}

type openAIFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// openAIResponsesTool is a Responses API function tool. strict is false:
// the API would otherwise default it to true, which only a subset of JSON
// Schema satisfies.
type openAIResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

// anthropicTool is a Messages API custom tool.
type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// geminiDeclaration is a Gemini function declaration, with the schema in
// parametersJsonSchema (full JSON Schema) rather than parameters (the
// OpenAPI subset).
type geminiDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
}

// geminiTool groups function declarations, as Gemini's tools list wants.
type geminiTool struct {
	FunctionDeclarations []geminiDeclaration `json:"functionDeclarations"`
}

// mcpTool is an MCP Tool; a catalog in this shape is a ListToolsResult.
type mcpTool struct {
	Name        string             `json:"name"`
	Title       string             `json:"title,omitempty"`
	Description string             `json:"description"`
	InputSchema json.RawMessage    `json:"inputSchema"`
	Annotations mcpToolAnnotations `json:"annotations"`
}

// mcpToolAnnotations are MCP's behaviour hints. readOnlyHint and
// idempotentHint are always given; destructiveHint only where it means
// something (not read-only); openWorldHint only when the tool says.
type mcpToolAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    bool   `json:"readOnlyHint"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  bool   `json:"idempotentHint"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// catalogFormatter renders the catalog in one model API's shape.
type catalogFormatter struct {
	one  func(t *registry.Tool) any
	list func(ts []*registry.Tool) any
}

func perTool[T any](one func(t *registry.Tool) T) catalogFormatter {
	return catalogFormatter{
		one: func(t *registry.Tool) any { return one(t) },
		list: func(ts []*registry.Tool) any {
			out := make([]T, len(ts))
			for i, t := range ts {
				out[i] = one(t)
			}
			return out
		},
	}
}

func openAIEntry(t *registry.Tool) openAITool {
	return openAITool{Type: "function", Function: openAIFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}}
}

func openAIResponsesEntry(t *registry.Tool) openAIResponsesTool {
	return openAIResponsesTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: t.Parameters}
}

func anthropicEntry(t *registry.Tool) anthropicTool {
	return anthropicTool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters}
}

func geminiEntry(t *registry.Tool) geminiDeclaration {
	return geminiDeclaration{Name: t.Name, Description: t.Description, ParametersJSONSchema: t.Parameters}
}

func mcpEntry(t *registry.Tool) mcpTool {
	a := mcpAnnotations(t)
	return mcpTool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters, Annotations: a, Title: a.Title}
}

// geminiList puts every declaration in one Tool, as Gemini expects; an
// empty catalog is an empty list rather than a Tool without declarations.
func geminiList(ts []*registry.Tool) any {
	if len(ts) == 0 {
		return []geminiTool{}
	}
	decls := make([]geminiDeclaration, len(ts))
	for i, t := range ts {
		decls[i] = geminiEntry(t)
	}
	return []geminiTool{{FunctionDeclarations: decls}}
}

// catalogFormatNames lists the ?format= values of GET /tools.
const catalogFormatNames = "native, openai, openai-responses, anthropic, gemini, mcp"

func catalogFormat(name string) (catalogFormatter, error) {
	switch name {
	case "", "native":
		return perTool(func(t *registry.Tool) *registry.Definition { return &t.Definition }), nil
	case "openai":
		return perTool(openAIEntry), nil
	case "openai-responses":
		return perTool(openAIResponsesEntry), nil
	case "anthropic":
		return perTool(anthropicEntry), nil
	case "gemini":
		return catalogFormatter{one: func(t *registry.Tool) any { return geminiEntry(t) }, list: geminiList}, nil
	case "mcp":
		return perTool(mcpEntry), nil
	}
	return catalogFormatter{}, errBadRequest("invalid_parameter", fmt.Sprintf("format %q is not one of %s", name, catalogFormatNames))
}

// mcpAnnotations are the tool's own hints, with what the tier implies
// filled in where the tool says nothing: read_only tools are read-only and
// idempotent; other tools are not read-only, are destructive unless they
// say otherwise (MCP's own default) and are not known to be idempotent.
func mcpAnnotations(t *registry.Tool) mcpToolAnnotations {
	var own registry.Annotations
	if t.Annotations != nil {
		own = *t.Annotations
	}
	readOnly := t.Tier == registry.ReadOnly
	if own.ReadOnlyHint != nil {
		readOnly = *own.ReadOnlyHint
	}
	idempotent := readOnly
	if own.IdempotentHint != nil {
		idempotent = *own.IdempotentHint
	}
	a := mcpToolAnnotations{Title: own.Title, ReadOnlyHint: readOnly, IdempotentHint: idempotent, OpenWorldHint: own.OpenWorldHint}
	if !readOnly {
		destructive := true
		if own.DestructiveHint != nil {
			destructive = *own.DestructiveHint
		}
		a.DestructiveHint = &destructive
	}
	return a
}

// openAIToolMessage is a Chat Completions tool message.
type openAIToolMessage struct {
	Role       string `json:"role"`
	ToolCallID string `json:"tool_call_id"`
	Content    string `json:"content"`
}

// openAIFunctionCallOutput is a Responses API function_call_output item.
type openAIFunctionCallOutput struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output string `json:"output"`
}

// textBlock is a text content block of Anthropic and MCP.
type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// anthropicToolResult is a Messages API tool_result content block.
type anthropicToolResult struct {
	Type      string      `json:"type"`
	ToolUseID string      `json:"tool_use_id"`
	Content   []textBlock `json:"content"`
	IsError   bool        `json:"is_error"`
}

// geminiPart is a Gemini content part holding a function response.
type geminiPart struct {
	FunctionResponse geminiFunctionResponse `json:"functionResponse"`
}

// geminiFunctionResponse carries the output under "output" and a failure
// under "error", as the Gemini API asks.
type geminiFunctionResponse struct {
	ID       string         `json:"id,omitempty"`
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

// mcpCallToolResult is an MCP CallToolResult.
type mcpCallToolResult struct {
	Content           []textBlock     `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError"`
}

// resultFormatNames lists the ?format= values of POST /calls and
// POST /calls/batch.
const resultFormatNames = "native, openai, openai-responses, anthropic, gemini, mcp"

// resultFormat returns the renderer of a ?format= value of POST /calls.
func resultFormat(name string) (func(*registry.Result) any, error) {
	switch name {
	case "", "native":
		return func(r *registry.Result) any { return r }, nil
	case "openai":
		return func(r *registry.Result) any {
			return openAIToolMessage{Role: "tool", ToolCallID: r.ToolCallID, Content: renderText(r)}
		}, nil
	case "openai-responses":
		return func(r *registry.Result) any {
			return openAIFunctionCallOutput{Type: "function_call_output", CallID: r.ToolCallID, Output: renderText(r)}
		}, nil
	case "anthropic":
		return func(r *registry.Result) any {
			return anthropicToolResult{Type: "tool_result", ToolUseID: r.ToolCallID,
				Content: []textBlock{{Type: "text", Text: renderText(r)}}, IsError: r.Status == registry.StatusError}
		}, nil
	case "gemini":
		return func(r *registry.Result) any {
			resp := map[string]any{}
			switch {
			case r.Status == registry.StatusError:
				resp["error"] = renderText(r)
			case r.Status == registry.StatusOK && len(r.Output) > 0:
				resp["output"] = r.Output
			default:
				resp["output"] = renderText(r)
			}
			return geminiPart{FunctionResponse: geminiFunctionResponse{ID: r.ToolCallID, Name: r.ToolName, Response: resp}}
		}, nil
	case "mcp":
		return func(r *registry.Result) any {
			out := mcpCallToolResult{Content: []textBlock{{Type: "text", Text: renderText(r)}}, IsError: r.Status == registry.StatusError}
			if r.Status == registry.StatusOK && len(r.Output) > 0 && r.Output[0] == '{' {
				out.StructuredContent = r.Output
			}
			return out
		}, nil
	}
	return nil, errBadRequest("invalid_parameter", fmt.Sprintf("format %q is not one of %s", name, resultFormatNames))
}

// renderText renders a result as the text a model reads: a string output
// as it is, any other output as JSON, an error with its code, message,
// details and suggestion.
func renderText(r *registry.Result) string {
	switch r.Status {
	case registry.StatusOK:
		var s string
		if json.Unmarshal(r.Output, &s) == nil {
			return s
		}
		return string(r.Output)
	case registry.StatusPendingApproval:
		var b strings.Builder
		b.WriteString("This call needs human approval before it runs, so it has not run yet.")
		if a := r.Approval; a != nil {
			fmt.Fprintf(&b, " Approval id: %s (expires at %s).", a.ID, a.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
		}
		fmt.Fprintf(&b, " Tool call id: %s.", r.ToolCallID)
		b.WriteString(" Do not call the tool again and do not try another way to do the same thing: tell the user that this action is waiting for their approval, and wait for them.")
		return b.String()
	}
	var b strings.Builder
	if r.Error == nil {
		return "Error: the call failed."
	}
	fmt.Fprintf(&b, "Error %s: %s", r.Error.Code, r.Error.Message)
	for _, d := range r.Error.Details {
		fmt.Fprintf(&b, "\n- %s", d.String())
	}
	if r.Error.Suggestion != "" {
		fmt.Fprintf(&b, "\nSuggestion: %s", r.Error.Suggestion)
	}
	return b.String()
}
