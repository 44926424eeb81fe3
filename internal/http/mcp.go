package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// handleMCP serves the caller's catalog as an MCP server over streamable
// HTTP (the go-sdk's handler), in stateless mode: every POST gets a fresh
// MCP server bound to the caller that the authenticate middleware found,
// so a session can never be used with another caller's token, and
// tools/list always shows the registry in use (a reload needs no
// list_changed). Responses are plain JSON rather than event streams,
// which keeps curl usable. tools/call goes through the same executor,
// policy, limits and metrics as POST /calls.
func (s *Server) handleMCP() http.Handler {
	return mcp.NewStreamableHTTPHandler(s.mcpServer, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		JSONResponse:                 true,
		MaxRequestBodyBytes:          s.deps.Limits.MaxRequestBytes,
		PropagateRequestCancellation: true,
		Logger:                       quiet(s.deps.Logger),
	})
}

// mcpServer is the MCP server of one request: tools/list and tools/call
// are answered from the executor for the request's caller.
func (s *Server) mcpServer(r *http.Request) *mcp.Server {
	caller := CallerFrom(r.Context())
	span := trace.SpanFromContext(r.Context())
	srv := mcp.NewServer(&mcp.Implementation{Name: "toolsvc", Title: "toolsvc tools"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		Logger:       quiet(s.deps.Logger),
	})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch method {
			case "tools/list":
				return s.mcpList(caller), nil
			case "tools/call":
				call, ok := req.(*mcp.CallToolRequest)
				if !ok {
					return next(ctx, method, req)
				}
				// Keep the HTTP request's span as the parent of execute_tool.
				return s.mcpCall(trace.ContextWithSpan(ctx, span), caller, call.Params), nil
			}
			return next(ctx, method, req)
		}
	})
	return srv
}

func (s *Server) mcpList(caller *registry.Caller) *mcp.ListToolsResult {
	tools := s.deps.Executor.Registry().List(caller, registry.Filter{})
	out := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, 0, len(tools))}
	for _, t := range tools {
		a := mcpAnnotations(t)
		out.Tools = append(out.Tools, &mcp.Tool{
			Name:        t.Name,
			Title:       a.Title,
			Description: t.Description,
			InputSchema: t.Parameters,
			Annotations: &mcp.ToolAnnotations{
				Title:           a.Title,
				ReadOnlyHint:    a.ReadOnlyHint,
				DestructiveHint: a.DestructiveHint,
				IdempotentHint:  a.IdempotentHint,
				OpenWorldHint:   a.OpenWorldHint,
			},
		})
	}
	return out
}

// mcpCall runs one tools/call. Every outcome is a CallToolResult ("the
// tool failed" is a result, not a protocol error), with the
// ToolCallResult as structured content so clients can read the code.
func (s *Server) mcpCall(ctx context.Context, caller *registry.Caller, p *mcp.CallToolParamsRaw) *mcp.CallToolResult {
	if !caller.Has(registry.ScopeCall) {
		return mcpText(true, fmt.Sprintf("This caller lacks the %q scope and cannot call tools.", registry.ScopeCall), nil)
	}
	res, err := s.deps.Executor.Execute(ctx, caller, &registry.Call{ToolName: p.Name, Arguments: p.Arguments})
	if errors.Is(err, registry.ErrOverloaded) {
		return mcpText(true, "The service is busy (too many tool calls at once). Wait a few seconds and call the tool again.", nil)
	}
	if err != nil {
		return mcpText(true, "The call could not be taken: "+err.Error(), nil)
	}
	// The text is what every other shape renders (renderText); MCP has no
	// "pending" result, so a call waiting for approval is an error result
	// (the tool did not run) that tells the model to stop and wait.
	switch res.Status {
	case registry.StatusOK:
		out := mcpText(false, renderText(res), nil)
		if trimmed := bytes.TrimSpace(res.Output); len(trimmed) > 0 && trimmed[0] == '{' {
			out.StructuredContent = json.RawMessage(trimmed)
		}
		return out
	default:
		return mcpText(true, renderText(res), res)
	}
}

func mcpText(isError bool, text string, structured *registry.Result) *mcp.CallToolResult {
	r := &mcp.CallToolResult{IsError: isError, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
	if structured != nil {
		r.StructuredContent = structured
	}
	return r
}

// quiet passes on only the SDK's warnings and errors: it logs every
// (stateless, so per-request) session at info, and the access log already
// has one line per request.
func quiet(l *slog.Logger) *slog.Logger {
	return slog.New(minLevel{Handler: l.Handler(), min: slog.LevelWarn})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
