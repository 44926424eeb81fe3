package mcpbridge

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestRefCyclesRefusedAtImport: a tool whose input schema's $refs go round
// in a cycle (a → b → a, or a schema that refers to itself) would answer
// every call with E_INVALID_ARGUMENTS ("causing reference cycle"), blaming
// the model; it is left out when imported. A recursive schema that
// descends into a member on the way (a linked list) is fine, and an output
// schema with a cycle is left off, the tool kept, as other output schemas
// toolsvc cannot use are.
func TestRefCyclesRefusedAtImport(t *testing.T) {
	h := newHTTPServer(t, "127.0.0.1:0")
	ok := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
	}
	for name, schema := range map[string]string{
		"refcycle":    `{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`,
		"refself":     `{"type":"object","$ref":"#"}`,
		"membercycle": `{"type":"object","$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"anyOf":[{"$ref":"#/$defs/a"}]}},"properties":{"x":{"$ref":"#/$defs/a"}}}`,
		"linkedlist":  `{"type":"object","$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}},"properties":{"head":{"$ref":"#/$defs/node"}}}`,
		"unusedcycle": `{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}}}`,
	} {
		h.srv.AddTool(&mcp.Tool{Name: name, Description: "A schema test.", InputSchema: json.RawMessage(schema)}, ok)
	}
	h.srv.AddTool(&mcp.Tool{Name: "outcycle", Description: "A cyclic output schema.", InputSchema: json.RawMessage(`{"type":"object"}`),
		OutputSchema: json.RawMessage(`{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`)}, ok)
	f := newFixture(t)
	f.env["MCP_TOKEN"] = "Bearer x"
	set := f.m.Ensure(context.Background(), []*Server{f.server(httpDoc("s", h.url()))})
	got := names(f.m.Tools(set))
	for _, refused := range []string{"s__refcycle", "s__refself", "s__membercycle"} {
		if slices.Contains(got, refused) {
			t.Errorf("%s was imported", refused)
		}
	}
	for _, kept := range []string{"s__linkedlist", "s__unusedcycle", "s__outcycle", "s__echo"} {
		if !slices.Contains(got, kept) {
			t.Errorf("%s was left out: %v", kept, got)
		}
	}
	e := f.executor(set)
	if res := execute(t, e, context.Background(), "s__linkedlist", `{"head": {"next": {"next": {}}}}`); res.Status != registry.StatusOK {
		t.Errorf("linkedlist: %+v", res.Error)
	}
	if res := execute(t, e, context.Background(), "s__outcycle", `{}`); res.Status != registry.StatusOK {
		t.Errorf("outcycle: %+v", res.Error)
	}

	for _, tc := range []struct{ schema, want string }{
		{`{"type":"object","$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "(#/$defs/a → #/$defs/b → #/$defs/a)"},
		{`{"type":"object","$ref":"#"}`, "(# → #)"},
	} {
		if err := refCycle("parameters", json.RawMessage(tc.schema)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.schema, err, tc.want)
		}
	}
}
