// Package jsonq provides json__query, a read-only tool that runs jq
// programs (gojq) over JSON the model supplies.
package jsonq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/itchyny/gojq"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Tools returns the jq tool.
func Tools() []*registry.Tool {
	t, f := true, false
	return []*registry.Tool{{
		Definition: registry.Definition{
			Name: "json__query",
			Description: "Run a jq program over a JSON value and return every result it produces, " +
				"e.g. program `.items[] | select(.price > 10) | .name`. Pass the data as `input` (any JSON value) " +
				"or as `inputText` (a string holding JSON). Standard jq syntax; no file, network or environment access. " +
				"Returns {\"results\": [...], \"count\": n}.",
			Tier:       registry.ReadOnly,
			Tags:       []string{"json", "data"},
			Parameters: json.RawMessage(schema),
			OutputSchema: json.RawMessage(`{"type": "object", "required": ["results", "count"],
  "properties": {"results": {"type": "array", "description": "Every value the program produced, in order."},
    "count": {"type": "integer"}, "stopped": {"type": "string", "description": "Why the results stop early (maxResults)."}}}`),
			Annotations: &registry.Annotations{Title: "Query JSON with jq", ReadOnlyHint: &t, IdempotentHint: &t, OpenWorldHint: &f},
		},
		Handler: registry.Func(run),
	}}
}

const schema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["program"],
  "properties": {
    "program": {"type": "string", "minLength": 1, "maxLength": 10000, "description": "The jq program, e.g. \".a.b\" or \"[.[] | .id]\"."},
    "input": {"description": "The JSON value to query (any JSON). Give this or inputText."},
    "inputText": {"type": "string", "maxLength": 1048576, "description": "The JSON to query, as text. Give this or input."},
    "maxResults": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Stop after this many results (default 1000)."}
  }
}`

type args struct {
	Program    string          `json:"program"`
	Input      json.RawMessage `json:"input"`
	InputText  *string         `json:"inputText"`
	MaxResults int             `json:"maxResults"`
}

func run(ctx context.Context, req *registry.Request) (any, error) {
	var a args
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	if a.MaxResults == 0 {
		a.MaxResults = 1000
	}
	raw := []byte(a.Input)
	switch {
	case a.InputText != nil && len(a.Input) > 0:
		return nil, invalid("give either input or inputText, not both", "")
	case a.InputText != nil:
		raw = []byte(*a.InputText)
	case len(a.Input) == 0:
		raw = []byte("null")
	}
	input, err := decode(raw)
	if err != nil {
		return nil, invalid("inputText is not valid JSON: "+err.Error(), "Pass the data as `input` (a JSON value) instead of text.")
	}
	query, err := gojq.Parse(a.Program)
	if err != nil {
		return nil, invalid("program is not valid jq: "+err.Error(), "Check quoting and brackets; jq field access looks like .name or .[\"odd key\"].")
	}
	code, err := gojq.Compile(query, gojq.WithEnvironLoader(func() []string { return nil }))
	if err != nil {
		return nil, invalid("program does not compile: "+err.Error(), "")
	}
	results := []any{}
	iter := code.RunWithContext(ctx, input)
	for {
		v, ok := iter.Next()
		if !ok {
			break
		}
		if err, isErr := v.(error); isErr {
			var halt *gojq.HaltError
			if errors.As(err, &halt) && halt.Value() == nil {
				break
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, registry.ToolError("jq: "+err.Error(), "Guard optional fields with `?` or `// default`, and check the types the program expects.")
		}
		results = append(results, v)
		if len(results) == a.MaxResults {
			return map[string]any{"results": results, "count": len(results), "stopped": fmt.Sprintf("stopped after maxResults=%d", a.MaxResults)}, nil
		}
	}
	return map[string]any{"results": results, "count": len(results)}, nil
}

// decode reads JSON keeping numbers exact (gojq accepts json.Number).
func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

func invalid(msg, suggestion string) *registry.Error {
	return &registry.Error{Code: registry.CodeInvalidArguments, Message: msg, Suggestion: suggestion}
}
