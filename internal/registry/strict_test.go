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

func TestStrictForm(t *testing.T) {
	cases := []struct {
		name, schema string
		// want is the strict form, or "!" and a part of the reason there
		// is none.
		want string
	}{
		{"optional made nullable, order kept, narrowing keywords left out",
			`{"type":"object","additionalProperties":false,"required":["path"],"properties":{
				"path":{"type":"string","maxLength":10,"description":"A path."},
				"mode":{"type":"string","enum":["a","b"],"default":"a"},
				"n":{"type":"integer","minimum":1,"maximum":9,"examples":[3]},
				"tag":{"const":"x"}}}`,
			`{"type":"object","properties":{"path":{"description":"A path.","type":"string"},"mode":{"type":["string","null"],"enum":["a","b",null]},"n":{"type":["integer","null"],"minimum":1,"maximum":9},"tag":{"enum":["x",null]}},"required":["path","mode","n","tag"],"additionalProperties":false}`},
		{"nested objects and arrays; an unstated additionalProperties is closed",
			`{"type":"object","properties":{"items":{"type":"array","minItems":1,"uniqueItems":true,"items":{"type":"object","required":["id"],"properties":{"id":{"type":"string","format":"uuid"},"note":{"type":"string","format":"regex"}}}}}}`,
			`{"type":"object","properties":{"items":{"type":["array","null"],"items":{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"note":{"type":["string","null"]}},"required":["id","note"],"additionalProperties":false},"minItems":1}},"required":["items"],"additionalProperties":false}`},
		{"already nullable stays as it is",
			`{"type":"object","properties":{"x":{"type":["string","null"]}},"additionalProperties":false}`,
			`{"type":"object","properties":{"x":{"type":["string","null"]}},"required":["x"],"additionalProperties":false}`},
		{"conditionals and anyOf beside a type are left out; oneOf becomes anyOf",
			`{"type":"object","required":["v"],"properties":{"v":{"oneOf":[{"type":"string"},{"type":"number"}]},"w":{"anyOf":[{"type":"string"},{"type":"null"}]}},"additionalProperties":false,
				"allOf":[{"if":{"properties":{"v":{"const":"a"}}},"then":{"required":["w"]}}],"anyOf":[{"required":["v"]},{"required":["w"]}]}`,
			`{"type":"object","properties":{"v":{"anyOf":[{"type":"string"},{"type":"number"}]},"w":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["v","w"],"additionalProperties":false}`},
		{"local $ref inlined, optional at each use",
			`{"type":"object","$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"}},"additionalProperties":false}},"required":["a"],"properties":{"a":{"$ref":"#/$defs/pt"},"b":{"$ref":"#/$defs/pt","description":"B."}},"additionalProperties":false}`,
			`{"type":"object","properties":{"a":{"type":"object","properties":{"x":{"type":["number","null"]}},"required":["x"],"additionalProperties":false},"b":{"type":["object","null"],"properties":{"x":{"type":["number","null"]}},"required":["x"],"additionalProperties":false,"description":"B."}},"required":["a","b"],"additionalProperties":false}`},
		{"optional with a type list and an enum without null: null joins both",
			`{"type":"object","properties":{"a":{"type":["string","null"],"enum":["a","b"]},"b":{"type":["integer","null"],"const":1}},"additionalProperties":false}`,
			`{"type":"object","properties":{"a":{"type":["string","null"],"enum":["a","b",null]},"b":{"type":["integer","null"],"enum":[1,null]}},"required":["a","b"],"additionalProperties":false}`},
		{"closed by additionalProperties, a member only allOf names is refused by the schema too",
			`{"type":"object","properties":{"a":{"type":"string"}},"allOf":[{"properties":{"b":{"type":"integer"}}}],"additionalProperties":false}`,
			`{"type":"object","properties":{"a":{"type":["string","null"]}},"required":["a"],"additionalProperties":false}`},
		{"closed by unevaluatedProperties, branches naming only declared members",
			`{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"allOf":[{"$ref":"#/$defs/needsB"}],"anyOf":[{"required":["a"]},{"properties":{"b":{"minimum":1}}}],"unevaluatedProperties":false,"$defs":{"needsB":{"required":["b"]}}}`,
			`{"type":"object","properties":{"a":{"type":["string","null"]},"b":{"type":["integer","null"]}},"required":["a","b"],"additionalProperties":false}`},
		{"a member only allOf names, under unevaluatedProperties",
			`{"type":"object","properties":{"a":{"type":"string"}},"allOf":[{"properties":{"b":{"type":"integer"}},"required":["b"]}],"unevaluatedProperties":false}`,
			`!names member "b" only at /allOf/0`},
		{"a member only then requires",
			`{"type":"object","properties":{"a":{"type":"string"}},"if":{"required":["a"]},"then":{"required":["c"]}}`,
			`!names member "c" only at /then`},
		{"a member only dependentSchemas names, nested",
			`{"type":"object","required":["o"],"properties":{"o":{"type":"object","properties":{"a":{"type":"string"}},"dependentSchemas":{"a":{"properties":{"d":{"type":"string"}}}},"unevaluatedProperties":false}},"additionalProperties":false}`,
			`!the schema at /properties/o names member "d" only at /properties/o/dependentSchemas/a`},
		{"a member only a $ref'd oneOf branch names",
			`{"type":"object","properties":{"a":{"type":"string"}},"oneOf":[{"$ref":"#/$defs/x"},{"required":["a"]}],"$defs":{"x":{"allOf":[{"required":["e"]}]}},"unevaluatedProperties":false}`,
			`!names member "e" only at /oneOf/0/allOf/0`},
		{"a branch letting in any member, under unevaluatedProperties",
			`{"type":"object","properties":{"a":{"type":"string"}},"anyOf":[{"additionalProperties":{"type":"string"}}],"unevaluatedProperties":false}`,
			`!lets in members it does not name (additionalProperties at /anyOf/0)`},
		{"any value", `{"type":"object","properties":{"input":{"description":"Any JSON."}},"additionalProperties":false}`, "!/properties/input accepts any JSON value"},
		{"open map", `{"type":"object","properties":{"h":{"type":"object","additionalProperties":{"type":"string"}}},"additionalProperties":false}`, "!/properties/h allows members it does not name"},
		{"any object", `{"type":"object","properties":{"args":{"type":"object"}},"additionalProperties":false}`, "!/properties/args is an object with any members"},
		{"root open", `{"type":"object","additionalProperties":true,"properties":{"a":{"type":"string"}}}`, "!the schema allows members it does not name"},
		{"recursive", `{"type":"object","$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}},"additionalProperties":false}},"properties":{"n":{"$ref":"#/$defs/n"}},"additionalProperties":false}`, "!refers to itself"},
		{"remote ref", `{"type":"object","properties":{"a":{"$ref":"https://example.com/s.json"}},"additionalProperties":false}`, "!other than one into its own $defs"},
		{"type union", `{"type":"object","properties":{"a":{"type":["string","integer"]}},"additionalProperties":false}`, "!allows several types (string, integer)"},
		{"tuple", `{"type":"object","properties":{"a":{"type":"array","prefixItems":[{"type":"string"}]}},"additionalProperties":false}`, "!is a tuple"},
		{"optional inside anyOf", `{"type":"object","required":["a"],"properties":{"a":{"anyOf":[{"type":"object","properties":{"x":{"type":"string"}},"additionalProperties":false},{"type":"string"}]}},"additionalProperties":false}`, "!optional property in an anyOf branch"},
		{"big enum", `{"type":"object","required":["a"],"properties":{"a":{"type":"string","enum":[` + strings.TrimSuffix(strings.Repeat(`"`+strings.Repeat("x", 60)+`",`, 251), ",") + `]}},"additionalProperties":false}`, "!an enum of 251 values longer than"},
		{"too deep", `{"type":"object","required":["a"],"properties":{"a":` + strings.Repeat(`{"type":"object","required":["a"],"additionalProperties":false,"properties":{"a":`, 10) + `{"type":"string"}` + strings.Repeat("}}", 10) + `},"additionalProperties":false}`, "!deeper than strict mode's 10 levels"},
	}
	for _, c := range cases {
		f := strictForm(json.RawMessage(c.schema))
		if reason, ok := strings.CutPrefix(c.want, "!"); ok {
			if f.Parameters != nil || !strings.Contains(f.Reason, reason) {
				t.Errorf("%s: %s %q, want no strict form because %q", c.name, f.Parameters, f.Reason, reason)
			}
			continue
		}
		if string(f.Parameters) != c.want || f.Reason != "" {
			t.Errorf("%s:\n got %s %q\nwant %s", c.name, f.Parameters, f.Reason, c.want)
		}
	}
}

// TestStrictFormAcceptsTheSchema: for each schema and arguments it
// accepts, what a strict-mode model may send for them — every optional
// property absent as null — passes the strict form, and, its nulls
// dropped, the schema again.
func TestStrictFormAcceptsTheSchema(t *testing.T) {
	cases := []struct{ schema, args string }{
		{`{"type":"object","properties":{"a":{"type":["string","null"],"enum":["a","b"]}},"additionalProperties":false}`, `{}`},
		{`{"type":"object","properties":{"a":{"type":["string","null"],"enum":["a","b"]}},"additionalProperties":false}`, `{"a":"b"}`},
		{`{"type":"object","properties":{"a":{"type":["string","null"],"const":"a"},"n":{"type":"integer"}},"additionalProperties":false}`, `{"n":1}`},
	}
	for _, c := range cases {
		f := strictForm(json.RawMessage(c.schema))
		if f.Parameters == nil {
			t.Errorf("%s: %s", c.schema, f.Reason)
			continue
		}
		strict, err := compile2020(f.Parameters)
		if err != nil {
			t.Errorf("%s: the strict form is not a schema: %v\n%s", c.schema, err, f.Parameters)
			continue
		}
		own, err := compileSchema("t__own", json.RawMessage(c.schema))
		if err != nil {
			t.Fatal(err)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(c.args), &args); err != nil {
			t.Fatal(err)
		}
		var props struct{ Properties map[string]any }
		_ = json.Unmarshal(f.Parameters, &props)
		for k := range props.Properties {
			if _, ok := args[k]; !ok {
				args[k] = nil
			}
		}
		sent, _ := json.Marshal(args)
		if err := validateJSON(strict, sent); err != nil {
			t.Errorf("%s: the strict form refuses %s: %v", c.schema, sent, err)
		}
		if err := validateJSON(own, f.DropNulls(sent)); err != nil {
			t.Errorf("%s: %s, its nulls dropped (%s), fails the schema: %v", c.schema, sent, f.DropNulls(sent), err)
		}
	}
}

func validateJSON(s *jsonschema.Schema, raw []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return err
	}
	return s.Validate(doc)
}

// TestStrictDropNulls: only the nulls that stand for an absent optional
// property are dropped, at any depth; a null for a required property, or
// for one the schema itself lets be null, stays for the schema to judge.
func TestStrictDropNulls(t *testing.T) {
	f := strictForm(json.RawMessage(`{"type":"object","additionalProperties":false,"required":["path","list"],"properties":{
		"path":{"type":"string"},"limit":{"type":"integer"},"note":{"type":["string","null"]},
		"list":{"type":"array","items":{"type":"object","required":["k"],"properties":{"k":{"type":"string"},"v":{"type":"string"}},"additionalProperties":false}}}}`))
	if f.Parameters == nil {
		t.Fatal(f.Reason)
	}
	cases := map[string]string{
		`{"path":"a","limit":null,"note":null,"list":[{"k":"x","v":null},{"k":"y","v":"z"}]}`: `{"list":[{"k":"x"},{"k":"y","v":"z"}],"note":null,"path":"a"}`,
		`"{\"path\":null,\"limit\":null,\"list\":[]}"`:                                        `{"list":[],"path":null}`,
		`{"path":"a","limit":3,"list":[]}`:                                                    `{"path":"a","limit":3,"list":[]}`,
		`[1,2]`:                                                                               `[1,2]`,
		`{"path":"a","limit":1e400,"list":[{"k":"x","v":null}]}`:                              `{"limit":1e400,"list":[{"k":"x"}],"path":"a"}`,
	}
	for in, want := range cases {
		if got := string(f.DropNulls(json.RawMessage(in))); got != want {
			t.Errorf("DropNulls(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestStrictCallRuns: what a strict-mode model sends, once its nulls are
// dropped, passes the tool's own schema and runs; sent as it is (a
// native call) the same nulls are refused.
func TestStrictCallRuns(t *testing.T) {
	tool := &Tool{Definition: Definition{Name: "t__echo", Description: "Echo.", Tier: ReadOnly,
		Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,"required":["text"],"properties":{"text":{"type":"string"},"times":{"type":"integer","minimum":1}}}`)},
		Handler: Func(func(ctx context.Context, r *Request) (any, error) { return string(r.Arguments), nil })}
	reg, err := New(Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tool)
	if err != nil {
		t.Fatal(err)
	}
	e := NewExecutor(Options{Registry: reg})
	sent := json.RawMessage(`{"text":"hi","times":null}`)
	res, err := e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__echo", Arguments: tool.Strict().DropNulls(sent)})
	if err != nil || res.Status != StatusOK || string(res.Output) != `"{\"text\":\"hi\"}"` {
		t.Errorf("strict call: %v %s %+v", err, res.Output, res.Error)
	}
	res, err = e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__echo", Arguments: sent})
	if err != nil || res.Code() != CodeInvalidArguments {
		t.Errorf("native call with a null: %v %+v", err, res.Error)
	}
}

// compile2020 compiles schema (without $schema) as draft 2020-12,
// checking it against that draft's metaschema.
func compile2020(schema []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource("toolsvc:///form.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("toolsvc:///form.json")
}
