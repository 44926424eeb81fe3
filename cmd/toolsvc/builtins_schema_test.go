package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// samples are values for properties whose smallest schema-valid value is
// not a meaningful one (a jq program, a URL, base64 text that every text
// operation accepts, a command).
var samples = map[string]any{
	"program": ".", "url": "https://example.invalid/", "text": "aGk=", "command": "true",
	"path": "min.txt", "content": "hi", "pattern": "h", "find": "h", "oldText": "hi", "newText": "ho",
	"steps": []any{map[string]any{"tool": "text__transform", "arguments": map[string]any{"operation": "upper", "text": "a"}}},
}

type catalogTool struct {
	Name         string          `json:"name"`
	Parameters   json.RawMessage `json:"parameters"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

// TestBuiltinsMinimalArguments builds, for every built-in and every branch
// of its schema (each value of each enum member), the smallest arguments
// its schema accepts, and calls the tool with them through the real
// service: no call may fail with E_INVALID_ARGUMENTS (a requirement the
// schema does not state), and every successful output, read back as
// ?format=mcp structuredContent, must match the tool's outputSchema.
func TestBuiltinsMinimalArguments(t *testing.T) {
	in := start(t, "TOOLSVC_PLAN_TOOL=true")
	var cat struct{ Tools []catalogTool }
	getJSON(t, in.base+"/tools", &cat)
	if len(cat.Tools) < 14 {
		t.Fatalf("catalog: %d tools", len(cat.Tools))
	}
	// Write first, so that reads, edits and deletes find their file.
	slices.SortStableFunc(cat.Tools, func(a, b catalogTool) int {
		return boolInt(b.Name == "fs__write") - boolInt(a.Name == "fs__write")
	})
	calls := 0
	for _, tool := range cat.Tools {
		params := compile(t, tool.Name+".in", tool.Parameters)
		var output *jsonschema.Schema
		if len(tool.OutputSchema) > 0 {
			output = compile(t, tool.Name+".out", tool.OutputSchema)
		} else {
			t.Errorf("%s declares no outputSchema", tool.Name)
		}
		for _, args := range branches(t, tool.Name, tool.Parameters, params) {
			calls++
			body, _ := json.Marshal(map[string]any{"toolName": tool.Name, "arguments": args})
			status, r := in.do("POST", "/calls", string(body))
			if r.Status == "pending_approval" && r.Approval != nil {
				status, r = in.do("POST", "/approvals/"+r.Approval.ID, `{"decision":"approve","reason":"test"}`)
			}
			if r.code() == "E_INVALID_ARGUMENTS" || (r.code() == "E_TOOL" && strings.Contains(r.Error.Message, "output schema")) || status >= 500 {
				t.Errorf("%s %s: %d %s %+v", tool.Name, body, status, r.Status, r.Error)
				continue
			}
			if r.Status != "ok" || output == nil {
				continue
			}
			// The executor checks only the outputs of tools it does not
			// implement; a built-in's output is held to its schema here.
			if doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.Output)); err != nil {
				t.Errorf("%s: output %s: %v", tool.Name, r.Output, err)
			} else if err := output.Validate(doc); err != nil {
				t.Errorf("%s: output does not match outputSchema: %v", tool.Name, err)
			}
			var mcp struct {
				StructuredContent json.RawMessage `json:"structuredContent"`
			}
			resp, err := http.Post(in.base+"/calls?format=mcp", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_ = json.NewDecoder(resp.Body).Decode(&mcp)
			resp.Body.Close()
			if strings.HasPrefix(tool.Name, "fs__") || tool.Name == "shell__exec" {
				continue // side effects: the first run was checked above
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(mcp.StructuredContent))
			if err != nil {
				t.Errorf("%s: structuredContent %s: %v", tool.Name, mcp.StructuredContent, err)
				continue
			}
			if err := output.Validate(doc); err != nil {
				t.Errorf("%s: structuredContent does not match outputSchema: %v", tool.Name, err)
			}
		}
	}
	t.Logf("%d calls with minimal arguments", calls)
}

// branches returns the smallest arguments for each value of each enum
// member of the schema's root (one set when there is none): start from
// the required members, then add whatever the schema (its conditionals)
// still reports missing.
func branches(t *testing.T, name string, raw json.RawMessage, sch *jsonschema.Schema) []map[string]any {
	var root struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	variants := []map[string]any{{}}
	for prop, p := range root.Properties {
		var ps struct {
			Enum []any `json:"enum"`
		}
		_ = json.Unmarshal(p, &ps)
		if len(ps.Enum) > 1 && slices.Contains(root.Required, prop) {
			variants = variants[:0]
			for _, v := range ps.Enum {
				variants = append(variants, map[string]any{prop: v})
			}
			break
		}
	}
	var out []map[string]any
	for _, args := range variants {
		for _, r := range root.Required {
			if _, ok := args[r]; !ok {
				args[r] = smallest(t, name, r, root.Properties[r])
			}
		}
		for range 5 {
			err := sch.Validate(toDoc(t, args))
			if err == nil {
				break
			}
			missing := missingMembers(err)
			if len(missing) == 0 {
				t.Errorf("%s: no arguments found for branch %v: %v", name, args, err)
				break
			}
			for _, m := range missing {
				args[m] = smallest(t, name, m, root.Properties[m])
			}
		}
		out = append(out, args)
	}
	return out
}

func smallest(t *testing.T, tool, prop string, raw json.RawMessage) any {
	if v, ok := samples[prop]; ok {
		return v
	}
	var s struct {
		Type    any   `json:"type"`
		Enum    []any `json:"enum"`
		Minimum *int  `json:"minimum"`
	}
	_ = json.Unmarshal(raw, &s)
	switch {
	case len(s.Enum) > 0:
		return s.Enum[0]
	case s.Type == "integer" || s.Type == "number":
		if s.Minimum != nil {
			return *s.Minimum
		}
		return 0
	case s.Type == "boolean":
		return false
	case s.Type == "array":
		return []any{}
	case s.Type == "object":
		return map[string]any{}
	case s.Type == "string":
		return "x"
	}
	t.Errorf("%s: no smallest value for %s (%s)", tool, prop, raw)
	return nil
}

func missingMembers(err error) []string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return nil
	}
	var out []string
	var walk func(*jsonschema.ValidationError)
	walk = func(v *jsonschema.ValidationError) {
		if r, ok := v.ErrorKind.(*kind.Required); ok {
			out = append(out, r.Missing...)
		}
		for _, c := range v.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out
}

func compile(t *testing.T, name string, raw json.RawMessage) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	url := "mem:///" + name + ".json"
	if err := c.AddResource(url, toDoc(t, raw)); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(url)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return s
}

func toDoc(t *testing.T, v any) any {
	t.Helper()
	b, ok := v.(json.RawMessage)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
