package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// compileOutputSchema compiles a tool's output schema. Its root is an
// object, as MCP requires of outputSchema (structuredContent is an object).
func compileOutputSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	return compileObjectSchema("output", "toolsvc:///tools/"+name+".output.json", raw)
}

// HasOutputSchema reports whether the tool declares an output schema.
func (t *Tool) HasOutputSchema() bool { return t.output != nil }

// checkOutput is the pipeline step right after a tool's output is
// encoded: an output that does not match the tool's declared output schema
// is a fault of the tool (E_TOOL, not the model's arguments), logged as a
// tool bug. The encoded output is checked (one encoding, not two); an
// output over the limit is already a string cut with its marker, which no
// client reads as structured content, so it is not checked.
//
// Built-in tools are not checked at run time: their outputs are typed Go
// values whose schemas tests pin, and decoding a large output again would
// double the memory a call uses. The check is for what toolsvc does not
// write itself: exec, HTTP and MCP-bridged tools.
func (e *Executor) checkOutput(ctx context.Context, t *Tool, raw json.RawMessage, truncated bool) error {
	if t.output == nil || truncated || t.Type == "builtin" {
		return nil
	}
	if err := outputMismatch(t, raw); err != nil {
		return e.faultyOutput(ctx, t, err)
	}
	return nil
}

// faultyOutput logs err, the fault of t's output, as a tool bug and
// returns it.
func (e *Executor) faultyOutput(ctx context.Context, t *Tool, err *Error) error {
	if e.log != nil {
		e.log.ErrorContext(ctx, "tool bug: output does not match the output schema", "tool", t.Name, "type", t.Type, "source", t.Source, "error", err.Message)
	}
	return err
}

// outputMismatch returns the E_TOOL error of an output that breaks t's
// output schema, or nil.
func outputMismatch(t *Tool, raw json.RawMessage) *Error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return outputError(t, []Detail{{Message: "output is not JSON"}})
	}
	err = t.output.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return outputError(t, []Detail{{Message: err.Error()}})
	}
	var details []Detail
	collectViolations(message.NewPrinter(language.English), ve, &details)
	sort.SliceStable(details, func(i, j int) bool { return details[i].Path < details[j].Path })
	if len(details) > maxDetails {
		details = details[:maxDetails]
	}
	return outputError(t, details)
}

// outputError is the E_TOOL result of an output that breaks its schema:
// the tool is at fault, so the model is told not to change its arguments.
func outputError(t *Tool, details []Detail) *Error {
	parts := make([]string, len(details))
	for i, d := range details {
		parts[i] = d.String()
	}
	return &Error{
		Code:       CodeTool,
		Name:       t.Name,
		Message:    fmt.Sprintf("the tool %s is faulty: its output does not match its declared output schema: %s", t.Name, strings.Join(parts, "; ")),
		Suggestion: "This is a bug in the tool, not in your arguments; do not retry the same call. Tell the user the tool is broken.",
		Details:    details,
	}
}
