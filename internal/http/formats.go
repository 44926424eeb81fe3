package http

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// catalogFormatter renders the catalog in one model API's shape.
type catalogFormatter struct {
	one  func(t *registry.Tool) any
	list func(ts []*registry.Tool) any
}

func perTool(one func(t *registry.Tool) any) catalogFormatter {
	return catalogFormatter{one: one, list: func(ts []*registry.Tool) any {
		out := make([]any, len(ts))
		for i, t := range ts {
			out[i] = one(t)
		}
		return out
	}}
}

// catalogFormats lists the ?format= values of GET /tools.
func catalogFormats() map[string]catalogFormatter {
	gemini := func(t *registry.Tool) any {
		return map[string]any{"name": t.Name, "description": t.Description, "parametersJsonSchema": t.Parameters}
	}
	return map[string]catalogFormatter{
		"native": perTool(func(t *registry.Tool) any { return &t.Definition }),
		"openai": perTool(func(t *registry.Tool) any {
			return map[string]any{"type": "function", "function": map[string]any{
				"name": t.Name, "description": t.Description, "parameters": t.Parameters}}
		}),
		"openai-responses": perTool(func(t *registry.Tool) any {
			return map[string]any{"type": "function", "name": t.Name, "description": t.Description, "parameters": t.Parameters, "strict": false}
		}),
		"anthropic": perTool(func(t *registry.Tool) any {
			return map[string]any{"name": t.Name, "description": t.Description, "input_schema": t.Parameters}
		}),
		// Gemini groups function declarations in one Tool.
		"gemini": {one: gemini, list: func(ts []*registry.Tool) any {
			decls := make([]any, len(ts))
			for i, t := range ts {
				decls[i] = gemini(t)
			}
			return []any{map[string]any{"functionDeclarations": decls}}
		}},
		"mcp": perTool(func(t *registry.Tool) any {
			return map[string]any{"name": t.Name, "description": t.Description, "inputSchema": t.Parameters, "annotations": mcpAnnotations(t)}
		}),
	}
}

func catalogFormat(name string) (catalogFormatter, error) {
	if name == "" {
		name = "native"
	}
	f, ok := catalogFormats()[name]
	if !ok {
		return catalogFormatter{}, errBadRequest("invalid_parameter", fmt.Sprintf("format %q is not one of native, openai, openai-responses, anthropic, gemini, mcp", name))
	}
	return f, nil
}

// mcpAnnotations are the tool's own hints, with what the tier implies
// filled in where the tool says nothing.
func mcpAnnotations(t *registry.Tool) registry.Annotations {
	var a registry.Annotations
	if t.Annotations != nil {
		a = *t.Annotations
	}
	yes, no := true, false
	if a.ReadOnlyHint == nil {
		if t.Tier == registry.ReadOnly {
			a.ReadOnlyHint = &yes
		} else {
			a.ReadOnlyHint = &no
		}
	}
	if a.DestructiveHint == nil && t.Tier != registry.ReadOnly {
		d := t.Tier == registry.Privileged
		a.DestructiveHint = &d
	}
	return a
}

// resultFormats lists the ?format= values of POST /calls.
func resultFormat(name string) (func(*registry.Result) any, error) {
	switch name {
	case "", "native":
		return func(r *registry.Result) any { return r }, nil
	case "openai":
		return func(r *registry.Result) any {
			return map[string]any{"role": "tool", "tool_call_id": r.ToolCallID, "content": renderText(r)}
		}, nil
	case "anthropic":
		return func(r *registry.Result) any {
			return map[string]any{"type": "tool_result", "tool_use_id": r.ToolCallID, "content": renderText(r), "is_error": r.Status == registry.StatusError}
		}, nil
	case "mcp":
		return func(r *registry.Result) any {
			out := map[string]any{"content": []any{map[string]any{"type": "text", "text": renderText(r)}}, "isError": r.Status == registry.StatusError}
			if r.Status == registry.StatusOK && len(r.Output) > 0 && r.Output[0] == '{' {
				out["structuredContent"] = r.Output
			}
			return out
		}, nil
	}
	return nil, errBadRequest("invalid_parameter", fmt.Sprintf("format %q is not one of native, openai, anthropic, mcp", name))
}

// renderText renders a result as the text a model reads: a string output
// as it is, any other output as JSON, an error with its code, message,
// suggestion and details.
func renderText(r *registry.Result) string {
	switch r.Status {
	case registry.StatusOK:
		var s string
		if json.Unmarshal(r.Output, &s) == nil {
			return s
		}
		return string(r.Output)
	case registry.StatusPendingApproval:
		msg := "This call is waiting for human approval and has not run."
		if r.Approval != nil {
			msg += fmt.Sprintf(" Approval id %s expires at %s.", r.Approval.ID, r.Approval.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z"))
		}
		return msg + " Do not repeat it with other arguments; tell the user it awaits approval."
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
