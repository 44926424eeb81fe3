package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/mcpbridge"
)

// TestMain lets the test binary be the units server over stdio, as the
// built units-mcp would be.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "serve-stdio" {
		if err := newServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestUnitsExample loads examples/mcp/units.yaml (pointed at this test
// binary instead of units-mcp) and calls the server's tools through the
// bridge and the executor.
func TestUnitsExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "mcp", "units.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "command: ./units-mcp") {
		t.Fatal("units.yaml no longer starts ./units-mcp")
	}
	text := strings.Replace(string(doc), "command: ./units-mcp", "command: "+exe, 1)
	text = strings.Replace(text, "args: []", "args: [serve-stdio]", 1)
	p := filepath.Join(t.TempDir(), "units.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcpbridge.Decode(rs[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	m := mcpbridge.NewManager(mcpbridge.Options{})
	defer m.Close()
	set := m.Ensure(context.Background(), []*mcpbridge.Server{srv})
	tools := m.Tools(set)
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	if reg.Len() != 2 {
		t.Fatalf("tools: %d, status %+v", reg.Len(), m.Status())
	}
	tl, ok := reg.Lookup("units__temperature_convert")
	if !ok || tl.Tier != registry.ReadOnly || tl.Timeout != 5*time.Second {
		t.Fatalf("units__temperature_convert: %+v", tl)
	}
	e := registry.NewExecutor(registry.Options{Registry: reg})
	call := func(name, args string) *registry.Result {
		res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: name, Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := call("units__length_convert", `{"value": 5, "from": "km", "to": "m"}`); string(res.Output) != `{"unit":"m","value":5000}` {
		t.Errorf("length: %s %+v", res.Output, res.Error)
	}
	if res := call("units__temperature_convert", `{"value": 100, "from": "C", "to": "F"}`); string(res.Output) != `{"unit":"F","value":212}` {
		t.Errorf("temperature: %s %+v", res.Output, res.Error)
	}
	if res := call("units__temperature_convert", `{"value": 1, "from": "X", "to": "F"}`); res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "C, F, K") {
		t.Errorf("bad unit: %+v", res.Error)
	}
}
