// Command units is a small MCP server for the examples: it converts
// lengths and temperatures. It speaks MCP over stdio by default, or over
// streamable HTTP with -http.
//
//	go build -o examples/mcp/units-mcp ./examples/units
//	examples/mcp/units-mcp -http 127.0.0.1:8182   # serves http://127.0.0.1:8182/mcp
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	addr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	flag.Parse()
	srv := newServer()
	if *addr == "" {
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "units:", err)
			os.Exit(1)
		}
		return
	}
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	mux := http.NewServeMux()
	mux.Handle("/mcp", handler)
	hs := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("units MCP server on http://%s/mcp", *addr)
	log.Fatal(hs.ListenAndServe())
}

type lengthIn struct {
	Value float64 `json:"value" jsonschema:"the length to convert"`
	From  string  `json:"from" jsonschema:"unit of value: m, km, mi, ft or in"`
	To    string  `json:"to" jsonschema:"unit to convert to: m, km, mi, ft or in"`
}

type tempIn struct {
	Value float64 `json:"value" jsonschema:"the temperature to convert"`
	From  string  `json:"from" jsonschema:"unit of value: C, F or K"`
	To    string  `json:"to" jsonschema:"unit to convert to: C, F or K"`
}

type result struct {
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

var metres = map[string]float64{"m": 1, "km": 1000, "mi": 1609.344, "ft": 0.3048, "in": 0.0254}

func newServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "units", Version: "1.0.0"}, nil)
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}
	mcp.AddTool(srv, &mcp.Tool{Name: "length.convert", Description: "Convert a length between m, km, mi, ft and in.", Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest, in lengthIn) (*mcp.CallToolResult, result, error) {
			from, ok1 := metres[in.From]
			to, ok2 := metres[in.To]
			if !ok1 || !ok2 {
				return toolError("units must be one of m, km, mi, ft, in"), result{}, nil
			}
			return nil, result{Value: in.Value * from / to, Unit: in.To}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "temperature.convert", Description: "Convert a temperature between C, F and K.", Annotations: readOnly},
		func(ctx context.Context, req *mcp.CallToolRequest, in tempIn) (*mcp.CallToolResult, result, error) {
			var k float64
			switch in.From {
			case "C":
				k = in.Value + 273.15
			case "F":
				k = (in.Value-32)*5/9 + 273.15
			case "K":
				k = in.Value
			default:
				return toolError("units must be one of C, F, K"), result{}, nil
			}
			var v float64
			switch in.To {
			case "C":
				v = k - 273.15
			case "F":
				v = (k-273.15)*9/5 + 32
			case "K":
				v = k
			default:
				return toolError("units must be one of C, F, K"), result{}, nil
			}
			return nil, result{Value: v, Unit: in.To}, nil
		})
	return srv
}

func toolError(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}
