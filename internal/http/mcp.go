package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// mcpListTTL is the ttlMs of tools/list and server/discover: how long a
// client may reuse the list. Short, because a reload changes it and the
// service cannot tell clients (it is stateless, so it sends no
// list_changed).
const mcpListTTL = 30_000

// handleMCP serves the caller's catalog as an MCP server over streamable
// HTTP (the go-sdk's handler), in stateless mode: every POST gets a fresh
// MCP server bound to the caller that the authenticate middleware found,
// so a session can never be used with another caller's token, and
// tools/list always shows the registry in use. Responses are plain JSON
// rather than event streams, which keeps curl usable. tools/call goes
// through the same executor, policy, limits and metrics as POST /calls.
//
// The SDK speaks both 2025-11-25 (initialize) and 2026-07-28
// (server/discover, resultType, Mcp-Method/Mcp-Name headers, list
// caching); around it, errors the SDK writes as text/plain become JSON-RPC
// errors, a JSON-RPC batch holds at most registry.MaxBatchCalls messages,
// like POST /calls/batch, and at most one tools/list, and a tools/call
// ends when its HTTP request does, whatever the revision.
func (s *Server) handleMCP() http.Handler {
	h := mcp.NewStreamableHTTPHandler(s.mcpServer, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		JSONResponse:                 true,
		MaxRequestBodyBytes:          s.deps.Limits.MaxRequestBytes,
		PropagateRequestCancellation: true,
		Logger:                       quiet(s.deps.Logger),
		// loopbackHost applies the same rule to every route, and lifts
		// it when the service takes credentials (a sidecar's name).
		DisableLocalhostProtection: true,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonRPCErrors{ResponseWriter: w}
		defer jw.finish()
		wants, err := boundBatch(jw, r, s.deps.Limits.MaxRequestBytes)
		if err != nil {
			writeJSONRPC(jw, err.status, err.code, err.msg)
			return
		}
		h.ServeHTTP(jw, r.WithContext(context.WithValue(r.Context(), mcpWantsKey{}, wants)))
	})
}

// mcpServer is the MCP server of one request: the caller's catalog, each
// tool answered by the executor for that caller.
func (s *Server) mcpServer(r *http.Request) *mcp.Server {
	wants, _ := r.Context().Value(mcpWantsKey{}).(*mcpWants)
	if wants == nil {
		wants = &mcpWants{all: true}
	}
	if wants.srv != nil {
		return wants.srv // the SDK asks twice per request
	}
	caller := CallerFrom(r.Context())
	span := trace.SpanFromContext(r.Context())
	base := requestBase(r)
	srv := mcp.NewServer(&mcp.Implementation{Name: "toolsvc", Title: "toolsvc tools", Version: s.version()}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		Logger:       quiet(s.deps.Logger),
		// The list differs per caller: only that caller's client may cache it.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.CacheScope, c.TTLMs = "private", mcpListTTL
		},
	})
	// Only tools are served: the SDK would answer prompts and resources
	// lists (empty) although the capabilities do not declare them.
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "prompts/") || strings.HasPrefix(method, "resources/") {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is not served: this server has tools only", method)}
			}
			return next(ctx, method, req)
		}
	})
	handler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		// The SDK ties a handler's context to the HTTP request only for
		// 2026-07-28 requests (PropagateRequestCancellation); tie it for
		// every revision, or a client of an older one could hang up and
		// leave its calls holding slots until they time out. Stateless,
		// each POST is one exchange: once it ends, no one can get the
		// answer.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(r.Context(), cancel)()
		if res, err := s.mcpLimit(ctx, caller, req.Params.Name); res != nil || err != nil {
			return res, err
		}
		// Keep the HTTP request's span as the parent of execute_tool.
		ctx = trace.ContextWithSpan(ctx, span)
		if req.Params.RequestState != "" || req.Params.InputResponses != nil {
			// The retry of an input_required result: the caller's answer.
			res, err := s.mcpAnswer(ctx, caller, req.Params)
			return linkCutOutputs(res, base), err
		}
		return linkCutOutputs(s.mcpCall(ctx, caller, req.Params, canElicit(req)), base), nil
	}
	if wants.all || len(wants.names) > 0 {
		f := registry.Filter{}
		if !wants.all {
			f.Names = wants.names
		}
		for _, t := range s.deps.Executor.Registry().List(caller, f) {
			s.mcpAddTool(srv, t, handler)
		}
	}
	wants.srv = srv
	return srv
}

// mcpWantsKey is the context key of a request's *mcpWants.
type mcpWantsKey struct{}

// mcpWants is what the messages of one POST to /mcp need of the catalog.
// Giving the SDK a tool costs several JSON round trips of its schemas, so
// a request gets only the tools it uses: every tool for tools/list, the
// named ones for tools/call, none for the rest (initialize, ping,
// server/discover, …), and the server is built once although the SDK asks
// for it twice. Otherwise every message, even a ping, would cost the
// whole catalog twice: 0.2 CPU seconds and 80 MB of garbage with 500
// tools.
type mcpWants struct {
	all   bool
	names []string
	// srv is the request's server, once built.
	srv *mcp.Server
}

// add notes what one JSON-RPC message needs, and returns its method. A
// message that cannot be read needs nothing: the SDK refuses it without
// looking at the tools. Keys are matched exactly, as the SDK matches them.
func (w *mcpWants) add(msg json.RawMessage) (method string) {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return ""
	}
	if json.Unmarshal(m["method"], &method) != nil {
		return ""
	}
	switch method {
	case "tools/list":
		w.all = true
	case "tools/call":
		var p map[string]json.RawMessage
		var name string
		if json.Unmarshal(m["params"], &p) == nil && json.Unmarshal(p["name"], &name) == nil && name != "" {
			w.names = append(w.names, name)
		}
	}
	return method
}

// CheckMCPTool says why /mcp could not serve t: the MCP SDK refuses its
// definition (say, an x-mcp-header annotation on a property that is not a
// string, integer or boolean). The program checks the tools of its
// configuration with it as it loads them, so that such a tool stops the
// start with its file and line; tools of MCP servers, whose SDK client
// already leaves such tools out, are only left out of /mcp (mcpAddTool).
func CheckMCPTool(t *registry.Tool) (err error) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "toolsvc"}, nil)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the MCP SDK refuses it: %v", p)
		}
	}()
	srv.AddTool(mcpSDKTool(t), func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
	return nil
}

// mcpAddTool adds t to srv, or leaves it out, logged at error level with
// the SDK's reason, when the SDK refuses it (it panics on, say, an
// x-mcp-header annotation on a property that is not a string, integer or
// boolean): one tool the SDK cannot serve must not make every request to
// /mcp fail for every caller who sees it.
func (s *Server) mcpAddTool(srv *mcp.Server, t *registry.Tool, h mcp.ToolHandler) {
	defer func() {
		if p := recover(); p != nil {
			s.deps.Logger.Error("mcp: a tool cannot be served over /mcp and is left out of it; fix its definition",
				"tool", t.Name, "source", t.Source, "error", fmt.Sprint(p))
		}
	}()
	srv.AddTool(mcpSDKTool(t), h)
}

// mcpSDKTool is the SDK's form of the catalog entry mcpEntry renders.
func mcpSDKTool(t *registry.Tool) *mcp.Tool {
	e := mcpEntry(t)
	out := &mcp.Tool{
		Name:        e.Name,
		Title:       e.Title,
		Description: e.Description,
		InputSchema: e.InputSchema,
		Annotations: &mcp.ToolAnnotations{
			Title:           e.Annotations.Title,
			ReadOnlyHint:    e.Annotations.ReadOnlyHint,
			DestructiveHint: e.Annotations.DestructiveHint,
			IdempotentHint:  e.Annotations.IdempotentHint,
			OpenWorldHint:   e.Annotations.OpenWorldHint,
		},
	}
	if len(e.OutputSchema) > 0 {
		out.OutputSchema = e.OutputSchema
	}
	return out
}

// mcpCall runs one tools/call. Every outcome of a call that was taken is
// a CallToolResult ("the tool failed" is a result, not a protocol error);
// an unknown tool never gets here (the SDK answers -32602). A call sent
// for approval that the caller may approve themselves is, for a client
// that can answer (elicit), an input_required result asking them to.
func (s *Server) mcpCall(ctx context.Context, caller *registry.Caller, p *mcp.CallToolParamsRaw, elicit bool) *mcp.CallToolResult {
	if !caller.Has(registry.ScopeCall) {
		return mcpText(fmt.Sprintf("This caller lacks the %q scope and cannot call tools.", registry.ScopeCall))
	}
	res, err := s.deps.Executor.Execute(ctx, caller, &registry.Call{ToolName: p.Name, Arguments: p.Arguments})
	if errors.Is(err, registry.ErrOverloaded) {
		return mcpText("The service is busy (too many tool calls at once). Wait a few seconds and call the tool again.")
	}
	if err != nil {
		return mcpText("The call could not be taken: " + err.Error())
	}
	if elicit && res.Status == registry.StatusPendingApproval && res.Approval != nil {
		if ask := s.mcpAskCaller(ctx, caller, res.Approval.ID); ask != nil {
			return ask
		}
	}
	return mcpToolResult(res)
}

// mcpToolResult is the CallToolResult of a result.
func mcpToolResult(res *registry.Result) *mcp.CallToolResult {
	w := mcpResult(res)
	out := &mcp.CallToolResult{IsError: w.IsError, Content: []mcp.Content{&mcp.TextContent{Text: w.Content[0].Text}}}
	if len(w.StructuredContent) > 0 {
		out.StructuredContent = w.StructuredContent
	}
	return out
}

// mcpRateLimited is the JSON-RPC error of a tools/call over the caller's
// rate limit: an implementation-defined server error (-32000..-32099),
// with the wait in data.retryAfter (seconds), as the HTTP status of a
// JSON-RPC response over streamable HTTP stays 200.
const mcpRateLimited = -32029

// mcpLimit applies the caller's rate limit to one tools/call. Over the
// limit the answer is the error mcpRateLimited. A shared limiter that does
// not answer (failing closed) limits no one: that call is answered as the
// other calls a failing dependency stops are (mcpCall), with a tool result
// saying it did not run.
func (s *Server) mcpLimit(ctx context.Context, caller *registry.Caller, tool string) (*mcp.CallToolResult, error) {
	_, err := s.limitCalls(ctx, caller, []string{tool})
	var rl *rateLimited
	var down *limiterDown
	switch {
	case errors.As(err, &down):
		return mcpText(fmt.Sprintf("The call did not run: the service's shared rate limiter is not answering. Call the tool again in %d s.", down.retryAfter)), nil
	case !errors.As(err, &rl):
		return nil, err
	}
	p := rl.problem()
	data, _ := json.Marshal(map[string]any{"code": p.Code, "retryAfter": p.RetryAfter, "limit": rl.d.Limit, "remaining": rl.d.Remaining})
	return nil, &jsonrpc.Error{Code: mcpRateLimited, Message: p.Detail, Data: data}
}

func mcpText(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// version is the serverInfo.version of /mcp: the service's version, else
// the module's from build info, with the VCS revision when known.
func (s *Server) version() string {
	if s.deps.Version != "" && s.deps.Version != "dev" {
		return s.deps.Version
	}
	v := s.deps.Version
	if bi, ok := debug.ReadBuildInfo(); ok {
		if mv := bi.Main.Version; mv != "" && mv != "(devel)" {
			v = mv
		}
		for _, st := range bi.Settings {
			if st.Key == "vcs.revision" && len(st.Value) >= 12 {
				v += "+" + st.Value[:12]
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	return v
}

// rpcError is a JSON-RPC error answered before the SDK sees the request.
type rpcError struct {
	status int
	code   int64
	msg    string
}

// boundBatch refuses a JSON-RPC batch that is empty, holds more than
// registry.MaxBatchCalls messages or more than one tools/list (the SDK
// takes batches from clients of revisions before 2025-06-18), leaves the
// body readable for the SDK, and says which tools its messages need.
//
// The size of an answer, not the count of messages, is what costs: the
// answer to tools/list is the whole catalog (0.9 MB with 415 tools), so a
// 2.7 KB batch of 50 of them was answered with 45 MB and took 300 MB of
// memory. One list per request is all a client needs (a next page needs
// the cursor of the one before).
func boundBatch(w *jsonRPCErrors, r *http.Request, limit int64) (*mcpWants, *rpcError) {
	wants := &mcpWants{}
	if r.Method != http.MethodPost || r.Body == nil {
		return wants, nil
	}
	body, err := readBody(w, r, limit)
	r.Body.Close()
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, &rpcError{http.StatusRequestEntityTooLarge, jsonrpc.CodeInvalidRequest, fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit)}
	}
	if err != nil {
		return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeParseError, "the request body could not be read: " + err.Error()}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		var one struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(trimmed, &one) == nil {
			if _, bad := rpcIDKey(one.ID); bad != "" {
				return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest, bad}
			}
			w.id = one.ID
		}
		wants.add(trimmed)
		return wants, nil
	}
	var batch []json.RawMessage
	if json.Unmarshal(trimmed, &batch) != nil {
		return wants, nil // the SDK reports the parse error
	}
	if len(batch) == 0 {
		// JSON-RPC 2.0 answers an empty array as an invalid request; the
		// SDK would call it a parse error.
		return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest, "the JSON-RPC batch is empty; send at least one message"}
	}
	if len(batch) > registry.MaxBatchCalls {
		return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("the JSON-RPC batch holds %d messages; at most %d are allowed, so split it", len(batch), registry.MaxBatchCalls)}
	}
	seen := make(map[string]int, len(batch))
	list := 0 // the message that is a tools/list, counting from 1
	for i, msg := range batch {
		var one struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(msg, &one) == nil {
			key, bad := rpcIDKey(one.ID)
			if bad != "" {
				return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest, fmt.Sprintf("message %d of the batch: %s", i+1, bad)}
			}
			if j, ok := seen[key]; ok && key != "" {
				return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest,
					fmt.Sprintf("messages %d and %d of the batch have the same id %s; each request of a batch needs an id of its own, so that its answer can be told apart", j+1, i+1, one.ID)}
			}
			seen[key] = i
		}
		if wants.add(msg) == "tools/list" {
			if list != 0 {
				return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest,
					fmt.Sprintf("messages %d and %d of the batch are both tools/list; a batch may hold at most one, as its answer is the whole catalog, so send one tools/list", list, i+1)}
			}
			list = i + 1
		}
	}
	return wants, nil
}

// maxRPCID bounds a numeric JSON-RPC id: the MCP SDK reads ids as
// doubles, so past 2^53 two ids can be read as one.
const maxRPCID = 1<<53 - 1

// rpcIDKey returns what tells a request's id apart from others ("" for a
// notification's absent or null id), or why the id cannot be answered
// with as sent: the SDK reads a number as an int64 by way of a double, so
// it would answer 1.5 as 1 and 2^64 as -2^63, and the client could not
// tell which request an answer is for.
func rpcIDKey(id json.RawMessage) (key, bad string) {
	id = bytes.TrimSpace(id)
	if len(id) == 0 || string(id) == "null" {
		return "", ""
	}
	switch c := id[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(id, &s) != nil {
			return "", ""
		}
		return "s:" + s, ""
	case c == '-' || (c >= '0' && c <= '9'):
		n, err := strconv.ParseInt(string(id), 10, 64)
		if err != nil || n > maxRPCID || n < -maxRPCID {
			return "", fmt.Sprintf("the id %.40s is not an integer between -(2^53-1) and 2^53-1 (or a string); answers could not carry it back as sent", id)
		}
		return "n:" + strconv.FormatInt(n, 10), ""
	}
	return "", "" // the SDK refuses other ids
}

// jsonRPCErrors turns the SDK's text/plain error answers (bad headers,
// wrong content type, oversized body, malformed JSON) into JSON-RPC error
// responses with id null, keeping the HTTP status.
type jsonRPCErrors struct {
	http.ResponseWriter
	status  int
	text    bytes.Buffer
	capture bool
	// id is the request's id, when the body is one message.
	id json.RawMessage
}

func (w *jsonRPCErrors) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	h := w.Header()
	if status >= 400 && strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		w.capture = true
		h.Del("Content-Length")
		h.Del("X-Content-Type-Options")
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *jsonRPCErrors) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.capture {
		return w.text.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *jsonRPCErrors) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && !w.capture {
		f.Flush()
	}
}

func (w *jsonRPCErrors) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes a captured text error as a JSON-RPC error.
func (w *jsonRPCErrors) finish() {
	if !w.capture {
		return
	}
	w.capture = false
	code := int64(jsonrpc.CodeInvalidRequest)
	msg := strings.TrimSpace(w.text.String())
	var id json.RawMessage
	switch {
	case strings.HasPrefix(msg, "malformed payload"):
		code = jsonrpc.CodeParseError
	case strings.HasPrefix(msg, "JSON RPC not handled"):
		// The SDK answers an unknown method with -32601 from 2026-07-28
		// on, and with a text error before.
		code, id = jsonrpc.CodeMethodNotFound, w.id
	}
	writeJSONRPCID(w, w.status, id, code, msg)
}

// writeJSONRPC writes a JSON-RPC error response (id null: the request's id
// is unknown or unread) with an HTTP status.
func writeJSONRPC(w http.ResponseWriter, status int, code int64, msg string) {
	writeJSONRPCID(w, status, nil, code, msg)
}

func writeJSONRPCID(w http.ResponseWriter, status int, id json.RawMessage, code int64, msg string) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	if jw, ok := w.(*jsonRPCErrors); ok {
		jw.status = 0
		jw.capture = false
		jw.ResponseWriter.WriteHeader(status)
		_, _ = jw.ResponseWriter.Write(body)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
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
