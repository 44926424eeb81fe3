package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestBridgedOutputSchemaIsServed: a tool bridged from an MCP server (the
// Go SDK's, on loopback) that declares an outputSchema is served with it
// in the MCP shape and on /mcp, its structured content comes back as
// structuredContent, and content that breaks the schema is E_TOOL naming
// the bridged tool as faulty.
func TestBridgedOutputSchemaIsServed(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "weather", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "forecast", Description: "Tomorrow's forecast.",
		InputSchema:  json.RawMessage(`{"type":"object","required":["city"],"properties":{"city":{"type":"string"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","required":["city","celsius"],"properties":{"city":{"type":"string"},"celsius":{"type":"number"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ City string }
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			out := map[string]any{"city": in.City, "celsius": 21.5}
			if in.City == "Atlantis" {
				out["celsius"] = "unknown" // the server breaks its own schema
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "forecast"}}, StructuredContent: out}, nil
		})
	remote := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(remote.Close)
	c := newConfigDir(t)
	c.write("mcp.yaml", "apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: weather}\nspec:\n  http: {url: \""+remote.URL+"/mcp\"}\n", 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir)

	var entry struct {
		OutputSchema struct {
			Required []string `json:"required"`
		} `json:"outputSchema"`
	}
	getJSON(t, in.base+"/tools/weather__forecast?format=mcp", &entry)
	if strings.Join(entry.OutputSchema.Required, ",") != "city,celsius" {
		t.Errorf("outputSchema in the MCP shape: %+v", entry)
	}
	status, res := in.post("/calls?format=mcp", `{"toolName":"weather__forecast","arguments":{"city":"Oslo"}}`)
	if sc, _ := json.Marshal(res["structuredContent"]); status != 200 || res["isError"] != false || string(sc) != `{"celsius":21.5,"city":"Oslo"}` {
		t.Errorf("call: %d %v", status, res)
	}
	status, res = in.post("/calls", `{"toolName":"weather__forecast","arguments":{"city":"Atlantis"}}`)
	errObj, _ := res["error"].(map[string]any)
	if status != 200 || errObj["code"] != "E_TOOL" || errObj["name"] != "weather__forecast" ||
		!strings.Contains(errObj["message"].(string), "the tool weather__forecast is faulty") {
		t.Errorf("mismatch: %d %v", status, res)
	}

	// The same through toolsvc's own /mcp, with the SDK's client.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: in.base + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tl := range list.Tools {
		if tl.Name == "weather__forecast" {
			b, _ := json.Marshal(tl.OutputSchema)
			found = strings.Contains(string(b), `"celsius"`)
		}
	}
	if !found {
		t.Errorf("/mcp tools/list: weather__forecast without its outputSchema")
	}
	got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "weather__forecast", Arguments: map[string]any{"city": "Oslo"}})
	if err != nil {
		t.Fatal(err)
	}
	if sc, _ := json.Marshal(got.StructuredContent); got.IsError || string(sc) != `{"celsius":21.5,"city":"Oslo"}` {
		t.Errorf("/mcp tools/call: %+v %s", got, sc)
	}
	got, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "weather__forecast", Arguments: map[string]any{"city": "Atlantis"}})
	if err != nil {
		t.Fatal(err)
	}
	if text, _ := got.Content[0].(*mcp.TextContent); !got.IsError || got.StructuredContent != nil || text == nil || !strings.Contains(text.Text, "E_TOOL") {
		t.Errorf("/mcp tools/call of a faulty output: %+v", got)
	}
}
