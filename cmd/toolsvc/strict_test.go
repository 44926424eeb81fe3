package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// strictKeywords are the keywords OpenAI's strict mode supports: the
// generic ones, then those of strings, numbers, arrays and objects.
var strictKeywords = []string{"type", "description", "enum", "const", "anyOf", "$ref", "$defs",
	"pattern", "format",
	"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
	"items", "minItems", "maxItems",
	"properties", "required", "additionalProperties"}

var strictTypes = []string{"string", "number", "integer", "boolean", "object", "array", "null"}

var strictFormats = []string{"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}

// checkStrict lists how schema breaks OpenAI's rules for strict mode: the
// root is an object and not anyOf; every schema has a type (one, or one
// and null), an enum, a const, anyOf or $ref, and only supported
// keywords; every object lists all its properties in required and sets
// additionalProperties to false; every array says its items' schema; at
// most 10 levels of objects, 5000 properties, 1000 enum values and
// 120000 characters of names and enum values in all, and at most 15000
// characters in an enum of more than 250 values.
func checkStrict(schema json.RawMessage) []string {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil {
		return []string{"not a JSON object: " + err.Error()}
	}
	c := &strictChecker{}
	if root["type"] != "object" {
		c.fail("", "root type is %v, not object", root["type"])
	}
	if _, ok := root["anyOf"]; ok {
		c.fail("", "root is anyOf")
	}
	c.check(root, "", 0)
	if defs, ok := root["$defs"].(map[string]any); ok {
		for name, d := range defs {
			c.check(d, "/$defs/"+name, 0)
		}
	}
	if c.props > 5000 || c.enums > 1000 || c.chars > 120000 {
		c.fail("", "over the limits: %d properties, %d enum values, %d characters", c.props, c.enums, c.chars)
	}
	return c.problems
}

type strictChecker struct {
	problems            []string
	props, enums, chars int
}

func (c *strictChecker) fail(path, format string, args ...any) {
	c.problems = append(c.problems, path+": "+fmt.Sprintf(format, args...))
}

func (c *strictChecker) check(v any, path string, depth int) {
	s, ok := v.(map[string]any)
	if !ok {
		c.fail(path, "not a schema object: %v", v)
		return
	}
	for k := range s {
		if !slices.Contains(strictKeywords, k) {
			c.fail(path, "keyword %q is not supported", k)
		}
		if k == "$defs" && path != "" {
			c.fail(path, "$defs below the root")
		}
	}
	var types []string
	switch t := s["type"].(type) {
	case string:
		types = []string{t}
	case []any:
		for _, x := range t {
			types = append(types, fmt.Sprint(x))
		}
	case nil:
	default:
		c.fail(path, "type %v", t)
	}
	nonNull := slices.DeleteFunc(slices.Clone(types), func(t string) bool { return t == "null" })
	for _, t := range types {
		if !slices.Contains(strictTypes, t) {
			c.fail(path, "type %q", t)
		}
	}
	if len(nonNull) > 1 {
		c.fail(path, "several types %v", types)
	}
	_, hasAny := s["anyOf"]
	_, hasRef := s["$ref"]
	_, hasEnum := s["enum"]
	_, hasConst := s["const"]
	if len(types) == 0 && !hasAny && !hasRef && !hasEnum && !hasConst {
		c.fail(path, "no type")
	}
	if f, ok := s["format"]; ok && !slices.Contains(strictFormats, fmt.Sprint(f)) {
		c.fail(path, "format %v", f)
	}
	if e, ok := s["enum"].([]any); ok {
		c.enums += len(e)
		n := 0
		for _, x := range e {
			if str, ok := x.(string); ok {
				n += len(str)
			}
		}
		c.chars += n
		if len(e) > 250 && n > 15000 {
			c.fail(path, "an enum of %d values holds %d characters, more than 15000", len(e), n)
		}
	}
	if alts, ok := s["anyOf"].([]any); ok {
		for i, a := range alts {
			c.check(a, fmt.Sprintf("%s/anyOf/%d", path, i), depth)
		}
	}
	if slices.Contains(types, "object") {
		if depth+1 > 10 {
			c.fail(path, "objects nest deeper than 10 levels")
		}
		props, ok := s["properties"].(map[string]any)
		if !ok {
			c.fail(path, "object without properties")
		}
		if s["additionalProperties"] != false {
			c.fail(path, "additionalProperties is %v, not false", s["additionalProperties"])
		}
		var required []string
		list, _ := s["required"].([]any)
		for _, r := range list {
			required = append(required, fmt.Sprint(r))
		}
		names := slices.Sorted(maps.Keys(props))
		if !slices.Equal(slices.Sorted(slices.Values(required)), names) {
			c.fail(path, "required %v is not every property %v", required, names)
		}
		for _, k := range names {
			c.props++
			c.chars += len(k)
			c.check(props[k], path+"/properties/"+k, depth+1)
		}
	}
	if slices.Contains(types, "array") {
		items, ok := s["items"]
		if !ok {
			c.fail(path, "array without items")
		} else {
			c.check(items, path+"/items", depth)
		}
	}
}

// TestStrictCheckerHasTeeth: each rule of checkStrict catches a schema
// that breaks it.
func TestStrictCheckerHasTeeth(t *testing.T) {
	good := `{"type":"object","properties":{"a":{"type":["string","null"]}},"required":["a"],"additionalProperties":false}`
	if p := checkStrict(json.RawMessage(good)); len(p) != 0 {
		t.Fatalf("a strict schema fails: %v", p)
	}
	bad := map[string]string{
		"optional":      `{"type":"object","properties":{"a":{"type":"string"}},"required":[],"additionalProperties":false}`,
		"open":          `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`,
		"keyword":       `{"type":"object","properties":{"a":{"type":"string","maxLength":3}},"required":["a"],"additionalProperties":false}`,
		"untyped":       `{"type":"object","properties":{"a":{"description":"any"}},"required":["a"],"additionalProperties":false}`,
		"union":         `{"type":"object","properties":{"a":{"type":["string","integer"]}},"required":["a"],"additionalProperties":false}`,
		"nested open":   `{"type":"object","properties":{"a":{"type":"array","items":{"type":"object","properties":{}}}},"required":["a"],"additionalProperties":false}`,
		"format":        `{"type":"object","properties":{"a":{"type":"string","format":"uri"}},"required":["a"],"additionalProperties":false}`,
		"root anyOf":    `{"anyOf":[{"type":"object"}]}`,
		"no items":      `{"type":"object","properties":{"a":{"type":"array"}},"required":["a"],"additionalProperties":false}`,
		"default value": `{"type":"object","properties":{"a":{"type":"string","default":"x"}},"required":["a"],"additionalProperties":false}`,
	}
	for name, s := range bad {
		if len(checkStrict(json.RawMessage(s))) == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

// TestBuiltinsStrictForm: every built-in is served in strict form unless
// its schema cannot be expressed in one (said in notStrict, with why);
// every strict form passes checkStrict; and for every branch of every
// strict built-in, the smallest arguments with null for every property
// left out — what a strict-mode model sends — match the strict form, run
// with ?strict=true as an OpenAI tool call, and are refused without it.
func TestBuiltinsStrictForm(t *testing.T) {
	in := start(t, "TOOLSVC_PLAN_TOOL=true")
	var cat struct {
		Tools []struct {
			Function struct {
				Name       string          `json:"name"`
				Parameters json.RawMessage `json:"parameters"`
				Strict     *bool           `json:"strict"`
			} `json:"function"`
		}
		NotStrict []struct{ Name, Reason string }
	}
	getJSON(t, in.base+"/tools?format=openai&strict=true", &cat)
	var native struct{ Tools []catalogTool }
	getJSON(t, in.base+"/tools", &native)
	if len(cat.Tools) != len(native.Tools) || len(cat.Tools) < 15 {
		t.Fatalf("catalog: %d tools, %d native", len(cat.Tools), len(native.Tools))
	}
	// Their schemas take any JSON value (json__query's input), open maps
	// (HTTP headers) or any object (a plan step's arguments).
	wantNot := []string{"http__get", "http__post", "json__query", "plan__execute"}
	var not []string
	for _, n := range cat.NotStrict {
		not = append(not, n.Name)
		if !strings.HasPrefix(n.Reason, "the schema at /properties/") {
			t.Errorf("%s: reason %q", n.Name, n.Reason)
		}
	}
	if !slices.Equal(not, wantNot) {
		t.Errorf("not strict: %v, want %v", not, wantNot)
	}
	// Write first, so that reads, edits and deletes find their file.
	slices.SortStableFunc(native.Tools, func(a, b catalogTool) int {
		return boolInt(b.Name == "fs__write") - boolInt(a.Name == "fs__write")
	})
	strictOf := map[string]json.RawMessage{}
	for _, tl := range cat.Tools {
		f := tl.Function
		if f.Strict == nil || *f.Strict == slices.Contains(wantNot, f.Name) {
			t.Errorf("%s: strict %v", f.Name, f.Strict)
			continue
		}
		if !*f.Strict {
			continue
		}
		for _, p := range checkStrict(f.Parameters) {
			t.Errorf("%s: strict form breaks the rules: %s", f.Name, p)
		}
		strictOf[f.Name] = f.Parameters
	}
	calls := 0
	for _, tool := range native.Tools {
		strictSchema, ok := strictOf[tool.Name]
		if !ok {
			continue
		}
		strict := compile(t, tool.Name+".strict", strictSchema)
		var props struct {
			Properties map[string]json.RawMessage `json:"properties"`
		}
		_ = json.Unmarshal(tool.Parameters, &props)
		for i, args := range branches(t, tool.Name, tool.Parameters, compile(t, tool.Name+".in", tool.Parameters)) {
			nulls := 0
			for p := range props.Properties {
				if _, ok := args[p]; !ok {
					args[p] = nil
					nulls++
				}
			}
			if err := strict.Validate(toDoc(t, args)); err != nil {
				t.Errorf("%s: %v does not match the strict form: %v", tool.Name, args, err)
				continue
			}
			argText, _ := json.Marshal(args)
			body, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("call_%s_%d", tool.Name, i), "type": "function",
				"function": map[string]any{"name": tool.Name, "arguments": string(argText)}})
			calls++
			status, r := in.do("POST", "/calls?strict=true", string(body))
			if r.Status == "pending_approval" && r.Approval != nil {
				status, r = in.do("POST", "/approvals/"+r.Approval.ID, `{"decision":"approve","reason":"test"}`)
			}
			if r.code() == "E_INVALID_ARGUMENTS" || status >= 500 {
				t.Errorf("%s %s with ?strict=true: %d %s %+v", tool.Name, argText, status, r.Status, r.Error)
			}
			if nulls == 0 {
				continue
			}
			// The nulls mean something only in strict mode.
			body, _ = json.Marshal(map[string]any{"toolName": tool.Name, "arguments": args})
			if _, r := in.do("POST", "/calls", string(body)); r.code() != "E_INVALID_ARGUMENTS" {
				t.Errorf("%s %s without ?strict=true: %s %+v", tool.Name, argText, r.Status, r.Error)
			}
		}
	}
	t.Logf("%d strict calls", calls)
}
