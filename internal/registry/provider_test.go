package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

func TestProviderForm(t *testing.T) {
	cases := []struct {
		name, schema string
		// want is the provider form, "" for the schema itself.
		want string
	}{
		{"nothing to change", `{ "type": "object", "properties": {"a": {"type": "string", "anyOf": [{"minLength": 1}]}}, "$schema": "https://json-schema.org/draft/2020-12/schema" }`, ""},
		{"root allOf of conditionals (text__transform) goes",
			`{"type":"object","additionalProperties":false,"required":["op"],"properties":{"op":{"enum":["a","b"]},"x":{"type":"string"}},
				"allOf":[{"if":{"properties":{"op":{"const":"a"}}},"then":{"required":["x"]}}]}`,
			`{"type":"object","additionalProperties":false,"required":["op"],"properties":{"op":{"enum":["a","b"]},"x":{"type":"string"}}}`},
		{"anyOf of required branches: their properties join, their required do not",
			`{"type":"object","properties":{"a":{"type":"string"}},"anyOf":[{"required":["a"]},{"properties":{"b":{"type":"integer"}},"required":["b"]}]}`,
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}}}`},
		{"allOf branches: properties and required join; the root's own property wins",
			`{"type":"object","properties":{"a":{"type":"string","description":"A."}},"required":["a"],
				"allOf":[{"properties":{"a":{"maxLength":3},"b":{"type":"integer"}},"required":["b","a"]}]}`,
			`{"type":"object","properties":{"a":{"type":"string","description":"A."},"b":{"type":"integer"}},"required":["a","b"]}`},
		{"oneOf of local $refs, branches that disagree become an anyOf, $defs kept",
			`{"type":"object","oneOf":[{"$ref":"#/$defs/circle"},{"$ref":"#/definitions/square"}],
				"$defs":{"circle":{"properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]}},
				"definitions":{"square":{"properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}}}`,
			`{"type":"object","$defs":{"circle":{"properties":{"kind":{"const":"circle"},"r":{"type":"number"}},"required":["kind","r"]}},"definitions":{"square":{"properties":{"kind":{"const":"square"},"side":{"type":"number"}},"required":["kind","side"]}},"properties":{"kind":{"anyOf":[{"const":"circle"},{"const":"square"}]},"r":{"type":"number"},"side":{"type":"number"}}}`},
		{"root not, enum and const go",
			`{"type":"object","properties":{"a":{"type":"string"}},"not":{"required":["b"]},"enum":[{"a":"x"}],"const":{"a":"x"}}`,
			`{"type":"object","properties":{"a":{"type":"string"}}}`},
		{"a keyword spelled with an escape",
			`{"type":"object","properties":{"a":{}},"\u0061llOf":[{"required":["a"]}]}`,
			`{"type":"object","properties":{"a":{}},"required":["a"]}`},
		{"draft-04: exclusive bounds, id, tuples, dependencies, through subschemas",
			`{"$schema":"http://json-schema.org/draft-04/schema#","id":"http://example.com/s.json","type":"object",
				"properties":{
					"id":{"type":"string","id":"#ident"},
					"n":{"type":"number","maximum":10,"exclusiveMaximum":true,"minimum":0,"exclusiveMinimum":false},
					"m":{"type":"number","exclusiveMinimum":true},
					"pair":{"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false},
					"list":{"type":"array","items":{"type":"string"},"additionalItems":false},
					"o":{"type":"object","dependencies":{"a":["b"],"c":{"required":["d"]}},"enum":[{"id":"kept"}]}},
				"definitions":{"d":{"type":"integer","maximum":5,"exclusiveMaximum":true}}}`,
			`{"$id":"http://example.com/s.json","type":"object","properties":{"id":{"type":"string","$anchor":"ident"},"n":{"type":"number","exclusiveMaximum":10,"minimum":0},"m":{"type":"number"},"pair":{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false},"list":{"type":"array","items":{"type":"string"}},"o":{"type":"object","enum":[{"id":"kept"}],"dependentRequired":{"a":["b"]},"dependentSchemas":{"c":{"required":["d"]}}}},"definitions":{"d":{"type":"integer","exclusiveMaximum":5}}}`},
		{"draft-07: an $id fragment is an $anchor; a boolean exclusiveMaximum was never draft-07",
			`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"$id":"#a","type":"string"}},"definitions":{"x":{"$id":"other.json#","type":"string"}}}`,
			`{"type":"object","properties":{"a":{"type":"string","$anchor":"a"}},"definitions":{"x":{"$id":"other.json","type":"string"}}}`},
		{"2019-09: $recursiveRef",
			`{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object","$recursiveAnchor":false,"properties":{"next":{"$recursiveRef":"#"},"t":{"type":"array","items":[{"type":"string"}]}}}`,
			`{"type":"object","properties":{"next":{"$ref":"#"},"t":{"type":"array","prefixItems":[{"type":"string"}]}}}`},
		{"an older draft and a root oneOf",
			`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","oneOf":[{"properties":{"a":{"type":"number","maximum":1,"exclusiveMaximum":true}},"required":["a"]},{"required":["b"]}]}`,
			`{"type":"object","properties":{"a":{"type":"number","exclusiveMaximum":1}}}`},
	}
	for _, c := range cases {
		got := providerForm(json.RawMessage(c.schema))
		want := c.want
		if want == "" {
			want = c.schema
		}
		if string(got) != want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, want)
		}
		if hasRootKeyword(t, got) {
			t.Errorf("%s: a root keyword providers refuse is left: %s", c.name, got)
		}
	}
}

// hasRootKeyword reports whether schema has at its root a keyword OpenAI
// or Anthropic refuse there.
func hasRootKeyword(t *testing.T, schema []byte) bool {
	t.Helper()
	var root map[string]json.RawMessage
	if err := json.Unmarshal(schema, &root); err != nil {
		t.Fatalf("%v: %s", err, schema)
	}
	for _, k := range rootRefused {
		if _, ok := root[k]; ok {
			return true
		}
	}
	return false
}

// TestProviderFormIsDraft2020 checks the forms of older drafts' schemas
// against draft 2020-12's metaschema, which they failed as they were, and
// that they still accept and refuse what the schemas did.
func TestProviderFormIsDraft2020(t *testing.T) {
	cases := []struct {
		schema        string
		valid, broken []string
	}{
		{`{"$schema":"http://json-schema.org/draft-04/schema#","id":"http://example.com/p.json","type":"object","required":["n"],
			"properties":{"n":{"type":"number","maximum":10,"exclusiveMaximum":true,"minimum":0,"exclusiveMinimum":true},
				"pair":{"type":"array","items":[{"type":"string"},{"type":"integer"}],"additionalItems":false},
				"ref":{"$ref":"#/definitions/small"},
				"o":{"type":"object","dependencies":{"a":["b"],"c":{"required":["d"]}}}},
			"definitions":{"small":{"id":"#small","type":"integer","maximum":3,"exclusiveMaximum":true}}}`,
			[]string{`{"n":5}`, `{"n":9.5,"pair":["a",1],"ref":2,"o":{"a":1,"b":2,"c":3,"d":4}}`},
			[]string{`{"n":10}`, `{"n":0}`, `{"n":1,"pair":["a",1,2]}`, `{"n":1,"ref":3}`, `{"n":1,"o":{"a":1}}`, `{"n":1,"o":{"c":1}}`}},
		{`{"$schema":"http://json-schema.org/draft-06/schema#","type":"object","properties":{"a":{"$id":"#a","type":"array","items":[{"const":1}],"additionalItems":{"type":"string"}}},"dependencies":{"a":{"required":["b"]}}}`,
			[]string{`{"a":[1,"x"],"b":0}`, `{}`},
			[]string{`{"a":[1,2],"b":0}`, `{"a":[1]}`}},
		{`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"t":{"type":"array","items":[{"type":"string"}]}},"definitions":{"x":{"$id":"#x"}},"if":{"required":["t"]},"then":{"required":["u"]}}`,
			[]string{`{"t":["a",1],"u":1}`, `{}`},
			[]string{`{"t":[1]}`, `{"t":["a"]}`}},
		{`{"$schema":"https://json-schema.org/draft/2019-09/schema","type":"object","properties":{"next":{"$recursiveRef":"#"},"t":{"type":"array","items":[{"type":"string"}],"additionalItems":false}}}`,
			[]string{`{"next":{"next":{}},"t":["a"]}`},
			[]string{`{"next":{"t":[1]}}`, `{"t":["a","b"]}`}},
	}
	for i, c := range cases {
		form := providerForm(json.RawMessage(c.schema))
		if bytes.Contains(form, []byte(`"$schema"`)) {
			t.Errorf("%d: $schema left: %s", i, form)
		}
		// As they were, forced to draft 2020-12, they fail its metaschema.
		var orig map[string]any
		if err := json.Unmarshal([]byte(c.schema), &orig); err != nil {
			t.Fatal(err)
		}
		delete(orig, "$schema")
		asWas, _ := json.Marshal(orig)
		if _, err := compile2020(asWas); err == nil {
			t.Errorf("%d: the schema passes the 2020-12 metaschema as it was: the test has no teeth", i)
		}
		sch, err := compile2020(form)
		if err != nil {
			t.Errorf("%d: the form fails draft 2020-12: %v\n%s", i, err, form)
			continue
		}
		own, err := compileSchema("t__own", json.RawMessage(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range append(append([]string{}, c.valid...), c.broken...) {
			doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(args))
			if (own.Validate(doc) == nil) != (sch.Validate(doc) == nil) {
				t.Errorf("%d: %s: the schema says %v, its form %v", i, args, own.Validate(doc), sch.Validate(doc))
			}
		}
		for _, args := range c.valid {
			doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(args))
			if err := own.Validate(doc); err != nil {
				t.Errorf("%d: %s: %v", i, args, err)
			}
		}
		for _, args := range c.broken {
			doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(args))
			if own.Validate(doc) == nil {
				t.Errorf("%d: %s is valid", i, args)
			}
		}
	}
}

// TestProviderParametersOnce: a registered tool's form is computed once;
// a schema that needs no change is served as its own bytes, without an
// allocation.
func TestProviderParametersOnce(t *testing.T) {
	noop := Func(func(ctx context.Context, r *Request) (any, error) { return "ok", nil })
	plain := json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	mixed := json.RawMessage(`{"type":"object","properties":{"a":{"type":"string"}},"anyOf":[{"required":["a"]},{"properties":{"b":{}},"required":["b"]}]}`)
	reg, err := New(Defaults{Timeout: time.Second, MaxOutputBytes: 1024, ErrorMessageLimit: 1000},
		&Tool{Definition: Definition{Name: "t__plain", Description: "P.", Tier: ReadOnly, Parameters: plain}, Handler: noop},
		&Tool{Definition: Definition{Name: "t__mixed", Description: "M.", Tier: ReadOnly, Parameters: mixed}, Handler: noop})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := reg.Lookup("t__plain")
	if got := p.ProviderParameters(); &got[0] != &plain[0] {
		t.Errorf("plain: %s is a copy", got)
	}
	m, _ := reg.Lookup("t__mixed")
	first := m.ProviderParameters()
	if string(first) != `{"type":"object","properties":{"a":{"type":"string"},"b":{}}}` {
		t.Errorf("mixed: %s", first)
	}
	for _, tool := range []*Tool{p, m} {
		if n := testing.AllocsPerRun(100, func() { _ = tool.ProviderParameters() }); n != 0 {
			t.Errorf("%s: %v allocations per call", tool.Name, n)
		}
	}
	if again := m.ProviderParameters(); &again[0] != &first[0] {
		t.Error("mixed: computed again")
	}
}
