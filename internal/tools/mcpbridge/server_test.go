package mcpbridge

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// TestMain lets the test binary be an MCP server over stdio
// ("mcp-stdio-server"), started by the stdio tests as a real process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ChildCommand {
		// The reaper of a stdio server (Options.Launcher), and the child
		// that executes the server.
		err := sandbox.RunChild(os.Args[2:], nil)
		fmt.Fprintln(os.Stderr, "sandbox child:", err)
		os.Exit(125)
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp-stdio-raw" {
		runRawServer(os.Args[2:])
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp-stdio-evil" {
		runEvilServer(os.Args[2:])
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp-stdio-flood" {
		runFloodServer()
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp-stdio-server" {
		srv := newTestServer(func() { os.Exit(3) })
		if len(os.Args) > 2 && os.Args[2] == "huge" {
			addHugeTool(srv)
		}
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "mcp test server:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type messageArgs struct {
	Message string `json:"message" jsonschema:"the text to echo"`
}

type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}

type sum struct {
	Sum int `json:"sum"`
}

type empty struct{}

func yes() *bool { b := true; return &b }

// newTestServer is the MCP server of the tests, over stdio or HTTP.
func newTestServer(crash func()) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "1.0.0"}, nil)
	var added atomic.Bool
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo a message.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, in messageArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Message}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "add", Description: "Add two integers."},
		func(ctx context.Context, req *mcp.CallToolRequest, in addArgs) (*mcp.CallToolResult, sum, error) {
			return nil, sum{in.A + in.B}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the widget is broken"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "files.delete", Description: "Pretend to delete files.", Annotations: &mcp.ToolAnnotations{DestructiveHint: yes()}},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted nothing"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "a__b", Description: "A name with the separator in it."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ab"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "meta", Description: "Return the request's _meta.traceparent and the server's pid."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, map[string]any, error) {
			tp, _ := req.Params.Meta["traceparent"].(string)
			return nil, map[string]any{"traceparent": tp, "pid": os.Getpid()}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "daemon", Description: "Start a sleeping daemon in a session of its own; return its pid."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, map[string]any, error) {
			cmd := exec.Command("sleep", "300")
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := cmd.Start(); err != nil {
				return nil, nil, err
			}
			go func() { _ = cmd.Wait() }() // reaped here while the server lives
			return nil, map[string]any{"pid": cmd.Process.Pid}, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "mixed", Description: "Return text and an image."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a picture:"}, &mcp.ImageContent{MIMEType: "image/png", Data: []byte{1, 2, 3}}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "slow", Description: "Wait until cancelled."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			<-ctx.Done()
			return nil, nil, ctx.Err()
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "grow", Description: "Add the tool 'late' (the server then sends list_changed)."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			if added.CompareAndSwap(false, true) {
				mcp.AddTool(srv, &mcp.Tool{Name: "late", Description: "Added at run time."},
					func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
						return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late but here"}}}, nil, nil
					})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "grown"}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "crash", Description: "Make the server exit."},
		func(ctx context.Context, req *mcp.CallToolRequest, in empty) (*mcp.CallToolResult, any, error) {
			crash()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "still here"}}}, nil, nil
		})
	return srv
}
