package custom

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// aliasTool is a Tool whose parameters hold levels anchors, each a
// sequence that repeats the one before nine times: a few hundred bytes
// of YAML that expand to 9^levels values.
func aliasTool(levels int) string {
	var b strings.Builder
	b.WriteString(`apiVersion: toolsvc/v1
kind: Tool
metadata:
  name: bomb
spec:
  tier: read_only
  http:
    url: http://127.0.0.1:1/
  exports:
    - name: go
      description: Expands.
      parameters:
        type: object
        x0: &a0 [y, y, y, y, y, y, y, y, y]
`)
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "        x%d: &a%d [*a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d, *a%[3]d]\n", i, i, i-1)
	}
	return b.String()
}

// TestSchemaAliasesAreBounded: aliases that expand a schema past
// maxSchemaBytes are refused at load, at the alias that does it, where
// they made a 547-byte file a 3.8 MB schema in every catalog (6 levels)
// or took a minute and 4.7 GB to load (8).
func TestSchemaAliasesAreBounded(t *testing.T) {
	f := newFixture(t, sandbox.ModeOff)
	doc := aliasTool(6)
	_, err := f.load("bomb.yaml", doc)
	if err == nil {
		t.Fatalf("a %d-byte file with aliases loaded", len(doc))
	}
	want := `bomb.yaml:1: Tool "bomb": export go: parameters: line 19: the schema is more than 1048576 bytes as JSON through this alias`
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "use fewer aliases") {
		t.Errorf("got  %v\nwant %s…", err, want)
	}
	// A schema that reuses a part with an alias, as YAML allows, loads.
	tools, err := f.load("reuse.yaml", `apiVersion: toolsvc/v1
kind: Tool
metadata:
  name: reuse
spec:
  tier: read_only
  http:
    url: http://127.0.0.1:1/
  exports:
    - name: go
      description: Reuses.
      parameters:
        type: object
        properties:
          from: &city {type: string, maxLength: 100}
          to: *city
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(tools[0].Parameters); got != `{"type":"object","properties":{"from":{"type":"string","maxLength":100},"to":{"type":"string","maxLength":100}}}` {
		t.Errorf("parameters %s", got)
	}
}
