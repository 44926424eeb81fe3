package custom

import (
	"context"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// TestOutputSchema: a kind: Tool export that declares an outputSchema
// gets E_TOOL naming it as faulty when its backend answers something
// else, and its output when the answer matches.
func TestOutputSchema(t *testing.T) {
	b := newFakeBackend(t)
	f := newFixture(t, sandbox.ModeOff)
	doc := `apiVersion: toolsvc/v1
kind: Tool
metadata: {name: remote}
spec:
  tier: read_only
  http: {url: ` + b.URL + `/tool}
  exports:
    - name: json
      description: Answers {"ok":true,"export":"json"}.
      outputSchema:
        type: object
        required: [ok, export]
        properties: {ok: {type: boolean}, export: {type: string}}
    - name: text
      description: Answers a string, which breaks its schema.
      outputSchema:
        type: object
        required: [temperature]
        properties: {temperature: {type: number}}
`
	e := f.executor(doc)
	ctx := context.Background()
	res := call(t, e, ctx, &registry.Call{ToolName: "remote__json"})
	if res.Status != registry.StatusOK {
		t.Fatalf("matching output: %+v", res.Error)
	}
	res = call(t, e, ctx, &registry.Call{ToolName: "remote__text"})
	if res.Code() != registry.CodeTool || res.Output != nil || !strings.Contains(res.Error.Message, "remote__text is faulty") ||
		!strings.Contains(res.Error.Message, "does not match its declared output schema") || res.Error.Name != "remote__text" {
		t.Fatalf("breaking output: %s %+v", res.Output, res.Error)
	}

}

// TestProviderNames: names every provider rejects fail at load with a
// clear message: a resource starting with a digit (Gemini) and a name
// over 64 characters (OpenAI, Anthropic, Gemini).
func TestProviderNames(t *testing.T) {
	f := newFixture(t, sandbox.ModeOff)
	for _, c := range []struct{ name, export, want string }{
		{"9lives", "x", `"9lives" must start with a letter`},
		{"-dash", "x", `"-dash" must start with a letter`},
		{"a" + strings.Repeat("b", 40), strings.Repeat("c", 27), "is 70 characters long; the limit is 64"},
	} {
		doc := "apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: \"" + c.name + "\"}\nspec:\n  tier: read_only\n  http: {url: http://127.0.0.1:1/}\n  exports:\n    - name: " + c.export + "\n      description: d\n"
		_, err := f.load("names.yaml", doc)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "names.yaml") {
			t.Errorf("%s__%s: %v, want %q", c.name, c.export, err, c.want)
		}
	}
}
