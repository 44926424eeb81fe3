package registry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"regexp/syntax"
	"slices"
	"sort"
	"strconv"
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
	// The guard is a format on the root (a copy: the schema served is
	// raw), since a format is checked before any member or item is.
	// Formats apply to strings, so none at an object's root is lost.
	obj["format"] = patternGuardFormat
	g := &patternGuard{}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	c.UseRegexpEngine(compilePattern)
	c.RegisterFormat(&jsonschema.Format{Name: patternGuardFormat, Validate: g.check})
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%s schema: %w", what, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("%s schema: %w", what, err)
	}
	if err := g.init(sch); err != nil {
		return nil, fmt.Errorf("%s schema: %w", what, err)
	}
	if !g.patterned[sch] {
		// No pattern to bound: the validator need not call the guard at
		// all (a call on every validation of every such schema).
		sch.Format = nil
	}
	return sch, nil
}

// Patterns. Go's regexp takes time linear in its input, but times the
// size of the pattern's program: a counted repetition such as [a-z]{0,1000}
// compiles to 2,000 instructions, all of which can be live at every byte.
// 1 MB of "a" against [a-z]{0,1000}[0-9]{0,1000}X took 15 to 57 s of CPU,
// uninterruptibly (validation is not bounded by the call's timeout), and
// ran though maxLength 100 had failed already; 10,000 strings of 100
// characters, 3 s. So the work is bounded before it starts: the patterns
// of a schema are measured at load, and every validation first adds up
// the bytes of its strings times the instructions of the patterns that
// can apply to each, and fails if that is over maxPatternWork.
const (
	// maxPatternWork bounds the bytes times instructions of one
	// validation's pattern matching: at the worst measured, 7 to 10 ns
	// each, about 0.3 s. It lets a pattern as large as an IPv6 address's
	// (965 instructions) check 34,000 characters, an email address's (13)
	// 2.5 MB.
	maxPatternWork = 32 << 20
	// maxPatternProgram bounds one pattern's instructions at load, so that
	// any pattern can check a string of 4 KiB.
	maxPatternProgram = maxPatternWork / (4 << 10)
	// patternGuardFormat names the format that does the adding up.
	patternGuardFormat = "toolsvc-pattern-work"
)

// measuredPattern is a compiled pattern and the size of its program.
type measuredPattern struct {
	*regexp.Regexp
	insts int
}

// compilePattern is the schemas' regexp engine: Go's, measured.
func compilePattern(s string) (jsonschema.Regexp, error) {
	re, err := regexp.Compile(s)
	if err != nil {
		return nil, err
	}
	// regexp.Compile parsed it the same way, without error.
	parsed, _ := syntax.Parse(s, syntax.Perl)
	prog, _ := syntax.Compile(parsed.Simplify())
	return &measuredPattern{Regexp: re, insts: len(prog.Inst)}, nil
}

// insts is the size of a compiled pattern's program.
func insts(re jsonschema.Regexp) int {
	if p, ok := re.(*measuredPattern); ok {
		return p.insts
	}
	return maxPatternProgram // not compiled by compilePattern: assume the worst
}

// patternGuard adds up the pattern work a validation would do, and fails
// it beforehand when that is too much.
type patternGuard struct {
	root *jsonschema.Schema
	// patterned holds the subschemas from which a pattern can be applied
	// (a pattern, patternProperties, or a subschema with them, through
	// any keyword); the others cost nothing and are not followed.
	patterned map[*jsonschema.Schema]bool
	// dynamic lists the subschemas a $dynamicRef or $recursiveRef may
	// resolve to, which depends on the path taken: all are assumed.
	dynamic []*jsonschema.Schema
}

// init measures the patterns of the compiled schema root: it refuses one
// too large to check a string of reasonable length.
func (g *patternGuard) init(root *jsonschema.Schema) error {
	all := map[*jsonschema.Schema]bool{}
	var order []*jsonschema.Schema
	var visit func(s *jsonschema.Schema)
	visit = func(s *jsonschema.Schema) {
		if s == nil || all[s] {
			return
		}
		all[s] = true
		order = append(order, s)
		for _, c := range SchemasInPlace(s) {
			visit(c)
		}
		for _, c := range SchemasBelow(s) {
			visit(c)
		}
	}
	visit(root)
	g.root = root
	g.patterned = map[*jsonschema.Schema]bool{}
	for _, s := range order {
		if s.DynamicAnchor != "" || s.RecursiveAnchor {
			g.dynamic = append(g.dynamic, s)
		}
		res := patternsOf(s)
		for _, re := range res {
			if n := insts(re); n > maxPatternProgram {
				_, at, _ := strings.Cut(s.Location, "#")
				return fmt.Errorf("the pattern %s at #%s compiles to %d instructions, more than the %d toolsvc runs (the work of matching grows with them): write bounded repetitions such as {0,1000} as * or +, and bound the length with maxLength", clipValue(re.String()), at, n, maxPatternProgram)
			}
		}
		g.patterned[s] = len(res) > 0
	}
	// A subschema is patterned if one it leads to is: repeat until no
	// more are found (the graph may have cycles).
	for changed := true; changed; {
		changed = false
		for _, s := range order {
			if g.patterned[s] {
				continue
			}
			for _, c := range append(append(SchemasInPlace(s), SchemasBelow(s)...), g.dynamicTargets(s)...) {
				if g.patterned[c] {
					g.patterned[s], changed = true, true
					break
				}
			}
		}
	}
	if g.patterned[root] && (root.Format == nil || root.Format.Name != patternGuardFormat) {
		// Before draft 2019, a $ref hides the keywords beside it.
		return errors.New(`its root has a $ref, which hides the root's other keywords before draft 2019-09, and toolsvc needs one there to bound the work of the schema's patterns: declare "$schema": "https://json-schema.org/draft/2020-12/schema" or move the $ref into allOf`)
	}
	return nil
}

// patternsOf returns the patterns s itself applies: pattern, to a string,
// and patternProperties, to member names.
func patternsOf(s *jsonschema.Schema) []jsonschema.Regexp {
	var res []jsonschema.Regexp
	if s.Pattern != nil {
		res = append(res, s.Pattern)
	}
	for re := range s.PatternProperties {
		res = append(res, re)
	}
	return res
}

// SchemasInPlace returns the subschemas that s applies to the value it
// validates, in a fixed order.
func SchemasInPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, k := range slices.Sorted(maps.Keys(s.DependentSchemas)) {
		out = append(out, s.DependentSchemas[k])
	}
	for _, k := range slices.Sorted(maps.Keys(s.Dependencies)) {
		if d, ok := s.Dependencies[k].(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	return slices.DeleteFunc(out, func(c *jsonschema.Schema) bool { return c == nil })
}

// SchemasBelow returns the subschemas that s applies to the members,
// member names and items of the value it validates, and to its decoded
// content, in a fixed order.
func SchemasBelow(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		out = append(out, s.Properties[k])
	}
	patterns := slices.SortedFunc(maps.Keys(s.PatternProperties), func(a, b jsonschema.Regexp) int { return strings.Compare(a.String(), b.String()) })
	for _, p := range patterns {
		out = append(out, s.PatternProperties[p])
	}
	out = append(out, s.PrefixItems...)
	for _, v := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch v := v.(type) {
		case *jsonschema.Schema:
			out = append(out, v)
		case []*jsonschema.Schema:
			out = append(out, v...)
		}
	}
	return slices.DeleteFunc(out, func(c *jsonschema.Schema) bool { return c == nil })
}

// dynamicTargets returns what a $dynamicRef or $recursiveRef of s may
// resolve to besides its static target.
func (g *patternGuard) dynamicTargets(s *jsonschema.Schema) []*jsonschema.Schema {
	if s.RecursiveRef != nil || s.DynamicRef != nil {
		return g.dynamic
	}
	return nil
}

// closure returns the patterned subschemas that the schemas of set apply
// to one value, set's among them.
func (g *patternGuard) closure(set []*jsonschema.Schema) []*jsonschema.Schema {
	seen := map[*jsonschema.Schema]bool{}
	var out []*jsonschema.Schema
	for len(set) > 0 {
		s := set[len(set)-1]
		set = set[:len(set)-1]
		if seen[s] || !g.patterned[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
		set = append(set, SchemasInPlace(s)...)
		set = append(set, g.dynamicTargets(s)...)
	}
	return out
}

// check is the guard's format: v is the value the root applies to (the
// arguments, or a part of them the root applies to again through a $ref).
func (g *patternGuard) check(v any) error {
	if g.root == nil || !g.patterned[g.root] {
		return nil // no pattern to apply
	}
	w := patternWork{g: g}
	w.value(v, []*jsonschema.Schema{g.root}, nil)
	if w.total <= maxPatternWork {
		return nil
	}
	return w.err()
}

// patternWork adds up the pattern work of one validation.
type patternWork struct {
	g     *patternGuard
	total int
	// worst is the string of the most work.
	worst struct {
		path  []string
		s     string
		work  int
		re    jsonschema.Regexp // the largest of its patterns
		count int               // how many patterns apply to it
		max   int               // its smallest maxLength, or -1
		name  bool              // a member name of the value at path
	}
	strings int // how many strings have patterns to match
}

// value adds the work of the patterns that the schemas of set, and those
// they apply in place, would match against v and its members and items.
// It stops adding once the total is over the bound.
func (w *patternWork) value(v any, set []*jsonschema.Schema, path []string) {
	if w.total > maxPatternWork {
		return
	}
	set = w.g.closure(set)
	if len(set) == 0 {
		return
	}
	switch v := v.(type) {
	case string:
		w.str(v, set, ownPattern, path)
	case map[string]any:
		// A name is matched against patternProperties, and is a value
		// to propertyNames.
		// In order, so that the same arguments get the same message.
		names := w.g.closure(propertyNames(set))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			w.name(k, set, names, path)
			w.value(v[k], members(set, k), append(path, k))
		}
	case []any:
		for i, m := range v {
			w.value(m, items(set, i), append(path, strconv.Itoa(i)))
		}
	}
}

// name adds the work of matching the member name k against the
// patternProperties of set and the patterns of names (propertyNames).
func (w *patternWork) name(k string, set, names []*jsonschema.Schema, path []string) {
	before := w.worst.work
	w.str(k, set, namePatterns, path)
	w.str(k, names, ownPattern, path)
	if w.worst.work != before {
		w.worst.name = true
	}
}

// str adds the work of matching s against the patterns that of returns
// for each schema of set.
func (w *patternWork) str(s string, set []*jsonschema.Schema, of func(*jsonschema.Schema) []jsonschema.Regexp, path []string) {
	work, count, maxLen := 0, 0, -1
	var largest jsonschema.Regexp
	for _, sch := range set {
		for _, re := range of(sch) {
			n := insts(re)
			work += len(s) * n
			count++
			if largest == nil || n > insts(largest) {
				largest = re
			}
		}
		if sch.MaxLength != nil && (maxLen < 0 || *sch.MaxLength < maxLen) {
			maxLen = *sch.MaxLength
		}
	}
	if count == 0 {
		return
	}
	w.total += work
	w.strings++
	if work > w.worst.work {
		w.worst.path, w.worst.s, w.worst.work, w.worst.re, w.worst.count, w.worst.max = slices.Clone(path), s, work, largest, count, maxLen
		w.worst.name = false
	}
}

func ownPattern(s *jsonschema.Schema) []jsonschema.Regexp {
	if s.Pattern == nil {
		return nil
	}
	return []jsonschema.Regexp{s.Pattern}
}

func namePatterns(s *jsonschema.Schema) []jsonschema.Regexp {
	return slices.Collect(maps.Keys(s.PatternProperties))
}

func propertyNames(set []*jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, s := range set {
		if s.PropertyNames != nil {
			out = append(out, s.PropertyNames)
		}
	}
	return out
}

// members returns the subschemas that set applies to its member k
// (all of patternProperties, matching or not: this is a bound).
func members(set []*jsonschema.Schema, k string) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, s := range set {
		if c := s.Properties[k]; c != nil {
			out = append(out, c)
		}
		for _, c := range s.PatternProperties {
			out = append(out, c)
		}
		if c, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
			out = append(out, c)
		}
		if s.UnevaluatedProperties != nil {
			out = append(out, s.UnevaluatedProperties)
		}
	}
	return out
}

// items returns the subschemas that set applies to its item i.
func items(set []*jsonschema.Schema, i int) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	for _, s := range set {
		if i < len(s.PrefixItems) {
			out = append(out, s.PrefixItems[i])
		}
		switch it := s.Items.(type) {
		case *jsonschema.Schema:
			out = append(out, it)
		case []*jsonschema.Schema:
			if i < len(it) {
				out = append(out, it[i])
			}
		}
		if c, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			out = append(out, c)
		}
		for _, c := range []*jsonschema.Schema{s.Items2020, s.Contains, s.UnevaluatedItems} {
			if c != nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// patternWorkError is the guard's failure: what, at path below the value
// checked, is too long to match against the schema's patterns.
type patternWorkError struct {
	path []string
	msg  string
}

func (e *patternWorkError) Error() string { return e.msg }

// err says which string is too long to check, or, if none is alone,
// that the strings are too many.
func (w *patternWork) err() error {
	worst := w.worst
	chars := utf8.RuneCountInString(worst.s)
	if worst.work <= maxPatternWork {
		return &patternWorkError{msg: fmt.Sprintf("the strings are more than toolsvc checks against the schema's patterns in one call (the first %d, the longest %d characters at %s, are too many already): send fewer or shorter strings",
			w.strings, chars, cmp.Or(jsonPointer(worst.path), "the root"))}
	}
	against := "the pattern " + clipValue(worst.re.String())
	if worst.count > 1 {
		against = fmt.Sprintf("its %d patterns", worst.count)
	}
	room := maxPatternWork / max(worst.work/len(worst.s), 1)
	if worst.name {
		return &patternWorkError{path: worst.path, msg: fmt.Sprintf("has a member name %d characters long, too long to check against %s (toolsvc checks at most about %d characters against it in one call): use a shorter name", chars, against, room)}
	}
	if worst.max >= 0 && chars > worst.max {
		return &patternWorkError{path: worst.path, msg: fmt.Sprintf("is %d characters long, more than its maxLength %d, and too long to check against %s: send at most %d characters", chars, worst.max, against, worst.max)}
	}
	return &patternWorkError{path: worst.path, msg: fmt.Sprintf("is %d characters long, too long to check against %s (toolsvc checks at most about %d characters against it in one call): send a shorter string", chars, against, room)}
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
	if f, ok := ve.ErrorKind.(*kind.Format); ok {
		var pw *patternWorkError
		if errors.As(f.Err, &pw) {
			// Said of the string too long, not of the value checked.
			path := jsonPointer(append(slices.Clone(ve.InstanceLocation), pw.path...))
			return []violation{{Detail{Path: path, Message: pw.msg}, ve.ErrorKind}}
		}
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
