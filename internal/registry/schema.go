package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// maxDetails is how many violations a result lists before "+N more".
const maxDetails = 5

// noLoader refuses every external reference: schemas are self-contained.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %q is not loaded; schemas must be self-contained", url)
}

// compileSchema compiles a tool's parameters schema: draft 2020-12 unless
// $schema says otherwise, formats asserted, no external references.
func compileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	return compileObjectSchema("parameters", "toolsvc:///tools/"+name+".json", raw)
}

// compileObjectSchema compiles a schema whose root must be type: object;
// what names it in errors ("parameters", "output").
func compileObjectSchema(what, url string, raw json.RawMessage) (*jsonschema.Schema, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, fmt.Errorf("%s schema is missing", what)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s schema is not valid JSON: %w", what, err)
	}
	obj, ok := doc.(map[string]any)
	if !ok || obj["type"] != "object" {
		return nil, fmt.Errorf(`%s schema root must have "type": "object"`, what)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%s schema: %w", what, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("%s schema: %w", what, err)
	}
	return sch, nil
}

// validationError turns a schema validation failure into an
// E_INVALID_ARGUMENTS error a model can act on.
func validationError(t *Tool, err error) *Error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Error{Code: CodeInvalidArguments, Message: err.Error(), Suggestion: t.suggestion()}
	}
	var details []Detail
	collectViolations(message.NewPrinter(language.English), ve, &details)
	sort.SliceStable(details, func(i, j int) bool { return details[i].Path < details[j].Path })
	var msg strings.Builder
	fmt.Fprintf(&msg, "arguments do not match the schema of %s: ", t.Name)
	shown := details
	if len(shown) > maxDetails {
		shown = shown[:maxDetails]
	}
	for i, d := range shown {
		if i > 0 {
			msg.WriteString("; ")
		}
		msg.WriteString(d.String())
	}
	if more := len(details) - len(shown); more > 0 {
		fmt.Fprintf(&msg, "; +%d more", more)
	}
	return &Error{Code: CodeInvalidArguments, Message: msg.String(), Suggestion: t.suggestion(), Details: shown}
}

// String renders a detail as one sentence.
func (d Detail) String() string {
	if d.Path == "" {
		return d.Message
	}
	return "at " + d.Path + ": " + d.Message
}

func collectViolations(p *message.Printer, ve *jsonschema.ValidationError, out *[]Detail) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectViolations(p, c, out)
		}
		return
	}
	*out = append(*out, Detail{Path: jsonPointer(ve.InstanceLocation), Message: describe(p, ve.ErrorKind)})
}

func describe(printer *message.Printer, k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Required:
		return "missing required " + plural(len(k.Missing), "property", "properties") + " " + quoteAll(k.Missing)
	case *kind.Type:
		return "expected " + strings.Join(k.Want, " or ") + ", got " + k.Got
	case *kind.AdditionalProperties:
		return "unknown " + plural(len(k.Properties), "property", "properties") + " " + quoteAll(k.Properties) + " (not in the schema)"
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			b, _ := json.Marshal(w)
			want[i] = string(b)
		}
		return "expected one of " + strings.Join(want, ", ")
	case *kind.FalseSchema:
		return "not allowed here"
	}
	if l, ok := k.(interface{ LocalizedString(*message.Printer) string }); ok {
		return l.LocalizedString(printer)
	}
	return fmt.Sprint(k)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "'" + n + "'"
	}
	return strings.Join(q, ", ")
}

func jsonPointer(loc []string) string {
	if len(loc) == 0 {
		return ""
	}
	var b strings.Builder
	for _, p := range loc {
		b.WriteByte('/')
		p = strings.ReplaceAll(p, "~", "~0")
		b.WriteString(strings.ReplaceAll(p, "/", "~1"))
	}
	return b.String()
}

// exampleArguments renders a call's expected shape from the schema, for the
// suggestion of E_INVALID_ARGUMENTS: required properties first, each with
// its default, first example, first enum value or a typed placeholder.
func exampleSuggestion(name string, raw json.RawMessage) string {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if json.Unmarshal(raw, &s) != nil || len(s.Properties) == 0 {
		return fmt.Sprintf("Call %s with a JSON object as arguments.", name)
	}
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	keys := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if required[keys[i]] != required[keys[j]] {
			return required[keys[i]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "Call %s with arguments like {", name)
	var optional []string
	first := true
	for _, k := range keys {
		if !required[k] {
			optional = append(optional, k)
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(": ")
		b.WriteString(placeholder(s.Properties[k]))
	}
	b.WriteString("}")
	if len(optional) > 0 {
		b.WriteString("; optional: ")
		for i, k := range optional {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(k + " (" + placeholder(s.Properties[k]) + ")")
		}
	}
	b.WriteString(".")
	return b.String()
}

func placeholder(raw json.RawMessage) string {
	var p struct {
		Type     any               `json:"type"`
		Default  json.RawMessage   `json:"default"`
		Examples []json.RawMessage `json:"examples"`
		Enum     []json.RawMessage `json:"enum"`
		Const    json.RawMessage   `json:"const"`
		Minimum  *json.Number      `json:"minimum"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return "…"
	}
	switch {
	case len(p.Const) > 0:
		return string(p.Const)
	case len(p.Enum) > 0:
		return string(p.Enum[0])
	case len(p.Examples) > 0:
		return string(p.Examples[0])
	case len(p.Default) > 0:
		return string(p.Default)
	}
	t, _ := p.Type.(string)
	if ts, ok := p.Type.([]any); ok && len(ts) > 0 {
		t, _ = ts[0].(string)
	}
	switch t {
	case "string":
		return `"<string>"`
	case "integer", "number":
		if p.Minimum != nil {
			return p.Minimum.String()
		}
		return "0"
	case "boolean":
		return "false"
	case "array":
		return "[]"
	case "object":
		return "{}"
	case "null":
		return "null"
	}
	return `"…"`
}
