package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// StrictForm is a tool's parameters schema in the form OpenAI's strict
// mode (structured outputs for function calling) takes: every object
// lists all its properties in required and sets additionalProperties to
// false, an optional property is made nullable instead (a model in strict
// mode sends null for "absent"), and only the keywords strict mode
// supports are kept.
//
// The form accepts every call the tool's schema accepts, with null for an
// absent optional property, except members an object does not name when
// the schema leaves additionalProperties unstated (strict mode closes
// every object). Keywords strict mode lacks that only narrow what is
// valid (minLength, maxLength, uniqueItems, allOf, if/then/else, not, an
// unsupported format, default, examples …) are left out: the form is
// looser there, and the executor still validates every call against the
// tool's own schema. A schema the form cannot express without refusing
// valid calls — a value of any type, an object with members it does not
// name (additionalProperties true or a schema, patternProperties), a
// member that only a dropped keyword names (allOf, anyOf, oneOf,
// if/then/else, dependentSchemas of an object not closed by
// additionalProperties: false), a tuple, a recursive $ref, a type union,
// an optional property inside an anyOf branch — has no strict form;
// Reason says which part.
type StrictForm struct {
	// Parameters is the strict schema, nil when there is none.
	Parameters json.RawMessage
	// Reason says why there is no strict form ("" when there is one).
	Reason string
	// absent says which nulls stand for an absent property.
	absent *nullShape
}

// Strict returns the tool's strict form, computed once.
func (t *Tool) Strict() *StrictForm {
	if t.strict == nil {
		return strictForm(t.Parameters)
	}
	return t.strict()
}

// The limits of a strict schema, as OpenAI documents them.
const (
	strictMaxDepth      = 10
	strictMaxProperties = 5000
	strictMaxEnumValues = 1000
	strictMaxStringLen  = 120000
	// An enum of more than strictBigEnum values may hold at most
	// strictBigEnumLen characters.
	strictBigEnum    = 250
	strictBigEnumLen = 15000
)

func enumLength(values []any) int {
	n := 0
	for _, v := range values {
		if s, ok := v.(string); ok {
			n += len(s)
		}
	}
	return n
}

// strictFormats are the string formats strict mode supports.
var strictFormats = []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}

func strictForm(params json.RawMessage) *StrictForm {
	doc, err := decodeOrdered(params)
	if err != nil {
		return &StrictForm{Reason: "the schema is not JSON: " + err.Error()}
	}
	root, ok := doc.(*orderedObject)
	if !ok {
		return &StrictForm{Reason: "the schema is not an object"}
	}
	c := &strictConverter{root: root}
	out, shape, err := c.convert(root, 0, "")
	if err == nil {
		err = c.checkLimits()
	}
	if err != nil {
		return &StrictForm{Reason: err.Error()}
	}
	b, err := marshalOrdered(out)
	if err != nil {
		return &StrictForm{Reason: err.Error()}
	}
	return &StrictForm{Parameters: b, absent: shape}
}

// DropNulls returns args (an object, or a string holding one, as OpenAI
// sends them) with every null that stands for an absent optional property
// removed, so that what a strict-mode model sends validates against the
// tool's own schema. Nulls anywhere else stay, to be judged by the schema.
// Arguments that are not an object come back as they are, for the
// executor to refuse.
func (f *StrictForm) DropNulls(args json.RawMessage) json.RawMessage {
	if f == nil || f.absent == nil || f.absent.empty() {
		return args
	}
	raw := bytes.TrimSpace(args)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return args
		}
		raw = bytes.TrimSpace([]byte(s))
	}
	if len(raw) == 0 || raw[0] != '{' {
		return args
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v map[string]any
	if dec.Decode(&v) != nil {
		return args
	}
	if !f.absent.drop(v) {
		return args
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return args
	}
	return bytes.TrimSpace(buf.Bytes())
}

// nullShape mirrors the objects of a strict schema: which of their
// properties were made nullable because they are optional, and where
// nested objects are.
type nullShape struct {
	absent map[string]bool
	props  map[string]*nullShape
	items  *nullShape
}

func (s *nullShape) empty() bool {
	return s == nil || len(s.absent) == 0 && len(s.props) == 0 && s.items.empty()
}

// drop removes from v the nulls s marks absent and reports whether it
// removed any.
func (s *nullShape) drop(v any) bool {
	if s.empty() {
		return false
	}
	changed := false
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			if val == nil && s.absent[k] {
				delete(v, k)
				changed = true
			} else if child := s.props[k]; child != nil && child.drop(val) {
				changed = true
			}
		}
	case []any:
		for _, item := range v {
			if s.items.drop(item) {
				changed = true
			}
		}
	}
	return changed
}

type strictConverter struct {
	root *orderedObject
	// refs are the $refs being inlined, to refuse a recursive one.
	refs                 []string
	props, enums, strLen int
}

// notStrict is a reason a schema has no strict form, naming the part of
// the schema at fault.
func notStrict(path, format string, args ...any) error {
	where := "the schema"
	if path != "" {
		where = "the schema at " + path
	}
	return fmt.Errorf("%s %s", where, fmt.Sprintf(format, args...))
}

// convert returns the strict form of schema v (at path, depth objects
// deep) and the nulls in it that stand for absent properties.
func (c *strictConverter) convert(v any, depth int, path string) (*orderedObject, *nullShape, error) {
	o, ok := v.(*orderedObject)
	if !ok {
		if v == true {
			return nil, nil, notStrict(path, "accepts any JSON value; strict mode needs a type")
		}
		return nil, nil, notStrict(path, "is not a schema object")
	}
	if ref, ok := o.get("$ref"); ok {
		return c.inline(o, ref, depth, path)
	}
	out := &orderedObject{}
	if d, ok := o.get("description"); ok {
		if s, ok := d.(string); ok {
			out.set("description", s)
		}
	}
	types, nullable, err := schemaTypes(o, path)
	if err != nil {
		return nil, nil, err
	}
	// anyOf or oneOf beside a type only narrows it (its branches apply
	// with the type's keywords), so it is left out; without one it is the
	// shape.
	if len(types) == 0 && !nullable && (o.has("anyOf") || o.has("oneOf")) {
		return c.branches(o, out, depth, path)
	}
	if len(types) == 0 && nullable {
		out.set("type", "null")
		return out, nil, nil
	}
	enum, hasEnum := o.get("enum")
	constant, hasConst := o.get("const")
	if len(types) == 0 && !hasEnum && !hasConst {
		return nil, nil, notStrict(path, "accepts any JSON value; strict mode needs a type")
	}
	var shape *nullShape
	if len(types) == 1 {
		t := types[0]
		if nullable {
			out.set("type", []any{t, "null"})
		} else {
			out.set("type", t)
		}
		switch t {
		case "object":
			if shape, err = c.object(o, out, depth, path); err != nil {
				return nil, nil, err
			}
		case "array":
			if shape, err = c.array(o, out, depth, path); err != nil {
				return nil, nil, err
			}
		case "string":
			copyKeys(o, out, "pattern")
			if f, ok := o.get("format"); ok && slices.Contains(strictFormats, fmt.Sprint(f)) {
				out.set("format", f)
			}
		case "integer", "number":
			for _, k := range []string{"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"} {
				if n, ok := o.get(k); ok {
					if _, isNum := n.(json.Number); isNum {
						out.set(k, n)
					}
				}
			}
		}
	}
	if hasEnum {
		values, ok := enum.([]any)
		if !ok {
			return nil, nil, notStrict(path, "has an enum that is not a list")
		}
		if len(values) > strictBigEnum && enumLength(values) > strictBigEnumLen {
			return nil, nil, notStrict(path, "has an enum of %d values longer than strict mode's %d characters for an enum of more than %d", len(values), strictBigEnumLen, strictBigEnum)
		}
		c.count(values...)
		out.set("enum", slices.Clone(values))
	}
	if hasConst {
		c.count(constant)
		out.set("const", constant)
	}
	return out, shape, nil
}

// schemaTypes returns the non-null types of o and whether it allows null.
func schemaTypes(o *orderedObject, path string) ([]string, bool, error) {
	t, ok := o.get("type")
	if !ok {
		return nil, false, nil
	}
	var all []string
	switch t := t.(type) {
	case string:
		all = []string{t}
	case []any:
		for _, x := range t {
			s, ok := x.(string)
			if !ok {
				return nil, false, notStrict(path, "has a type that is not a name")
			}
			all = append(all, s)
		}
	default:
		return nil, false, notStrict(path, "has a type that is not a name")
	}
	nullable := slices.Contains(all, "null")
	types := slices.DeleteFunc(all, func(s string) bool { return s == "null" })
	if len(types) > 1 {
		return nil, false, notStrict(path, "allows several types (%s); strict mode takes one type and null", strings.Join(types, ", "))
	}
	return types, nullable, nil
}

func (c *strictConverter) object(o, out *orderedObject, depth int, path string) (*nullShape, error) {
	if depth+1 > strictMaxDepth {
		return nil, notStrict(path, "nests objects deeper than strict mode's %d levels", strictMaxDepth)
	}
	props, _ := o.get("properties")
	po, _ := props.(*orderedObject)
	extra, stated := o.get("additionalProperties")
	switch {
	case stated && extra != false:
		return nil, notStrict(path, "allows members it does not name (additionalProperties); strict mode needs every member named")
	case !stated && (po == nil || len(po.keys) == 0):
		return nil, notStrict(path, "is an object with any members; strict mode needs every member named")
	}
	for _, k := range []string{"patternProperties", "unevaluatedProperties"} {
		if v, ok := o.get(k); ok && (k == "patternProperties" || v != false) {
			return nil, notStrict(path, "allows members it does not name (%s); strict mode needs every member named", k)
		}
	}
	// Where additionalProperties is not false, the keywords strict mode
	// leaves out can let members in (unevaluatedProperties counts what
	// their branches name) or demand them; a member only they name would
	// be refused by the strict form, which closes the object.
	if extra != false {
		if err := c.namedElsewhere(o, po, path); err != nil {
			return nil, err
		}
	}
	required := map[string]bool{}
	if r, ok := o.get("required"); ok {
		list, _ := r.([]any)
		for _, name := range list {
			s, _ := name.(string)
			required[s] = true
			if po == nil || !po.has(s) {
				return nil, notStrict(path, "requires %q, which it does not declare", s)
			}
		}
	}
	shape := &nullShape{}
	outProps := &orderedObject{}
	var names []any
	if po != nil {
		for _, k := range po.keys {
			child, childShape, err := c.convert(po.m[k], depth+1, path+"/properties/"+escapePointer(k))
			if err != nil {
				return nil, err
			}
			c.props++
			c.strLen += len(k)
			if !required[k] && !nullable(child) {
				makeNullable(child)
				if shape.absent == nil {
					shape.absent = map[string]bool{}
				}
				shape.absent[k] = true
			}
			if !childShape.empty() {
				if shape.props == nil {
					shape.props = map[string]*nullShape{}
				}
				shape.props[k] = childShape
			}
			outProps.set(k, child)
			names = append(names, k)
		}
	}
	out.set("properties", outProps)
	if names == nil {
		names = []any{}
	}
	out.set("required", names)
	out.set("additionalProperties", false)
	return shape, nil
}

// droppedSubschemas are the keywords whose subschemas apply to the object
// itself and which strict mode lacks; each holds a schema, a list of them
// or a map of them (dependencies: also lists of member names).
var droppedSubschemas = []string{"allOf", "anyOf", "oneOf", "if", "then", "else", "dependentSchemas", "dependencies"}

// namedElsewhere refuses object o (its properties props) when the
// keywords strict mode drops — allOf, anyOf, oneOf, if/then/else,
// dependentSchemas, dependencies, followed through local $refs — name a
// member props do not, or let in members nobody names
// (additionalProperties, patternProperties).
func (c *strictConverter) namedElsewhere(o, props *orderedObject, path string) error {
	w := &memberWalk{root: c.root, props: props, path: path, seen: map[*orderedObject]bool{o: true}}
	return w.dropped(o, path)
}

// memberWalk looks through the dropped keywords of one object.
type memberWalk struct {
	root  *orderedObject
	props *orderedObject
	path  string
	seen  map[*orderedObject]bool
}

// dropped walks the subschemas of s's dropped keywords; at is where s is.
func (w *memberWalk) dropped(s *orderedObject, at string) error {
	for _, k := range droppedSubschemas {
		v, ok := s.get(k)
		if !ok {
			continue
		}
		where := at + "/" + k
		switch v := v.(type) {
		case []any:
			for i, b := range v {
				if err := w.branch(b, fmt.Sprintf("%s/%d", where, i)); err != nil {
					return err
				}
			}
		case *orderedObject:
			if k != "dependentSchemas" && k != "dependencies" {
				if err := w.branch(v, where); err != nil {
					return err
				}
				continue
			}
			for _, name := range v.keys {
				var err error
				if names, isList := v.m[name].([]any); isList {
					err = w.names(names, where+"/"+escapePointer(name))
				} else {
					err = w.branch(v.m[name], where+"/"+escapePointer(name))
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// branch checks one subschema that applies to the object itself.
func (w *memberWalk) branch(v any, at string) error {
	s, ok := v.(*orderedObject)
	if !ok || w.seen[s] {
		return nil
	}
	w.seen[s] = true
	if ref, ok := s.get("$ref"); ok {
		if err := w.branch(defined(w.root, ref), at); err != nil {
			return err
		}
	}
	if p, ok := s.get("properties"); ok {
		if po, ok := p.(*orderedObject); ok {
			for _, k := range po.keys {
				if err := w.name(k, at); err != nil {
					return err
				}
			}
		}
	}
	if r, ok := s.get("required"); ok {
		list, _ := r.([]any)
		if err := w.names(list, at); err != nil {
			return err
		}
	}
	if d, ok := s.get("dependentRequired"); ok {
		if do, ok := d.(*orderedObject); ok {
			for _, k := range do.keys {
				list, _ := do.m[k].([]any)
				if err := w.names(list, at); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range []string{"additionalProperties", "patternProperties"} {
		if v, ok := s.get(k); ok && v != false {
			return notStrict(w.path, "lets in members it does not name (%s at %s), which strict mode lacks", k, at)
		}
	}
	return w.dropped(s, at)
}

func (w *memberWalk) names(list []any, at string) error {
	for _, n := range list {
		if s, ok := n.(string); ok {
			if err := w.name(s, at); err != nil {
				return err
			}
		}
	}
	return nil
}

func (w *memberWalk) name(n, at string) error {
	if w.props.has(n) {
		return nil
	}
	return notStrict(w.path, "names member %q only at %s, in a keyword strict mode lacks; the strict form would refuse a member the schema accepts or requires", n, at)
}

// localRef splits a $ref into the schema's own $defs (or definitions)
// into the section and the name; ok is false for any other $ref.
func localRef(ref any) (section, name string, ok bool) {
	s, _ := ref.(string)
	for _, prefix := range []string{"#/$defs/", "#/definitions/"} {
		if rest, found := strings.CutPrefix(s, prefix); found && rest != "" && !strings.Contains(rest, "/") {
			return strings.TrimSuffix(strings.TrimPrefix(prefix, "#/"), "/"), unescapePointer(rest), true
		}
	}
	return "", "", false
}

// defined returns what a local $ref in root points at (nil for nothing).
func defined(root *orderedObject, ref any) any {
	section, name, ok := localRef(ref)
	if !ok {
		return nil
	}
	defs, _ := root.get(section)
	do, _ := defs.(*orderedObject)
	target, _ := do.get(name)
	return target
}

func (c *strictConverter) array(o, out *orderedObject, depth int, path string) (*nullShape, error) {
	if _, ok := o.get("prefixItems"); ok {
		return nil, notStrict(path, "is a tuple (prefixItems), which strict mode lacks")
	}
	items, ok := o.get("items")
	if !ok {
		return nil, notStrict(path, "is an array of any values; strict mode needs the items' type")
	}
	if _, isList := items.([]any); isList {
		return nil, notStrict(path, "is a tuple (items as a list), which strict mode lacks")
	}
	child, shape, err := c.convert(items, depth, path+"/items")
	if err != nil {
		return nil, err
	}
	out.set("items", child)
	for _, k := range []string{"minItems", "maxItems"} {
		if n, ok := o.get(k); ok {
			out.set(k, n)
		}
	}
	if shape.empty() {
		return nil, nil
	}
	return &nullShape{items: shape}, nil
}

// branches converts anyOf (or oneOf, whose branches strict mode can only
// offer as anyOf: looser, and the tool's schema still decides).
func (c *strictConverter) branches(o, out *orderedObject, depth int, path string) (*orderedObject, *nullShape, error) {
	if path == "" {
		return nil, nil, notStrict(path, "is anyOf at its root, which strict mode refuses")
	}
	key := "anyOf"
	if _, ok := o.get(key); !ok {
		key = "oneOf"
	} else if _, both := o.get("oneOf"); both {
		return nil, nil, notStrict(path, "has both anyOf and oneOf")
	}
	v, _ := o.get(key)
	list, ok := v.([]any)
	if !ok || len(list) == 0 {
		return nil, nil, notStrict(path, "has an empty %s", key)
	}
	var alts []any
	for i, b := range list {
		child, shape, err := c.convert(b, depth, fmt.Sprintf("%s/%s/%d", path, key, i))
		if err != nil {
			return nil, nil, err
		}
		if !shape.empty() {
			return nil, nil, notStrict(path, "has an optional property in an %s branch; a null there could not be told from an absent member", key)
		}
		alts = append(alts, child)
	}
	out.set("anyOf", alts)
	return out, nil, nil
}

// inline replaces a local $ref with the strict form of what it points
// at: strict mode takes $defs, but inlining keeps each use's nulls
// apart. Only references into the schema's own $defs (or definitions)
// are followed, and a recursive one has no strict form.
func (c *strictConverter) inline(o *orderedObject, ref any, depth int, path string) (*orderedObject, *nullShape, error) {
	s, _ := ref.(string)
	section, name, ok := localRef(ref)
	if !ok {
		return nil, nil, notStrict(path, "has a $ref (%s) other than one into its own $defs", s)
	}
	if slices.Contains(c.refs, s) {
		return nil, nil, notStrict(path, "refers to itself ($ref %s), which strict mode's form here cannot inline", s)
	}
	defs, _ := c.root.get(section)
	do, _ := defs.(*orderedObject)
	target, ok := do.get(name)
	if do == nil || !ok {
		return nil, nil, notStrict(path, "has a $ref (%s) to nothing", s)
	}
	c.refs = append(c.refs, s)
	out, shape, err := c.convert(target, depth, path)
	c.refs = c.refs[:len(c.refs)-1]
	if err != nil {
		return nil, nil, err
	}
	if d, ok := o.get("description"); ok {
		out.set("description", d)
	}
	return out, shape, nil
}

func (c *strictConverter) count(values ...any) {
	for _, v := range values {
		c.enums++
		if s, ok := v.(string); ok {
			c.strLen += len(s)
		}
	}
}

func (c *strictConverter) checkLimits() error {
	switch {
	case c.props > strictMaxProperties:
		return notStrict("", "has %d properties, more than strict mode's %d", c.props, strictMaxProperties)
	case c.enums > strictMaxEnumValues:
		return notStrict("", "has more than strict mode's %d enum values", strictMaxEnumValues)
	case c.strLen > strictMaxStringLen:
		return notStrict("", "has names and enum values longer than strict mode's %d characters in all", strictMaxStringLen)
	}
	return nil
}

// nullable reports whether a strict schema already allows null.
func nullable(o *orderedObject) bool {
	if alts, ok := o.get("anyOf"); ok {
		return slices.ContainsFunc(alts.([]any), func(a any) bool {
			ao, ok := a.(*orderedObject)
			return ok && nullable(ao)
		})
	}
	if t, ok := o.get("type"); ok {
		list, isList := t.([]any)
		if t != "null" && !(isList && slices.Contains(list, any("null"))) {
			return false
		}
	}
	if e, ok := o.get("enum"); ok && !slices.Contains(e.([]any), nil) {
		return false
	}
	if c, ok := o.get("const"); ok && c != nil {
		return false
	}
	return o.has("type") || o.has("enum") || o.has("const")
}

// makeNullable lets strict schema o also be null.
func makeNullable(o *orderedObject) {
	if alts, ok := o.get("anyOf"); ok {
		o.set("anyOf", append(alts.([]any), &orderedObject{keys: []string{"type"}, m: map[string]any{"type": "null"}}))
		return
	}
	switch t, _ := o.get("type"); t := t.(type) {
	case string:
		if t != "null" {
			o.set("type", []any{t, "null"})
		}
	case []any:
		// A list already naming null (its enum or const did not) stays.
		if !slices.Contains(t, any("null")) {
			o.set("type", append(slices.Clone(t), "null"))
		}
	}
	if c, ok := o.get("const"); ok {
		o.del("const")
		o.set("enum", []any{c})
	}
	if e, ok := o.get("enum"); ok {
		if list := e.([]any); !slices.Contains(list, nil) {
			o.set("enum", append(list, nil))
		}
	}
}

func copyKeys(from, to *orderedObject, keys ...string) {
	for _, k := range keys {
		if v, ok := from.get(k); ok {
			to.set(k, v)
		}
	}
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}

// orderedObject is a JSON object that keeps its members' order: a strict
// model fills properties in the order the schema gives them, and the
// schema's author chose that order.
type orderedObject struct {
	keys []string
	m    map[string]any
}

func (o *orderedObject) get(k string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.m[k]
	return v, ok
}

func (o *orderedObject) has(k string) bool { _, ok := o.get(k); return ok }

// lookup returns member k, nil when there is none.
func (o *orderedObject) lookup(k string) any { v, _ := o.get(k); return v }

// keyList returns the member names in order (none for a nil object).
func (o *orderedObject) keyList() []string {
	if o == nil {
		return nil
	}
	return o.keys
}

// rename gives member from the name to, in from's place; a member
// already called to goes.
func (o *orderedObject) rename(from, to string) {
	v, ok := o.get(from)
	if !ok || from == to {
		return
	}
	o.del(to)
	o.keys[slices.Index(o.keys, from)] = to
	delete(o.m, from)
	o.m[to] = v
}

func (o *orderedObject) set(k string, v any) {
	if o.m == nil {
		o.m = map[string]any{}
	}
	if _, ok := o.m[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.m[k] = v
}

func (o *orderedObject) del(k string) {
	if _, ok := o.m[k]; ok {
		delete(o.m, k)
		o.keys = slices.DeleteFunc(o.keys, func(s string) bool { return s == k })
	}
}

// MarshalJSON writes the members in order.
func (o *orderedObject) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		kb, err := marshalOrdered(k)
		if err != nil {
			return nil, err
		}
		buf.Write(kb)
		buf.WriteByte(':')
		vb, err := marshalOrdered(o.m[k])
		if err != nil {
			return nil, err
		}
		buf.Write(vb)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func marshalOrdered(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // descriptions are read by models
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// decodeOrdered decodes JSON, objects as *orderedObject and numbers as
// json.Number.
func decodeOrdered(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("text after the schema")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &orderedObject{m: map[string]any{}}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			k, _ := kt.(string)
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			o.set(k, v)
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token()
		return list, err
	}
	return tok, nil
}
