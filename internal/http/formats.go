package http

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
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
	// Strict is given only when the catalog is asked for with
	// ?strict=true: true with the strict form of the parameters, false
	// for a tool whose schema has none.
	Strict *bool `json:"strict,omitempty"`
}

// openAIResponsesTool is a Responses API function tool. strict is false
// unless ?strict=true asks for the strict form: the API would otherwise
// default it to true, which only a subset of JSON Schema satisfies.
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
	ResponseJSONSchema   json.RawMessage `json:"responseJsonSchema,omitempty"`
}

// geminiTool groups function declarations, as Gemini's tools list wants.
type geminiTool struct {
	FunctionDeclarations []geminiDeclaration `json:"functionDeclarations"`
}

// mcpTool is an MCP Tool; a catalog in this shape is a ListToolsResult.
type mcpTool struct {
	Name         string             `json:"name"`
	Title        string             `json:"title,omitempty"`
	Description  string             `json:"description"`
	InputSchema  json.RawMessage    `json:"inputSchema"`
	OutputSchema json.RawMessage    `json:"outputSchema,omitempty"`
	Annotations  mcpToolAnnotations `json:"annotations"`
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

// OpenAI and Anthropic get a tool's parameters in the form they take
// (registry.Tool.ProviderParameters): without the combinators they refuse
// at the root, in draft 2020-12's words.

func openAIEntry(t *registry.Tool) openAITool {
	return openAITool{Type: "function", Function: openAIFunction{Name: t.Name, Description: t.Description, Parameters: t.ProviderParameters()}}
}

func openAIResponsesEntry(t *registry.Tool) openAIResponsesTool {
	return openAIResponsesTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: t.ProviderParameters()}
}

// strictParameters returns the strict form of t's parameters and true, or
// their provider form and false when they have none.
func strictParameters(t *registry.Tool) (json.RawMessage, bool) {
	if f := t.Strict(); f.Parameters != nil {
		return f.Parameters, true
	}
	return t.ProviderParameters(), false
}

func openAIStrictEntry(t *registry.Tool) openAITool {
	params, strict := strictParameters(t)
	return openAITool{Type: "function", Function: openAIFunction{Name: t.Name, Description: t.Description, Parameters: params, Strict: &strict}}
}

func openAIResponsesStrictEntry(t *registry.Tool) openAIResponsesTool {
	params, strict := strictParameters(t)
	return openAIResponsesTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: params, Strict: strict}
}

// notStrictTool names a tool served without its strict form, and why.
type notStrictTool struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// notStrict lists the tools of ts whose schemas have no strict form.
func notStrict(ts []*registry.Tool) []notStrictTool {
	out := []notStrictTool{}
	for _, t := range ts {
		if f := t.Strict(); f.Parameters == nil {
			out = append(out, notStrictTool{Name: t.Name, Reason: f.Reason})
		}
	}
	return out
}

func anthropicEntry(t *registry.Tool) anthropicTool {
	return anthropicTool{Name: t.Name, Description: t.Description, InputSchema: t.ProviderParameters()}
}

func geminiEntry(t *registry.Tool) geminiDeclaration {
	return geminiDeclaration{Name: t.Name, Description: t.Description, ParametersJSONSchema: t.Parameters, ResponseJSONSchema: t.OutputSchema}
}

func mcpEntry(t *registry.Tool) mcpTool {
	a := mcpAnnotations(t)
	return mcpTool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters, OutputSchema: t.OutputSchema, Annotations: a, Title: a.Title}
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

// wireFormat is one model API's shape of the catalog and of results;
// strict, for the APIs with a strict mode, is the catalog ?strict=true
// asks for.
type wireFormat struct {
	name    string
	catalog catalogFormatter
	result  func(*registry.Result) any
	strict  *catalogFormatter
}

// wireFormats is the one table of the ?format= values of GET /tools,
// GET /tools/{name}, POST /calls and POST /calls/batch; /mcp serves the
// "mcp" row's entries and results through the SDK.
func wireFormats() []wireFormat {
	return []wireFormat{
		{"native", perTool(func(t *registry.Tool) *registry.Definition { return &t.Definition }), nativeResult, nil},
		{"openai", perTool(openAIEntry), func(r *registry.Result) any {
			return openAIToolMessage{Role: "tool", ToolCallID: r.ToolCallID, Content: renderText(r)}
		}, ptr(perTool(openAIStrictEntry))},
		{"openai-responses", perTool(openAIResponsesEntry), func(r *registry.Result) any {
			return openAIFunctionCallOutput{Type: "function_call_output", CallID: r.ToolCallID, Output: renderText(r)}
		}, ptr(perTool(openAIResponsesStrictEntry))},
		{"anthropic", perTool(anthropicEntry), func(r *registry.Result) any {
			return anthropicToolResult{Type: "tool_result", ToolUseID: r.ToolCallID,
				Content: []textBlock{{Type: "text", Text: renderText(r)}}, IsError: r.Status == registry.StatusError}
		}, nil},
		{"gemini", catalogFormatter{one: func(t *registry.Tool) any { return geminiEntry(t) }, list: geminiList}, geminiResult, nil},
		{"mcp", perTool(mcpEntry), func(r *registry.Result) any { return mcpResult(r) }, nil},
	}
}

// formats is the table of ?format= values, built once per server: every
// call and catalog request looks its format up in it.
type formats []wireFormat

// names lists the ?format= values.
func (fs formats) names() string {
	var names []string
	for _, f := range fs {
		names = append(names, f.name)
	}
	return strings.Join(names, ", ")
}

// named returns the format of a ?format= value ("" is native).
func (fs formats) named(name string) (wireFormat, error) {
	if name == "" {
		name = "native"
	}
	for _, f := range fs {
		if f.name == name {
			return f, nil
		}
	}
	return wireFormat{}, problem(kindInvalidParameter, fmt.Sprintf("format %q is not one of %s", name, fs.names()))
}

func ptr[T any](v T) *T { return &v }

// catalog returns the catalog shape of a ?format= value, in its
// strict form when strict asks for it (only the formats of APIs with a
// strict mode have one).
func (fs formats) catalog(name string, strict bool) (catalogFormatter, error) {
	f, err := fs.named(name)
	if err != nil || !strict {
		return f.catalog, err
	}
	if f.strict == nil {
		var with []string
		for _, w := range fs {
			if w.strict != nil {
				with = append(with, w.name)
			}
		}
		return catalogFormatter{}, problem(kindInvalidParameter, fmt.Sprintf("strict=true applies to format %s, not %q", strings.Join(with, " and "), cmp.Or(name, "native")))
	}
	return *f.strict, nil
}

// strictParam reads ?strict=: true, false, or absent (false).
func strictParam(q url.Values) (bool, error) {
	v := q.Get("strict")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, problem(kindInvalidParameter, fmt.Sprintf("strict must be true or false, not %q", v))
	}
	return b, nil
}

// dropStrictNulls makes the arguments of a call from a model in strict
// mode (?strict=true on POST /calls and /calls/batch) what the tool's own
// schema takes: a null for an optional property the strict form made
// nullable means the property is absent. A tool served without a strict
// form gets its arguments as they are, and so does every call without
// ?strict=true: a null there is judged by the tool's schema.
func (s *Server) dropStrictNulls(call *registry.Call) {
	if t, ok := s.deps.Executor.Registry().Lookup(call.ToolName); ok {
		call.Arguments = t.Strict().DropNulls(call.Arguments)
	}
}

// mcpAnnotations derive from the tier, so that a client that
// auto-approves read-only tools agrees with the service's own policy:
// readOnlyHint only for read_only tools; tools of other tiers are
// destructive unless they say otherwise (MCP's own default), privileged
// ones always; idempotent as the tool says, else only when read-only.
// Title and openWorldHint are the tool's own.
func mcpAnnotations(t *registry.Tool) mcpToolAnnotations {
	var own registry.Annotations
	if t.Annotations != nil {
		own = *t.Annotations
	}
	readOnly := t.Tier == registry.ReadOnly
	idempotent := readOnly
	if own.IdempotentHint != nil {
		idempotent = *own.IdempotentHint || readOnly
	}
	a := mcpToolAnnotations{Title: own.Title, ReadOnlyHint: readOnly, IdempotentHint: idempotent, OpenWorldHint: own.OpenWorldHint}
	if !readOnly {
		destructive := true
		if own.DestructiveHint != nil && t.Tier != registry.Privileged {
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

// result returns the renderer of a ?format= value of POST /calls.
func (fs formats) result(name string) (func(*registry.Result) any, error) {
	f, err := fs.named(name)
	return f.result, err
}

// geminiResult carries the output under "output" and a failure under
// "error", as the Gemini API asks.
func geminiResult(r *registry.Result) any {
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
}

// mcpResult is the CallToolResult of a result, on /mcp and ?format=mcp:
// the text every shape renders, and an object output whole as
// structuredContent (already checked against the tool's outputSchema).
// A truncated output is a string cut with its marker, never structured
// content.
func mcpResult(r *registry.Result) mcpCallToolResult {
	out := mcpCallToolResult{Content: []textBlock{{Type: "text", Text: renderText(r)}}, IsError: r.Status != registry.StatusOK}
	if r.Status == registry.StatusOK && !r.Truncated {
		if trimmed := bytes.TrimSpace(r.Output); len(trimmed) > 0 && trimmed[0] == '{' {
			out.StructuredContent = trimmed
		}
	}
	return out
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

// nativeResult is the ToolCallResult as it is, except that a pending
// approval also says how to decide it and where the result will be.
func nativeResult(r *registry.Result) any {
	if r.Approval == nil || r.Status != registry.StatusPendingApproval {
		return r
	}
	return struct {
		*registry.Result
		Approval pendingApproval `json:"approval"`
	}{r, pendingApproval{
		ApprovalTicket: *r.Approval,
		Approve:        fmt.Sprintf(`POST /approvals/%s {"decision": "approve"} or {"decision": "deny"}, by a caller with the approve scope`, url.PathEscape(r.Approval.ID)),
		Result:         fmt.Sprintf("GET /calls/%s?wait=30s", url.PathEscape(r.ToolCallID)),
	}}
}

// pendingApproval is the approval member of a pending ToolCallResult.
type pendingApproval struct {
	registry.ApprovalTicket
	Approve string `json:"approve"`
	Result  string `json:"result"`
}
