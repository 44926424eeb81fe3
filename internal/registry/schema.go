package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

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

// maxDetailMessage bounds each detail's message, in characters: a value,
// a pattern or an enum of the schema can be any size, and every detail
// reaches the model.
const maxDetailMessage = 400

// maxListed is how many enum values or member names a message lists
// before it counts the rest.
const maxListed = 10

// validationError turns a schema validation failure into an
// E_INVALID_ARGUMENTS error a model can act on.
func validationError(t *Tool, err error) *Error {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return &Error{Code: CodeInvalidArguments, Message: err.Error(), Suggestion: t.suggestion()}
	}
	var details []Detail
	collectViolations(message.NewPrinter(language.English), ve, &details)
	if t.ErrorMessageLimit > 0 && t.ErrorMessageLimit < maxDetailMessage {
		for i := range details {
			details[i].Message = truncateMessage(details[i].Message, t.ErrorMessageLimit)
		}
	}
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

// collectViolations appends what is wrong by ve to out, each message cut
// to maxDetailMessage characters.
func collectViolations(p *message.Printer, ve *jsonschema.ValidationError, out *[]Detail) {
	for _, v := range violations(p, ve) {
		*out = append(*out, Detail{Path: v.Path, Message: truncateMessage(v.Message, maxDetailMessage)})
	}
}

// violation is a detail and the kind of failure it describes.
type violation struct {
	Detail
	kind jsonschema.ErrorKind
}

// violations returns what is wrong, one violation per failed keyword,
// except that a choice (anyOf, oneOf) no alternative matched is one
// violation saying what each alternative lacks: listed side by side, the
// alternatives' failures would each read as a requirement.
func violations(p *message.Printer, ve *jsonschema.ValidationError) []violation {
	switch k := ve.ErrorKind.(type) {
	case *kind.AnyOf:
		if len(ve.Causes) > 0 {
			return []violation{choice(p, ve)}
		}
	case *kind.OneOf:
		if len(k.Subschemas) == 0 && len(ve.Causes) > 0 {
			return []violation{choice(p, ve)}
		}
	}
	if len(ve.Causes) > 0 {
		var out []violation
		for _, c := range ve.Causes {
			out = append(out, violations(p, c)...)
		}
		return out
	}
	msg := truncateMessage(describe(p, ve.ErrorKind), maxDetailMessage)
	return []violation{{Detail{Path: jsonPointer(ve.InstanceLocation), Message: msg}, ve.ErrorKind}}
}

// choice describes a choice none of whose alternatives (ve's causes, one
// each) matched.
func choice(p *message.Printer, ve *jsonschema.ValidationError) violation {
	path := jsonPointer(ve.InstanceLocation)
	alts := make([][]violation, len(ve.Causes))
	// Alternatives that differ only in type read as one expectation.
	onlyTypes := true
	var types []string
	got := ""
	for i, c := range ve.Causes {
		alt := violations(p, c)
		sort.SliceStable(alt, func(a, b int) bool { return alt[a].Path < alt[b].Path })
		alts[i] = alt
		t, isType := alt[0].kind.(*kind.Type)
		if !isType || len(alt) > 1 || alt[0].Path != path {
			onlyTypes = false
			continue
		}
		for _, w := range t.Want {
			if !slices.Contains(types, w) {
				types = append(types, w)
			}
		}
		got = t.Got
	}
	if onlyTypes {
		return violation{Detail{Path: path, Message: "expected " + strings.Join(types, " or ") + ", got " + got}, ve.ErrorKind}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "must match one of %d alternatives: ", len(alts))
	for i, alt := range alts {
		if i > 0 {
			b.WriteString("; or ")
		}
		fmt.Fprintf(&b, "(%d) ", i+1)
		for j, v := range alt {
			if j > 0 {
				b.WriteString(" and ")
			}
			if v.Path != path {
				b.WriteString("at " + v.Path + ": ")
			}
			b.WriteString(v.Message)
		}
		if b.Len() > 4*maxDetailMessage {
			break // cut anyway; the rest would only be thrown away
		}
	}
	return violation{Detail{Path: path, Message: b.String()}, ve.ErrorKind}
}

func describe(printer *message.Printer, k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Required:
		return "missing required " + plural(len(k.Missing), "property", "properties") + " " + quoteAll(k.Missing)
	case *kind.Type:
		return "expected " + strings.Join(k.Want, " or ") + ", got " + k.Got
	case *kind.AdditionalProperties:
		return "unknown " + plural(len(k.Properties), "property", "properties") + " " + quoteAll(slices.Sorted(slices.Values(k.Properties))) + " (not in the schema)"
	case *kind.Enum:
		return "expected " + oneOf(k.Want)
	case *kind.Const:
		return "expected " + clipValue(k.Want)
	case *kind.Pattern:
		return clipValue(k.Got) + " does not match the pattern " + clipValue(k.Want)
	case *kind.Format:
		return fmt.Sprintf("%s is not a valid %s: %v", clipValue(k.Got), k.Want, k.Err)
	case *kind.OneOf:
		if len(k.Subschemas) == 2 {
			return fmt.Sprintf("matches alternatives %d and %d, but must match exactly one", k.Subschemas[0]+1, k.Subschemas[1]+1)
		}
	case *kind.Not:
		return "matches a schema it must not match (not)"
	case *kind.FalseSchema:
		return "not allowed here"
	}
	if l, ok := k.(interface{ LocalizedString(*message.Printer) string }); ok {
		return l.LocalizedString(printer)
	}
	return fmt.Sprint(k)
}

// oneOf lists the values of an enum, or, for a long one, how many there
// are and the first few.
func oneOf(values []any) string {
	want := make([]string, 0, min(len(values), maxListed))
	n := 0
	for _, v := range values {
		s := clipValue(v)
		if len(want) == maxListed || len(want) > 0 && n+len(s) > maxDetailMessage/2 {
			return fmt.Sprintf("one of %d values, e.g. %s …", len(values), strings.Join(want, ", "))
		}
		want = append(want, s)
		n += len(s) + 2
	}
	return "one of " + strings.Join(want, ", ")
}

// clipValue renders a value of the arguments or the schema as JSON, cut
// to a few dozen characters (a string inside its quotes).
func clipValue(v any) string {
	const limit = 60
	if s, ok := v.(string); ok && utf8.RuneCountInString(s) > limit-2 {
		v = string([]rune(s)[:limit-3]) + "…" // with its quotes, limit
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return fmt.Sprint(v)
	}
	s := strings.TrimSuffix(buf.String(), "\n")
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	return string([]rune(s)[:limit-1]) + "…"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// quoteAll lists member names, the first maxListed of many.
func quoteAll(names []string) string {
	q := make([]string, 0, min(len(names), maxListed))
	for _, n := range names[:min(len(names), maxListed)] {
		q = append(q, "'"+n+"'")
	}
	if more := len(names) - len(q); more > 0 {
		q = append(q, fmt.Sprintf("and %d more", more))
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
