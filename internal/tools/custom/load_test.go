package custom

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

func TestLoadDefinition(t *testing.T) {
	f := newFixture(t, sandbox.ModeOff)
	tools, err := f.load("weather.yaml", `# a comment
apiVersion: toolsvc/v1
kind: Tool
metadata:
  name: weather
spec:
  tier: read_only
  timeout: 5s
  maxOutputBytes: 2048
  errorMessageLimit: 300
  tags: [weather, demo]
  http:
    url: http://127.0.0.1:1/weather
  exports:
    - name: forecast
      description: >
        Forecast for a city.
      parameters:
        type: object
        properties:
          city: {type: string, maxLength: 100, description: "City name, e.g. <Paris>"}
          days: {type: integer, minimum: 1, maximum: 7}
          units: {enum: [metric, imperial], default: metric}
        required: [city]
        additionalProperties: false
    - name: alerts
      description: Weather alerts that may change state.
      tier: side_effecting
      annotations: {title: Alerts, openWorldHint: true}
      parameters: '{"type": "object", "properties": {"region": {"type": "string"}}}'
    - name: ping
      description: No arguments.
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != 3 {
		t.Fatalf("%d tools", len(tools))
	}
	fc := tools[0].Definition
	if fc.Name != "weather__forecast" || fc.Description != "Forecast for a city." || fc.Tier != registry.ReadOnly ||
		fc.Timeout != 5*time.Second || fc.MaxOutputBytes != 2048 || fc.ErrorMessageLimit != 300 ||
		strings.Join(fc.Tags, ",") != "weather,demo" || fc.Type != TypeHTTP || !strings.HasSuffix(fc.Source, "weather.yaml:2") {
		t.Errorf("definition: %+v", fc)
	}
	// Key order is kept, and "<" is not HTML-escaped.
	want := `{"type":"object","properties":{"city":{"type":"string","maxLength":100,"description":"City name, e.g. <Paris>"},"days":{"type":"integer","minimum":1,"maximum":7},"units":{"enum":["metric","imperial"],"default":"metric"}},"required":["city"],"additionalProperties":false}`
	if string(fc.Parameters) != want {
		t.Errorf("parameters:\n%s\nwant\n%s", fc.Parameters, want)
	}
	al := tools[1].Definition
	if al.Tier != registry.SideEffecting || al.Annotations == nil || al.Annotations.Title != "Alerts" || *al.Annotations.OpenWorldHint != true ||
		string(al.Parameters) != `{"type":"object","properties":{"region":{"type":"string"}}}` {
		t.Errorf("alerts: %+v %s", al, al.Parameters)
	}
	if string(tools[2].Parameters) != noParameters {
		t.Errorf("ping parameters: %s", tools[2].Parameters)
	}
	if _, err := registry.New(registry.Defaults{}, tools...); err != nil {
		t.Errorf("registry refuses the tools: %v", err)
	}
	var schema map[string]any
	if err := json.Unmarshal(fc.Parameters, &schema); err != nil {
		t.Error(err)
	}
}

func TestLoadErrors(t *testing.T) {
	f := newFixture(t, sandbox.ModeOff)
	head := "apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: t}\nspec:\n"
	ok := "  tier: read_only\n  http: {url: http://127.0.0.1:1/x}\n  exports: [{name: a, description: A.}]\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", head + ok + "  bogus: 1\n", "line 8: field bogus not found"},
		{"unknown export field", head + "  tier: read_only\n  http: {url: http://127.0.0.1:1/x}\n  exports:\n    - name: a\n      description: A.\n      tiers: x\n", "line 10: field tiers not found"},
		{"no backend", head + "  tier: read_only\n  exports: [{name: a, description: A.}]\n", "bad.yaml:1: Tool \"t\": has no backend"},
		{"two backends", head + ok + "  exec: {command: [true]}\n", "not both"},
		{"no exports", head + "  tier: read_only\n  http: {url: http://127.0.0.1:1/x}\n", "has no exports"},
		{"no tier", head + "  http: {url: http://127.0.0.1:1/x}\n  exports: [{name: a, description: A.}]\n", "export a has no tier"},
		{"bad tier", head + "  tier: harmless\n  http: {url: http://127.0.0.1:1/x}\n  exports: [{name: a, description: A.}]\n", "unknown tier \"harmless\""},
		{"bad export name", head + "  tier: read_only\n  http: {url: http://127.0.0.1:1/x}\n  exports: [{name: a.b, description: A.}]\n", "exports[0].name"},
		{"bad resource name", strings.Replace(head, "name: t}", "name: _t}", 1) + ok, "metadata.name"},
		{"bad url", head + "  tier: read_only\n  http: {url: ftp://x/y}\n  exports: [{name: a, description: A.}]\n", "absolute http or https URL"},
		{"unset header variable", head + "  tier: read_only\n  http:\n    url: http://127.0.0.1:1/x\n    headers:\n      Authorization: {valueFrom: {env: NOPE}}\n  exports: [{name: a, description: A.}]\n", "line 9: environment variable NOPE is not set"},
		{"missing program", head + "  tier: read_only\n  exec: {command: [./nope.sh]}\n  exports: [{name: a, description: A.}]\n", "not an executable file"},
		{"program not in path", head + "  tier: read_only\n  exec: {command: [no-such-program-xyz]}\n  exports: [{name: a, description: A.}]\n", "not installed"},
		{"loader variable", head + "  tier: read_only\n  exec: {command: [true], env: [LD_PRELOAD=/x.so]}\n  exports: [{name: a, description: A.}]\n", "LD_PRELOAD is refused"},
		{"parameters not an object", head + "  tier: read_only\n  http: {url: http://127.0.0.1:1/x}\n  exports:\n    - name: a\n      description: A.\n      parameters: [1, 2]\n", "line 10: want a JSON Schema object"},
		{"duplicate key", head + "  tier: read_only\n  http: {url: http://127.0.0.1:1/x}\n  exports:\n    - name: a\n      description: A.\n      parameters: {type: object, type: object}\n", "appears twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.load("bad.yaml", tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRegistryErrorsNameTheFile(t *testing.T) {
	f := newFixture(t, sandbox.ModeOff)
	tools, err := f.load("schema.yaml", `apiVersion: toolsvc/v1
kind: Tool
metadata: {name: s}
spec:
  tier: read_only
  http: {url: "http://127.0.0.1:1/x"}
  exports:
    - name: a
      description: A.
      parameters: {type: array}
`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = registry.New(registry.Defaults{}, tools...)
	if err == nil || !strings.Contains(err.Error(), "schema.yaml:1: tool \"s__a\"") {
		t.Fatalf("registry error: %v", err)
	}
}
