package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"google.golang.org/genai"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/data"
	"github.com/toolsvc/toolsvc/internal/tools/fs"
	"github.com/toolsvc/toolsvc/internal/tools/httpfetch"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	resulttool "github.com/toolsvc/toolsvc/internal/tools/result"
	"github.com/toolsvc/toolsvc/internal/tools/text"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// richSchema uses what real tool schemas use: $schema, $defs and $ref,
// enums, bounds, anyOf, and descriptions with quotes, HTML characters and
// non-ASCII text, which must all reach the model unchanged.
const richSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "required": ["path"],
  "properties": {
    "path": {"type": "string", "maxLength": 4096, "description": "A path <inside> the \"workspace\" & ünïcødé ✓"},
    "mode": {"enum": ["a", "b"], "default": "a", "description": "How."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
    "ratio": {"type": "number", "exclusiveMaximum": 1.5},
    "tags": {"type": "array", "maxItems": 10, "items": {"$ref": "#/$defs/tag"}},
    "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}
  },
  "$defs": {"tag": {"type": "string", "pattern": "^[a-z]+$"}}
}`

// formatTools are the tools the format tests list: built-ins with their own
// annotations, and tools of each tier without any.
func formatTools() []*registry.Tool {
	say := registry.Func(func(ctx context.Context, r *registry.Request) (any, error) { return "line one\nline \"two\" <b>", nil })
	mk := func(name, desc string, tier registry.Tier, schema string) *registry.Tool {
		return &registry.Tool{Definition: registry.Definition{Name: name, Description: desc, Tier: tier, Parameters: json.RawMessage(schema)}, Handler: say}
	}
	return append(append(text.Tools(), jsonq.Tools()...),
		mk("rich__read", "Reads <things> & \"stuff\" — über ✓.", registry.ReadOnly, richSchema),
		mk("rich__write", "Writes.", registry.SideEffecting, `{"type":"object"}`),
		mk("rich__exec", "Runs.", registry.Privileged, `{"type":"object","properties":{}}`),
		mk("test__say", "Says two lines.", registry.ReadOnly, `{"type":"object"}`),
	)
}

func newFormatEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, formatTools()...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
}

// decodeStrict decodes raw into v, one of an official client library's
// types, and checks that nothing was lost or added: v marshalled again by
// the library must be the same JSON value as raw. Struct types also refuse
// unknown fields outright.
func decodeStrict(t *testing.T, raw []byte, v any) {
	t.Helper()
	if err := strictDecode(raw, v); err != nil {
		t.Fatal(err)
	}
}

func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%T does not take %s: %v", v, raw, err)
	}
	back, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%T does not marshal again: %v", v, err)
	}
	a, erra := jsonValue(raw)
	b, errb := jsonValue(back)
	if erra != nil || errb != nil || !reflect.DeepEqual(a, b) {
		return fmt.Errorf("%T does not keep everything:\n sent %s\n kept %s", v, raw, back)
	}
	return nil
}

// sameJSON compares JSON values; numbers compare as written.
func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	va, erra := jsonValue(a)
	vb, errb := jsonValue(b)
	if erra != nil || errb != nil {
		t.Fatalf("not JSON: %s / %s", a, b)
	}
	return reflect.DeepEqual(va, vb)
}

func jsonValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// TestStrictDecodeHasTeeth shows that a field a library does not know, or
// a value it would not keep, fails the decoding tests.
func TestStrictDecodeHasTeeth(t *testing.T) {
	bad := []struct {
		raw string
		v   any
	}{
		{`{"type":"function","function":{"name":"a__b","description":"d","parameters":{"type":"object"},"extra":1}}`, &openai.ChatCompletionToolUnionParam{}},
		{`{"type":"function","function":{"name":"a__b","description":"d","parameters":{"type":"object"}},"extra":1}`, &openai.ChatCompletionToolUnionParam{}},
		{`{"type":"function","name":"a__b","description":"d","parameters":{},"strict":false,"parameter":{}}`, &responses.ToolUnionParam{}},
		{`{"name":"a__b","description":"d","inputSchema":{"type":"object"}}`, &anthropic.ToolUnionParam{}},
		{`{"name":"a__b","description":"d","parameters_json_schema":{}}`, &genai.FunctionDeclaration{}},
		{`{"name":"a__b","description":"d","input_schema":{}}`, &mcp.Tool{}},
		{`{"role":"tool","tool_call_id":"c","content":"x","is_error":true}`, &openai.ChatCompletionToolMessageParam{}},
		{`{"type":"tool_result","tool_use_id":"c","content":"x","is_error":true}`, &anthropic.ContentBlockParamUnion{}},
	}
	for _, b := range bad {
		if err := strictDecode([]byte(b.raw), b.v); err == nil {
			t.Errorf("%T took %s", b.v, b.raw)
		}
	}
}

// marshalled is v as JSON, for comparing a library's view of a schema
// with the tool's own.
func marshalled(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// catalogEntries fetches GET /tools?format=f (checked against the
// contract) and returns its raw entries.
func catalogEntries(t *testing.T, e *env, f string) []json.RawMessage {
	t.Helper()
	r := e.do("GET", "/tools?format="+f, nil, nil, true)
	if r.status != 200 {
		t.Fatalf("GET /tools?format=%s: %d %s", f, r.status, r.body)
	}
	var cat struct{ Tools []json.RawMessage }
	r.json(t, &cat)
	return cat.Tools
}

// checkTool compares what a library decoded with the registered tool:
// OpenAI and Anthropic get the provider form of its schema, the others
// the schema itself.
func checkTool(t *testing.T, format string, want *registry.Tool, name, description string, schema []byte) {
	t.Helper()
	if name != want.Name || description != want.Description {
		t.Errorf("%s: %q %q, want %q %q", format, name, description, want.Name, want.Description)
	}
	wantSchema := want.Parameters
	if strings.HasPrefix(format, "openai") || strings.HasPrefix(format, "anthropic") {
		wantSchema = want.ProviderParameters()
	}
	if !sameJSON(t, schema, wantSchema) {
		t.Errorf("%s: schema of %s changed:\n got  %s\n want %s", format, want.Name, schema, wantSchema)
	}
}

func TestCatalogFormatsDecodeIntoOfficialTypes(t *testing.T) {
	e := newFormatEnv(t)
	tools := e.srv.deps.Executor.Registry().List(nil, registry.Filter{})
	if len(tools) != 6 {
		t.Fatalf("%d tools", len(tools))
	}

	t.Run("openai", func(t *testing.T) {
		entries := catalogEntries(t, e, "openai")
		params := openai.ChatCompletionNewParams{Model: openai.ChatModelGPT4o}
		for i, raw := range entries {
			var u openai.ChatCompletionToolUnionParam
			decodeStrict(t, raw, &u)
			f := u.GetFunction()
			if f == nil {
				t.Fatalf("not a function tool: %s", raw)
			}
			checkTool(t, "openai", tools[i], f.Name, f.Description.Value, marshalled(t, f.Parameters))
			params.Tools = append(params.Tools, u)
		}
		// The entries go into a request as they are.
		body := marshalled(t, params)
		if !bytes.Contains(body, []byte(`"name":"rich__read"`)) || !bytes.Contains(body, []byte(`"$defs"`)) {
			t.Errorf("request body: %.300s", body)
		}
	})

	t.Run("openai-responses", func(t *testing.T) {
		for i, raw := range catalogEntries(t, e, "openai-responses") {
			var u responses.ToolUnionParam
			decodeStrict(t, raw, &u)
			f := u.OfFunction
			if f == nil {
				t.Fatalf("not a function tool: %s", raw)
			}
			if !f.Strict.Valid() || f.Strict.Value {
				t.Errorf("strict must be given as false (the API defaults it to true): %s", raw)
			}
			checkTool(t, "openai-responses", tools[i], f.Name, f.Description.Value, marshalled(t, f.Parameters))
		}
	})

	t.Run("anthropic", func(t *testing.T) {
		var all []anthropic.ToolUnionParam
		for i, raw := range catalogEntries(t, e, "anthropic") {
			var u anthropic.ToolUnionParam
			decodeStrict(t, raw, &u)
			if u.OfTool == nil {
				t.Fatalf("not a custom tool: %s", raw)
			}
			checkTool(t, "anthropic", tools[i], u.OfTool.Name, u.OfTool.Description.Value, marshalled(t, u.OfTool.InputSchema))
			all = append(all, u)
		}
		body := marshalled(t, anthropic.MessageNewParams{Model: anthropic.ModelClaudeSonnet4_5, MaxTokens: 1024, Tools: all})
		if !bytes.Contains(body, []byte(`"input_schema"`)) {
			t.Errorf("request body: %.300s", body)
		}
	})

	t.Run("gemini", func(t *testing.T) {
		r := e.do("GET", "/tools?format=gemini", nil, nil, true)
		var cfg genai.GenerateContentConfig
		decodeStrict(t, r.body, &cfg)
		if len(cfg.Tools) != 1 || len(cfg.Tools[0].FunctionDeclarations) != len(tools) {
			t.Fatalf("gemini tools: %s", r.body)
		}
		for i, d := range cfg.Tools[0].FunctionDeclarations {
			if d.Parameters != nil {
				t.Errorf("%s: the OpenAPI-subset parameters are set; only parametersJsonSchema should be", d.Name)
			}
			checkTool(t, "gemini", tools[i], d.Name, d.Description, marshalled(t, d.ParametersJsonSchema))
		}
		one := e.do("GET", "/tools/rich__read?format=gemini", nil, nil, true)
		var decl genai.FunctionDeclaration
		decodeStrict(t, one.body, &decl)
		checkTool(t, "gemini one", tools[2], decl.Name, decl.Description, marshalled(t, decl.ParametersJsonSchema))
	})

	t.Run("mcp", func(t *testing.T) {
		r := e.do("GET", "/tools?format=mcp", nil, nil, true)
		// The catalog in this shape is a ListToolsResult (which marshals
		// fields of its own, so only the tools make the round trip).
		var list mcp.ListToolsResult
		dec := json.NewDecoder(bytes.NewReader(r.body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&list); err != nil || len(list.Tools) != len(tools) {
			t.Fatalf("mcp tools: %v %s", err, r.body)
		}
		for _, raw := range catalogEntries(t, e, "mcp") {
			decodeStrict(t, raw, &mcp.Tool{})
		}
		yes, no := true, false
		want := map[string]mcp.ToolAnnotations{
			// the tool's own hints
			"json__query": {Title: "Query JSON with jq", ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &no},
			// derived from the tier
			"rich__read":  {ReadOnlyHint: true, IdempotentHint: true},
			"rich__write": {ReadOnlyHint: false, DestructiveHint: &yes},
			"rich__exec":  {ReadOnlyHint: false, DestructiveHint: &yes},
		}
		for i, tl := range list.Tools {
			checkTool(t, "mcp", tools[i], tl.Name, tl.Description, marshalled(t, tl.InputSchema))
			if w, ok := want[tl.Name]; ok && !reflect.DeepEqual(*tl.Annotations, w) {
				t.Errorf("%s annotations: %+v, want %+v", tl.Name, *tl.Annotations, w)
			}
		}
		if list.Tools[0].Title != "Query JSON with jq" {
			t.Errorf("title: %+v", list.Tools[0])
		}
	})

	// The first version's single-tool shapes still decode.
	one := e.do("GET", "/tools/rich__read?format=anthropic", nil, nil, true)
	var tp anthropic.ToolParam
	decodeStrict(t, one.body, &tp)
	checkTool(t, "anthropic one", tools[2], tp.Name, tp.Description.Value, marshalled(t, tp.InputSchema))
}

// resultCase is one call, its expected text for a model, and whether it fails.
type resultCase struct {
	name, body, id, text string
	isError              bool
	object               bool
}

func resultCases() []resultCase {
	return []resultCase{
		{name: "object output from an OpenAI tool call",
			body: `{"id":"call_obj","type":"function","function":{"name":"text__transform","arguments":"{\"operation\":\"upper\",\"text\":\"<ä>\"}"}}`,
			id:   "call_obj", text: `{"result":"<Ä>"}`, object: true},
		{name: "string output from an Anthropic tool_use",
			body: `{"type":"tool_use","id":"toolu_str","name":"test__say","input":{}}`,
			id:   "toolu_str", text: "line one\nline \"two\" <b>"},
		{name: "error from a Responses function_call",
			body: `{"type":"function_call","id":"fc_1","call_id":"call_err","name":"text__transform","arguments":"{\"operation\":\"shout\",\"text\":\"a\"}"}`,
			id:   "call_err", isError: true,
			text: "Error E_INVALID_ARGUMENTS: arguments do not match the schema of text__transform: at /operation: expected one of"},
		{name: "unknown tool from a Gemini functionCall",
			body: `{"functionCall":{"id":"g1","name":"text__transfrom","args":{}}}`,
			id:   "g1", isError: true,
			text: "Error E_TOOL_NOT_FOUND: no tool named \"text__transfrom\"\nSuggestion: Did you mean text__transform?"},
	}
}

func TestResultFormatsDecodeIntoOfficialTypes(t *testing.T) {
	e := newFormatEnv(t)
	post := func(t *testing.T, format, body string) []byte {
		t.Helper()
		r := e.do("POST", "/calls?format="+format, []byte(body), jsonCT, true)
		if r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		return r.body
	}
	checkText := func(t *testing.T, c resultCase, got string) {
		t.Helper()
		if c.isError && (!strings.HasPrefix(got, c.text) || !strings.Contains(got, "\nSuggestion: ")) || !c.isError && got != c.text {
			t.Errorf("text for the model:\n got  %q\n want %q", got, c.text)
		}
	}
	for _, c := range resultCases() {
		t.Run(c.name, func(t *testing.T) {
			t.Run("openai", func(t *testing.T) {
				var m openai.ChatCompletionToolMessageParam
				decodeStrict(t, post(t, "openai", c.body), &m)
				if m.ToolCallID != c.id || !m.Content.OfString.Valid() {
					t.Errorf("tool message: %+v", m)
				}
				checkText(t, c, m.Content.OfString.Value)
				// It goes into the conversation as it is.
				var u openai.ChatCompletionMessageParamUnion
				decodeStrict(t, post(t, "openai", c.body), &u)
				if u.OfTool == nil {
					t.Errorf("not a tool message in a conversation")
				}
			})
			t.Run("openai-responses", func(t *testing.T) {
				var u responses.ResponseInputItemUnionParam
				decodeStrict(t, post(t, "openai-responses", c.body), &u)
				o := u.OfFunctionCallOutput
				if o == nil || o.CallID.Value != c.id {
					t.Fatalf("function_call_output: %+v", u)
				}
				checkText(t, c, o.Output.OfString.Value)
			})
			t.Run("anthropic", func(t *testing.T) {
				var u anthropic.ContentBlockParamUnion
				decodeStrict(t, post(t, "anthropic", c.body), &u)
				r := u.OfToolResult
				if r == nil || r.ToolUseID != c.id || !r.IsError.Valid() || r.IsError.Value != c.isError || len(r.Content) != 1 || r.Content[0].OfText == nil {
					t.Fatalf("tool_result: %+v", u)
				}
				checkText(t, c, r.Content[0].OfText.Text)
			})
			t.Run("gemini", func(t *testing.T) {
				var p genai.Part
				decodeStrict(t, post(t, "gemini", c.body), &p)
				fr := p.FunctionResponse
				if fr == nil || fr.ID != c.id {
					t.Fatalf("functionResponse: %+v", p)
				}
				switch {
				case c.isError:
					s, _ := fr.Response["error"].(string)
					checkText(t, c, s)
				case c.object:
					if !sameJSON(t, marshalled(t, fr.Response["output"]), []byte(c.text)) {
						t.Errorf("output: %v", fr.Response)
					}
				default:
					s, _ := fr.Response["output"].(string)
					checkText(t, c, s)
				}
			})
			t.Run("mcp", func(t *testing.T) {
				var r mcp.CallToolResult
				// CallToolResult omits a false isError when marshalled again,
				// so it is decoded without the round trip.
				body := post(t, "mcp", c.body)
				if err := json.Unmarshal(body, &r); err != nil {
					t.Fatal(err)
				}
				if !bytes.Contains(body, []byte(`"isError":`)) || r.IsError != c.isError || len(r.Content) != 1 {
					t.Fatalf("CallToolResult: %s", body)
				}
				tc, ok := r.Content[0].(*mcp.TextContent)
				if !ok {
					t.Fatalf("content is %T", r.Content[0])
				}
				checkText(t, c, tc.Text)
				if c.object != (r.StructuredContent != nil) || c.object && !sameJSON(t, marshalled(t, r.StructuredContent), []byte(c.text)) {
					t.Errorf("structuredContent: %v", r.StructuredContent)
				}
			})
		})
	}
}

func TestCatalogSearchRanks(t *testing.T) {
	e := newFormatEnv(t)
	for _, f := range []string{"native", "openai", "mcp"} {
		var names []string
		for _, raw := range catalogEntries(t, e, f+"&q=transform%20JSON") {
			var entry struct {
				Name     string
				Function struct{ Name string }
			}
			if err := json.Unmarshal(raw, &entry); err != nil {
				t.Fatal(err)
			}
			names = append(names, entry.Name+entry.Function.Name)
		}
		// a name prefix ranks above a word of a name
		if strings.Join(names, ",") != "json__query,text__transform" {
			t.Errorf("format %s: %v", f, names)
		}
	}
}

// TestStrictCatalog: ?strict=true serves each tool whose schema has a
// strict form with it and strict: true in both OpenAI shapes (still the
// official libraries' types), the others as they are with strict: false,
// named with their reason in notStrict; other formats refuse it.
func TestStrictCatalog(t *testing.T) {
	e := newFormatEnv(t)
	tools := e.srv.deps.Executor.Registry().List(nil, registry.Filter{})
	wantNot := map[string]bool{"json__query": true, "rich__write": true, "rich__exec": true, "test__say": true}

	r := e.do("GET", "/tools?format=openai&strict=true", nil, nil, true)
	var cat struct {
		Tools     []json.RawMessage
		NotStrict []notStrictTool
	}
	r.json(t, &cat)
	if r.status != 200 || len(cat.Tools) != len(tools) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for i, raw := range cat.Tools {
		var u openai.ChatCompletionToolUnionParam
		decodeStrict(t, raw, &u)
		f := u.GetFunction()
		if f == nil || !f.Strict.Valid() || f.Strict.Value == wantNot[f.Name] {
			t.Fatalf("%s: strict %v, want %v", raw, f.Strict, !wantNot[f.Name])
		}
		params := marshalled(t, f.Parameters)
		if want := tools[i].Strict(); f.Strict.Value && !sameJSON(t, params, want.Parameters) || !f.Strict.Value && !sameJSON(t, params, tools[i].ProviderParameters()) {
			t.Errorf("%s: parameters %s", f.Name, params)
		}
	}
	var got []string
	for _, n := range cat.NotStrict {
		got = append(got, n.Name)
		if !wantNot[n.Name] || !strings.HasPrefix(n.Reason, "the schema") {
			t.Errorf("notStrict: %+v", n)
		}
	}
	if len(got) != len(wantNot) {
		t.Errorf("notStrict: %v, want %v", got, wantNot)
	}

	for _, raw := range catalogEntries(t, e, "openai-responses&strict=true") {
		var u responses.ToolUnionParam
		decodeStrict(t, raw, &u)
		if f := u.OfFunction; f == nil || !f.Strict.Valid() || f.Strict.Value == wantNot[f.Name] {
			t.Errorf("responses: %s", raw)
		}
	}
	one := e.do("GET", "/tools/rich__read?format=openai&strict=true", nil, nil, true)
	if !bytes.Contains(one.body, []byte(`"strict":true`)) || !bytes.Contains(one.body, []byte(`"enum":["a","b",null]`)) {
		t.Errorf("one tool: %s", one.body)
	}
	// Without ?strict=true nothing changes.
	if plain := e.do("GET", "/tools?format=openai", nil, nil, true); bytes.Contains(plain.body, []byte(`"strict"`)) || bytes.Contains(plain.body, []byte(`notStrict`)) {
		t.Errorf("plain catalog: %.300s", plain.body)
	}
	for _, q := range []string{"format=mcp&strict=true", "strict=true", "format=openai&strict=maybe"} {
		if r := e.do("GET", "/tools?"+q, nil, nil, !strings.Contains(q, "maybe")); r.status != 400 || !bytes.Contains(r.body, []byte("strict")) {
			t.Errorf("%s: %d %s", q, r.status, r.body)
		}
	}
}

// TestStrictCalls: with ?strict=true a null for an optional property is
// the property left out, in POST /calls and in a batch, whatever the
// call's shape; without it the same null breaks the schema.
func TestStrictCalls(t *testing.T) {
	e := newFormatEnv(t)
	openAICall := `{"id":"call_1","type":"function","function":{"name":"text__transform","arguments":"{\"operation\":\"split\",\"text\":\"a,b\",\"separator\":\",\",\"find\":null,\"pattern\":null,\"replacement\":null,\"parts\":null,\"algorithm\":null,\"limit\":null}"}}`
	_, res := e.call("/calls?strict=true", openAICall)
	if res.Status != registry.StatusOK || !strings.Contains(string(res.Output), `["a","b"]`) {
		t.Errorf("strict call: %s %+v", res.Output, res.Error)
	}
	_, res = e.call("/calls", strings.Replace(openAICall, "call_1", "call_2", 1))
	if res.Code() != registry.CodeInvalidArguments {
		t.Errorf("the same call without strict: %s %+v", res.Output, res.Error)
	}
	// A null for a required property is still refused.
	_, res = e.call("/calls?strict=true", `{"toolName":"text__transform","arguments":{"operation":null,"text":"a"}}`)
	if res.Code() != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, "/operation") {
		t.Errorf("null operation: %+v", res.Error)
	}
	r := e.do("POST", "/calls/batch?strict=true", []byte(`{"calls":[
		{"type":"tool_use","id":"toolu_1","name":"rich__read","input":{"path":"p","mode":null,"limit":null,"ratio":null,"tags":null,"note":null}},
		{"toolName":"rich__read","arguments":{"path":"p","mode":null,"limit":null,"ratio":null,"tags":["x"],"note":null}}]}`), jsonCT, true)
	var batch struct{ Results []registry.Result }
	r.json(t, &batch)
	if len(batch.Results) != 2 || batch.Results[0].Status != registry.StatusOK || batch.Results[1].Status != registry.StatusOK {
		t.Errorf("strict batch: %s", r.body)
	}
	if r := e.do("POST", "/calls?strict=yes", []byte(`{"toolName":"test__say"}`), jsonCT, false); r.status != 400 {
		t.Errorf("strict=yes: %d %s", r.status, r.body)
	}
}

// TestProviderCatalog: the catalog in the OpenAI and Anthropic shapes has
// no root keyword those APIs refuse (allOf, anyOf, oneOf, not, enum,
// const) and no schema of a draft before 2020-12, for the built-ins
// (text__transform's schema is a root allOf) and for custom or imported
// tools; the other shapes serve every schema as it is.
func TestProviderCatalog(t *testing.T) {
	ws, err := workspace.New(t.TempDir(), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	say := registry.Func(func(ctx context.Context, r *registry.Request) (any, error) { return "ok", nil })
	resultTools, _ := resulttool.Tools(resulttool.Options{})
	tools := slices.Concat(text.Tools(), jsonq.Tools(), data.Tools(data.Options{}), fs.Tools(fs.Options{Workspace: ws}),
		httpfetch.Tools(httpfetch.Options{}), resultTools, []*registry.Tool{
			{Definition: registry.Definition{Name: "mcp__pick", Description: "Imported.", Tier: registry.ReadOnly, Parameters: json.RawMessage(
				`{"type":"object","oneOf":[{"$ref":"#/$defs/byID"},{"properties":{"name":{"type":"string"}},"required":["name"]}],"$defs":{"byID":{"properties":{"id":{"type":"integer"}},"required":["id"]}}}`)}, Handler: say},
			{Definition: registry.Definition{Name: "custom__old", Description: "Draft-04.", Tier: registry.ReadOnly, Parameters: json.RawMessage(
				`{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"number","maximum":1,"exclusiveMaximum":true}},"anyOf":[{"required":["n"]}]}`)}, Handler: say},
		})
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
	schemaOf := map[string]func(json.RawMessage) (string, json.RawMessage){
		"openai": func(raw json.RawMessage) (string, json.RawMessage) {
			var v struct {
				Function struct {
					Name       string
					Parameters json.RawMessage
				}
			}
			_ = json.Unmarshal(raw, &v)
			return v.Function.Name, v.Function.Parameters
		},
		"openai-responses": func(raw json.RawMessage) (string, json.RawMessage) {
			var v struct {
				Name       string
				Parameters json.RawMessage
			}
			_ = json.Unmarshal(raw, &v)
			return v.Name, v.Parameters
		},
		"anthropic": func(raw json.RawMessage) (string, json.RawMessage) {
			var v struct {
				Name        string
				InputSchema json.RawMessage `json:"input_schema"`
			}
			_ = json.Unmarshal(raw, &v)
			return v.Name, v.InputSchema
		},
	}
	schemaOf["openai&strict=true"] = schemaOf["openai"]
	schemaOf["openai-responses&strict=true"] = schemaOf["openai-responses"]
	for format, of := range schemaOf {
		entries := catalogEntries(t, e, format)
		if len(entries) != len(tools) {
			t.Fatalf("%s: %d entries", format, len(entries))
		}
		for _, raw := range entries {
			name, schema := of(raw)
			var root map[string]json.RawMessage
			if err := json.Unmarshal(schema, &root); err != nil || root["type"] == nil {
				t.Fatalf("%s: %s: %v %s", format, name, err, schema)
			}
			for _, k := range []string{"allOf", "anyOf", "oneOf", "not", "enum", "const", "$schema"} {
				if _, ok := root[k]; ok {
					t.Errorf("%s: %s has %s at its root: %.300s", format, name, k, schema)
				}
			}
			if err := compile2020(schema); err != nil {
				t.Errorf("%s: %s is not draft 2020-12: %v", format, name, err)
			}
			if name == "mcp__pick" && !bytes.Contains(schema, []byte(`"properties":{"id":{"type":"integer"},"name":{"type":"string"}}`)) {
				t.Errorf("%s: %s: the branches' properties are lost: %s", format, name, schema)
			}
		}
	}
	// Native, Gemini and MCP serve the schema itself, root allOf and all.
	for _, path := range []string{"/tools/text__transform", "/tools/text__transform?format=gemini", "/tools/text__transform?format=mcp"} {
		if r := e.do("GET", path, nil, nil, true); r.status != 200 || !bytes.Contains(r.body, []byte(`"allOf"`)) {
			t.Errorf("%s: %d %.300s", path, r.status, r.body)
		}
	}
	// The full schema still judges calls.
	_, res := e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"replace","text":"a"}}`)
	if res.Code() != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, "'find'") {
		t.Errorf("text__transform without find: %+v", res.Error)
	}
}

// compile2020 compiles schema as draft 2020-12, against its metaschema.
func compile2020(schema []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("toolsvc:///form.json", doc); err != nil {
		return err
	}
	_, err = c.Compile("toolsvc:///form.json")
	return err
}

// TestToolNamePattern: the contract's ToolName takes exactly the names
// the registry takes.
func TestToolNamePattern(t *testing.T) {
	s := loadContract(t).doc.Components.Schemas["ToolName"].Value
	re := regexp.MustCompile(s.Pattern)
	names := []string{"fs__read", "a__b", "my-tool__do_it", "A1__b-2", "a__1x", "a__-x", "a_b-c__d_e",
		strings.Repeat("a", 30) + "__" + strings.Repeat("b", 32), strings.Repeat("a", 31) + "__" + strings.Repeat("b", 32),
		"", "fs", "fs_read", "__read", "fs__", "_fs__read", "fs___read", "fs__read_", "fs__re__ad", "f s__read", "fs__réad",
		"fs.x__read", "1fs__read", "-fs__read", "fs-__read", "fs_-x__read", "fs__a_", "fs__a__"}
	for _, n := range names {
		contract := re.MatchString(n) && (s.MaxLength == nil || uint64(len(n)) <= *s.MaxLength)
		if code := registry.ValidateName(n) == nil; contract != code {
			t.Errorf("%q: the contract takes it %v, the registry %v", n, contract, code)
		}
	}
}
