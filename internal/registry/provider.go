package registry

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// ProviderParameters returns the tool's parameters in the form the model
// APIs of OpenAI (Chat Completions, and Responses without strict mode)
// and Anthropic take, computed once. Both refuse some JSON Schema that
// toolsvc validates:
//
//   - OpenAI refuses allOf, anyOf, oneOf, not and enum at the root, and
//     Anthropic allOf, anyOf and oneOf. The form drops them, with const:
//     the properties their branches declare (through a local $ref, one
//     level) join the root's properties where it lacks that name (as an
//     anyOf when branches disagree), and the required of each allOf
//     branch joins the root's required (an anyOf or oneOf branch's does
//     not: it holds only on that branch).
//   - Anthropic takes only draft 2020-12. A schema of an earlier draft
//     (its $schema says so) has the keywords whose meaning changed written
//     as 2020-12 says them, in every subschema: draft-04's boolean
//     exclusiveMaximum and exclusiveMinimum, items as a list (prefixItems)
//     and additionalItems (items), dependencies (dependentRequired and
//     dependentSchemas), id ($id, or $anchor for a fragment), 2019-09's
//     $recursiveRef; $schema itself is left out.
//
// The form is looser where it drops a keyword that only narrows; the
// executor still validates every call against the tool's own schema. A
// schema that needs none of this is the tool's own bytes.
func (t *Tool) ProviderParameters() json.RawMessage {
	if t.provider == nil {
		return providerForm(t.Parameters)
	}
	return t.provider()
}

// The drafts a $schema may name, by year or number.
const (
	draft4    = 4
	draft6    = 6
	draft7    = 7
	draft2019 = 2019
	draft2020 = 2020
)

// drafts maps a $schema, without scheme and trailing '#', to its draft.
var drafts = map[string]int{
	"json-schema.org/draft-04/schema":      draft4,
	"json-schema.org/draft-06/schema":      draft6,
	"json-schema.org/draft-07/schema":      draft7,
	"json-schema.org/draft/2019-09/schema": draft2019,
	"json-schema.org/draft/2020-12/schema": draft2020,
}

// rootRefused are the root keywords a provider refuses.
var rootRefused = []string{"allOf", "anyOf", "oneOf", "not", "enum", "const"}

// providerKeywords are, quoted, the keywords without which a schema's
// provider form is the schema itself: those of rootRefused and $schema
// (only a schema that names its draft can be of an older one); and \u,
// which could spell one.
var providerKeywords = []string{`"allOf"`, `"anyOf"`, `"oneOf"`, `"not"`, `"enum"`, `"const"`, `"$schema"`, `\u`}

// providerFunc returns the computation of params' provider form, for
// sync.OnceValue.
func providerFunc(params json.RawMessage) func() json.RawMessage {
	return func() json.RawMessage { return providerForm(params) }
}

func providerForm(params json.RawMessage) json.RawMessage {
	// Most schemas name none of the keywords at stake: no need to decode.
	if !slices.ContainsFunc(providerKeywords, func(k string) bool { return bytes.Contains(params, []byte(k)) }) {
		return params
	}
	doc, err := decodeOrdered(params)
	if err != nil {
		return params
	}
	root, ok := doc.(*orderedObject)
	if !ok {
		return params
	}
	changed := upgrade(root, draft2020)
	if flattenRoot(root) {
		changed = true
	}
	if !changed {
		return params
	}
	b, err := marshalOrdered(root)
	if err != nil {
		return params
	}
	return b
}

// The keywords that hold subschemas: one schema, a list of them, a map of
// them (dependencies: also lists of names, which are skipped).
var (
	oneSubschema = []string{"additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not",
		"if", "then", "else", "unevaluatedItems", "unevaluatedProperties", "contentSchema"}
	listSubschemas = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	mapSubschemas  = []string{"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}
)

// upgrade rewrites schema v, written in draft (unless its $schema says
// otherwise), and its subschemas in draft 2020-12's words, and reports
// whether it changed anything.
func upgrade(v any, draft int) bool {
	o, ok := v.(*orderedObject)
	if !ok {
		return false
	}
	changed := false
	if s, ok := o.get("$schema"); ok {
		uri, _ := s.(string)
		uri = strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(uri, "https://"), "http://"), "#")
		if d, known := drafts[uri]; known {
			draft = d
		}
		if draft < draft2020 {
			o.del("$schema")
			changed = true
		}
	}
	if draft < draft2020 && upgradeKeywords(o, draft) {
		changed = true
	}
	for _, k := range oneSubschema {
		if upgrade(o.m[k], draft) {
			changed = true
		}
	}
	for _, k := range listSubschemas {
		list, _ := o.m[k].([]any)
		for _, s := range list {
			if upgrade(s, draft) {
				changed = true
			}
		}
	}
	for _, k := range mapSubschemas {
		m, _ := o.m[k].(*orderedObject)
		for _, name := range m.keyList() {
			if upgrade(m.m[name], draft) {
				changed = true
			}
		}
	}
	return changed
}

// upgradeKeywords rewrites the keywords of o (not its subschemas) whose
// meaning changed between draft and 2020-12.
func upgradeKeywords(o *orderedObject, draft int) bool {
	changed := false
	if draft == draft4 {
		for _, pair := range [][2]string{{"exclusiveMaximum", "maximum"}, {"exclusiveMinimum", "minimum"}} {
			excl, bound := pair[0], pair[1]
			flag, ok := o.lookup(excl).(bool)
			if !ok {
				continue
			}
			// true makes the bound exclusive; false, or true without a
			// bound, says nothing.
			if n, hasBound := o.get(bound); flag && hasBound {
				o.set(excl, n)
				o.del(bound)
			} else {
				o.del(excl)
			}
			changed = true
		}
	}
	idKey := "$id"
	if draft == draft4 {
		idKey = "id"
	}
	if draft <= draft7 && upgradeID(o, idKey) {
		changed = true
	}
	if items, ok := o.get("items"); ok {
		if _, isList := items.([]any); isList {
			o.rename("items", "prefixItems")
			o.rename("additionalItems", "items")
			changed = true
		}
	}
	if o.has("additionalItems") {
		// Beside items as one schema (or none) it never applied.
		o.del("additionalItems")
		changed = true
	}
	if deps, ok := o.get("dependencies"); ok {
		if m, isMap := deps.(*orderedObject); isMap {
			required, schemas := &orderedObject{}, &orderedObject{}
			for _, name := range m.keys {
				if _, isList := m.m[name].([]any); isList {
					required.set(name, m.m[name])
				} else {
					schemas.set(name, m.m[name])
				}
			}
			for _, split := range []struct {
				k    string
				part *orderedObject
			}{{"dependentRequired", required}, {"dependentSchemas", schemas}} {
				k, part := split.k, split.part
				if len(part.keys) == 0 {
					continue
				}
				if have, ok := o.lookup(k).(*orderedObject); ok {
					for _, name := range part.keys {
						if !have.has(name) {
							have.set(name, part.m[name])
						}
					}
				} else {
					o.set(k, part)
				}
			}
		}
		o.del("dependencies")
		changed = true
	}
	if o.has("$recursiveRef") {
		// Without $recursiveAnchor to extend it, it is a plain $ref.
		o.rename("$recursiveRef", "$ref")
		changed = true
	}
	if o.has("$recursiveAnchor") {
		o.del("$recursiveAnchor")
		changed = true
	}
	return changed
}

// anchorName is what 2020-12 takes as an $anchor.
var anchorName = regexp.MustCompile(`^[A-Za-z_][-A-Za-z0-9._]*$`)

// upgradeID rewrites an identifier (key: draft-04's id, or $id) as
// 2020-12's $id, which has no fragment, and $anchor for a plain-name
// fragment.
func upgradeID(o *orderedObject, key string) bool {
	id, ok := o.lookup(key).(string)
	if !ok {
		return false
	}
	base, fragment, _ := strings.Cut(id, "#")
	if key == "$id" && base == id {
		return false
	}
	if base != "" {
		o.rename(key, "$id")
		o.set("$id", base)
	} else {
		o.del(key)
	}
	if fragment != "" && anchorName.MatchString(fragment) && !o.has("$anchor") {
		o.set("$anchor", fragment)
	}
	return true
}

// flattenRoot drops the keywords providers refuse at the root, keeping
// what their branches declare, and reports whether there were any.
func flattenRoot(root *orderedObject) bool {
	if !slices.ContainsFunc(rootRefused, root.has) {
		return false
	}
	props, _ := root.lookup("properties").(*orderedObject)
	if props == nil {
		props = &orderedObject{}
	}
	required, _ := root.lookup("required").([]any)
	// candidates are the schemas branches give each name the root lacks,
	// in the order met.
	var names []string
	candidates := map[string][]any{}
	seen := map[string]map[string]bool{}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		list, _ := root.lookup(k).([]any)
		for _, b := range list {
			for _, s := range branchSchemas(root, b) {
				bp, _ := s.lookup("properties").(*orderedObject)
				for _, name := range bp.keyList() {
					if props.has(name) {
						continue
					}
					enc, err := marshalOrdered(bp.m[name])
					if err != nil || seen[name][string(enc)] {
						continue
					}
					if seen[name] == nil {
						seen[name] = map[string]bool{}
						names = append(names, name)
					}
					seen[name][string(enc)] = true
					candidates[name] = append(candidates[name], bp.m[name])
				}
				if k != "allOf" {
					continue
				}
				r, _ := s.lookup("required").([]any)
				for _, n := range r {
					if !slices.Contains(required, n) {
						required = append(required, n)
					}
				}
			}
		}
	}
	for _, name := range names {
		if c := candidates[name]; len(c) == 1 {
			props.set(name, c[0])
		} else {
			props.set(name, &orderedObject{keys: []string{"anyOf"}, m: map[string]any{"anyOf": c}})
		}
	}
	if len(props.keys) > 0 {
		root.set("properties", props)
	}
	if len(required) > 0 {
		root.set("required", required)
	}
	for _, k := range rootRefused {
		root.del(k)
	}
	return true
}

// branchSchemas returns branch b and, when it is a local $ref, what it
// points at (one level).
func branchSchemas(root *orderedObject, b any) []*orderedObject {
	o, ok := b.(*orderedObject)
	if !ok {
		return nil
	}
	out := []*orderedObject{o}
	if ref, ok := o.get("$ref"); ok {
		if target, ok := defined(root, ref).(*orderedObject); ok {
			out = append(out, target)
		}
	}
	return out
}
