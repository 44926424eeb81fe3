package http

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
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
// HTTP (the go-sdk's handler), in stateless mode: every POST is a session
// of its own, of a server that holds the caller's catalog, and its calls
// run as the caller that the authenticate middleware found, so a session
// can never be used with another caller's token, and tools/list always
// shows the registry in use. Responses are plain JSON rather than event
// streams, which keeps curl usable. tools/call goes through the same
// executor, policy, limits and metrics as POST /calls.
//
// The SDK speaks both 2025-11-25 (initialize) and 2026-07-28
// (server/discover, resultType, Mcp-Method/Mcp-Name headers, list
// caching); around it, errors the SDK writes as text/plain become JSON-RPC
// errors, a JSON-RPC batch holds at most registry.MaxBatchCalls messages,
// like POST /calls/batch, and at most one tools/list, its calls are
// admitted as a batch's are (mcpBatch), and a tools/call ends when its
// HTTP request does, whatever the revision.
func (s *Server) handleMCP() http.Handler {
	servers := newMCPServers(s)
	h := mcp.NewStreamableHTTPHandler(servers.forRequest, &mcp.StreamableHTTPOptions{
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
		if _, params, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err == nil && r.Method == http.MethodPost {
			if msg := badCharset(params); msg != "" {
				writeJSONRPC(jw, http.StatusUnsupportedMediaType, jsonrpc.CodeInvalidRequest, msg)
				return
			}
		}
		wants, err := boundBatch(jw, r, s.deps.Limits.MaxRequestBytes)
		if err != nil {
			writeJSONRPCID(jw, err.status, err.id, err.code, err.msg)
			return
		}
		if v := r.Header.Get(mcpVersionHeader); v != "" && !slices.Contains(mcp.SupportedProtocolVersions(), v) {
			writeUnsupportedVersion(jw, v)
			return
		}
		ex := &mcpExchange{wants: wants, caller: CallerFrom(r.Context()), base: requestBase(r),
			span: trace.SpanFromContext(r.Context()), done: r.Context()}
		if wants.batch && wants.calls > 0 {
			ex.batch = newMCPBatch(s.deps.Batch)
		}
		h.ServeHTTP(jw, r.WithContext(context.WithValue(r.Context(), mcpExchangeKey{}, ex)))
	})
}

// mcpVersionHeader names the revision of a request to /mcp.
const mcpVersionHeader = "Mcp-Protocol-Version"

// writeUnsupportedVersion answers a request whose Mcp-Protocol-Version
// header names a revision the SDK does not speak, naming the header and
// the revisions it does (the SDK itself calls a future one "missing or
// invalid _meta field"), in the SDK's error of 2026-07-28 for it.
func writeUnsupportedVersion(w *jsonRPCErrors, v string) {
	supported := mcp.SupportedProtocolVersions()
	data, _ := json.Marshal(mcp.UnsupportedProtocolVersionData{Supported: supported, Requested: clipTo(v, maxEchoBytes)})
	writeJSONRPCData(w, http.StatusBadRequest, w.id, mcp.CodeUnsupportedProtocolVersion,
		fmt.Sprintf("the %s header names %q, a revision this server does not speak; send one of %s",
			mcpVersionHeader, clipTo(v, maxEchoBytes), strings.Join(supported, ", ")), data)
}

// mcpExchangeKey is the context key of a request's *mcpExchange.
type mcpExchangeKey struct{}

// mcpExchange is one POST to /mcp: what its messages need of the
// catalog, and what its tool calls run with. The servers are shared by
// requests, so the tool handler finds the request's own in its context
// (the SDK derives a handler's context from the request's).
type mcpExchange struct {
	wants  *mcpWants
	caller *registry.Caller
	// base is the scheme and host the request reached this server at.
	base string
	// span is the HTTP request's, the parent of execute_tool.
	span trace.Span
	// done ends with the HTTP request: the exchange is over.
	done context.Context
	// batch admits the tool calls of a JSON-RPC batch; nil otherwise.
	batch *mcpBatch
	// srv is the request's server, once found (the SDK asks twice per
	// request).
	srv *mcp.Server
}

// mcpServers gives each request to /mcp its MCP server. A tools/list
// needs every tool of the caller's catalog, and giving the SDK a tool
// costs several JSON round trips of its schemas (64 ms of CPU for 514
// tools, against 7 ms for GET /tools?format=mcp), so the server of a
// whole catalog is kept: one per catalog view (a caller's maxTier and
// tool globs) of the registry in use, at most maxMCPServers, the least
// recently used dropped first; a reload drops them all. Other requests
// get a server of only the tools they call, built for them, so that a
// caller whose view is new does not pay for the whole catalog to ping.
type mcpServers struct {
	s  *Server
	mu sync.Mutex
	// reg is the registry the kept servers hold the tools of.
	reg   *registry.Registry
	views map[string]*mcpView
	clock uint64
}

// maxMCPServers bounds the kept servers of whole catalogs.
const maxMCPServers = 32

// mcpView is the kept server of one catalog view, built once.
type mcpView struct {
	once sync.Once
	srv  *mcp.Server
	used uint64
}

func newMCPServers(s *Server) *mcpServers {
	return &mcpServers{s: s, views: map[string]*mcpView{}}
}

// forRequest is the MCP server of a request (nil, which the SDK answers
// with 400, outside handleMCP).
func (m *mcpServers) forRequest(r *http.Request) *mcp.Server {
	ex, _ := r.Context().Value(mcpExchangeKey{}).(*mcpExchange)
	if ex == nil {
		return nil
	}
	if ex.srv != nil {
		return ex.srv
	}
	reg := m.s.deps.Executor.Registry()
	switch {
	case ex.wants.all:
		ex.srv = m.whole(reg, ex.caller)
	case len(ex.wants.names) > 0:
		ex.srv = m.s.newMCPServer(reg.List(ex.caller, registry.Filter{Names: ex.wants.names}))
	default:
		ex.srv = m.s.newMCPServer(nil)
	}
	return ex.srv
}

// whole is the kept server of caller's whole catalog in reg, built on
// first use; requests that ask for it meanwhile wait for that one build.
func (m *mcpServers) whole(reg *registry.Registry, caller *registry.Caller) *mcp.Server {
	key := catalogView(caller)
	m.mu.Lock()
	if m.reg != reg {
		m.reg, m.views = reg, map[string]*mcpView{}
	}
	v := m.views[key]
	if v == nil {
		if len(m.views) >= maxMCPServers {
			m.evict()
		}
		v = &mcpView{}
		m.views[key] = v
	}
	m.clock++
	v.used = m.clock
	m.mu.Unlock()
	v.once.Do(func() { v.srv = m.s.newMCPServer(reg.List(caller, registry.Filter{})) })
	return v.srv
}

// evict drops the least recently used view; m.mu is held.
func (m *mcpServers) evict() {
	var oldest string
	var at uint64
	for k, v := range m.views {
		if oldest == "" || v.used < at {
			oldest, at = k, v.used
		}
	}
	delete(m.views, oldest)
}

// catalogView is what decides which tools of a registry a caller sees
// (Caller.Sees): callers with the same view see the same catalog.
func catalogView(c *registry.Caller) string {
	if c == nil {
		return "*"
	}
	return string(c.MaxTier) + "\x00" + strings.Join(c.Tools, "\x00")
}

// newMCPServer is an MCP server of tools, each answered by the executor
// for the caller of the request in whose context it is called.
func (s *Server) newMCPServer(tools []*registry.Tool) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "toolsvc", Title: "toolsvc tools", Version: s.version()}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		Logger:       quiet(s.deps.Logger),
		// The list differs per caller: only that caller's client may cache it.
		SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
			c.CacheScope, c.TTLMs = "private", mcpListTTL
		},
	})
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			// Only tools are served: the SDK would answer prompts and
			// resources lists (empty) although the capabilities do not
			// declare them.
			if strings.HasPrefix(method, "prompts/") || strings.HasPrefix(method, "resources/") {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("method %q is not served: this server has tools only", clipTo(method, maxEchoBytes))}
			}
			res, err := next(ctx, method, req)
			return res, clipRPCError(err, req)
		}
	})
	for _, t := range tools {
		s.mcpAddTool(srv, t, s.mcpHandle)
	}
	return srv
}

// clipRPCError bounds the message of a JSON-RPC error, which may quote
// what the client sent: the SDK answers a tools/call of a 1 MB name with
// that name. A tool name is echoed cut to maxEchoBytes, and every message
// to maxDetailBytes, as problem details are.
func clipRPCError(err error, req mcp.Request) error {
	var e *jsonrpc.Error
	if !errors.As(err, &e) {
		return err
	}
	if c, ok := req.(*mcp.CallToolRequest); ok && c.Params != nil && len(c.Params.Name) > maxEchoBytes {
		if q := strconv.Quote(c.Params.Name); strings.Contains(e.Message, q) {
			e.Message = strings.Replace(e.Message, q, strconv.Quote(clipTo(c.Params.Name, maxEchoBytes))+fmt.Sprintf(" (cut; the name has %d bytes)", len(c.Params.Name)), 1)
		}
	}
	if len(e.Message) > maxDetailBytes {
		e.Message = clipTo(e.Message, maxDetailBytes) + "…"
	}
	return err
}

// mcpHandle answers one tools/call for the caller of its request.
func (s *Server) mcpHandle(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ex, _ := ctx.Value(mcpExchangeKey{}).(*mcpExchange)
	if ex == nil {
		return nil, errors.New("internal error: a tools/call outside a request to /mcp")
	}
	// The SDK ties a handler's context to the HTTP request only for
	// 2026-07-28 requests (PropagateRequestCancellation); tie it for
	// every revision, or a client of an older one could hang up and
	// leave its calls holding slots until they time out. Stateless,
	// each POST is one exchange: once it ends, no one can get the
	// answer.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(ex.done, cancel)()
	if res, err := s.mcpLimit(ctx, ex.caller, req.Params.Name); res != nil || err != nil {
		return res, err
	}
	// Keep the HTTP request's span as the parent of execute_tool.
	ctx = trace.ContextWithSpan(ctx, ex.span)
	if req.Params.RequestState != "" || req.Params.InputResponses != nil {
		// The retry of an input_required result: the caller's answer.
		res, err := s.mcpAnswer(ctx, ex.caller, req.Params)
		return linkCutOutputs(res, ex.base), err
	}
	return linkCutOutputs(s.mcpCall(ctx, ex, req.Params, canElicit(req)), ex.base), nil
}

// mcpWants is what the messages of one POST to /mcp need of the catalog.
// Giving the SDK a tool costs several JSON round trips of its schemas, so
// a request gets only the tools it uses: the whole catalog for tools/list
// (a kept server, mcpServers), the named ones for tools/call, none for the
// rest (initialize, ping, server/discover, …), and the server is found
// once although the SDK asks for it twice. Otherwise every message, even
// a ping, would cost the whole catalog twice: 0.2 CPU seconds and 80 MB
// of garbage with 500 tools.
type mcpWants struct {
	all   bool
	names []string
	// batch: the body is a JSON-RPC batch, of calls tool calls.
	batch bool
	calls int
}

// add notes what one JSON-RPC message, read as the SDK reads it (member
// names matched exactly; none is given twice, twiceInMessage), needs, and
// returns its method. A message that cannot be read needs nothing: the
// SDK refuses it without looking at the tools.
func (w *mcpWants) add(m map[string]json.RawMessage) (method string) {
	if json.Unmarshal(m["method"], &method) != nil {
		return ""
	}
	switch method {
	case "tools/list":
		w.all = true
	case "tools/call":
		w.calls++
		var p map[string]json.RawMessage
		var name string
		if json.Unmarshal(m["params"], &p) == nil && json.Unmarshal(p["name"], &name) == nil && name != "" {
			w.names = append(w.names, name)
		}
	}
	return method
}

// envelope is a JSON-RPC message's members as the SDK reads them: by
// their exact names (its decoder matches names case-sensitively), once
// boundBatch has refused a name given twice. A struct field tagged "id" would be filled by
// encoding/json from "Id" or "ID" too, and from the last of them, so
// {"id":1.5,"Id":2} would pass the id check as 2 and be answered as 1.
// nil when msg is not a JSON object.
func envelope(msg json.RawMessage) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil {
		return nil
	}
	return m
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
func (s *Server) mcpCall(ctx context.Context, ex *mcpExchange, p *mcp.CallToolParamsRaw, elicit bool) *mcp.CallToolResult {
	caller := ex.caller
	if !caller.Has(registry.ScopeCall) {
		return mcpText(fmt.Sprintf("This caller lacks the %q scope and cannot call tools.", registry.ScopeCall))
	}
	call := &registry.Call{ToolName: p.Name, Arguments: p.Arguments}
	var res *registry.Result
	var err error
	var waited time.Duration
	if ex.batch != nil {
		res, err = ex.batch.execute(ctx, s.deps.Executor, caller, call)
		waited = ex.batch.wait()
	} else {
		res, err = s.deps.Executor.Execute(ctx, caller, call)
	}
	if errors.Is(err, registry.ErrOverloaded) {
		return mcpText(overloadedText(err, waited))
	}
	if err != nil {
		return s.mcpNotTaken(ctx, ex, p.Name, err)
	}
	if elicit && res.Status == registry.StatusPendingApproval && res.Approval != nil {
		if ask := s.mcpAskCaller(ctx, caller, res.Approval.ID); ask != nil {
			return ask
		}
	}
	return mcpToolResult(res)
}

// mcpNotTaken is the result of a call the executor refused before it ran
// (the store not answering, out of disk): the detail POST /calls answers
// with, which says that the call did not run, so that a model does not go
// looking for a side effect that never happened. The cause, which may
// name internals, goes to the log only.
func (s *Server) mcpNotTaken(ctx context.Context, ex *mcpExchange, tool string, err error) *mcp.CallToolResult {
	p := problemFor(err)
	logAt := s.deps.Logger.ErrorContext
	switch {
	case ex.done.Err() != nil:
		// The client left; the answer reaches nobody (see writeProblem).
		logAt = s.deps.Logger.InfoContext
	case needsOperator(err):
		// /readyz says so too; a line per call pages nobody more.
		logAt = s.deps.Logger.WarnContext
	}
	logAt(ctx, "mcp: a tool call could not be taken", "tool", clipTo(tool, maxEchoBytes), "error", err)
	return mcpText("The call could not be taken: " + p.Detail + ".")
}

// overloadedText is the result of a call refused for want of capacity,
// naming the limit that refused it: the tool's own (maxConcurrency) or
// the service's; waited is how long the call waited for capacity.
func overloadedText(err error, waited time.Duration) string {
	var limit *registry.ToolLimitError
	what := "The service is busy: it is at its limit of tool calls running at once"
	if errors.As(err, &limit) {
		what = fmt.Sprintf("Tool %s is busy: it runs at most %d calls at once, and that many are running", limit.Tool, limit.Max)
	}
	if waited > 0 {
		what += fmt.Sprintf(", and none ended within %s", waited)
	}
	return what + "; this call did not run, nothing was executed. Wait a few seconds and call the tool again."
}

// mcpBatch admits the tool calls of one JSON-RPC batch as ExecuteBatch
// admits a batch's calls (see POST /calls/batch). The SDK runs a batch's
// messages at once, each to Execute on its own, so a batch of 20 calls of
// a tool that runs 8 at once had 12 refused as overloaded by its own 8.
// Here the calls beyond a limit wait for the batch's own calls to end:
// read_only calls run side by side, at most TOOLSVC_BATCH_PARALLELISM at
// once and at most the tool's own maxConcurrency of one tool, and a call
// of another tier runs alone (in no set order: JSON-RPC lets a server
// answer a batch's messages in any). Each call then runs as a batch of
// one, so that it waits up to the batch's capacity wait for the slots
// other requests' calls hold, as a call of POST /calls/batch does. The
// executor keeps the service-wide limit to itself: where it is below the
// batch's parallelism, the calls beyond it wait for capacity as for
// other requests' calls, up to the capacity wait.
type mcpBatch struct {
	opts registry.BatchOptions
	// slots are the batch's calls running at once; a call of another
	// tier than read_only takes them all.
	slots chan struct{}
	// gather is held by a call that is taking every slot, so that two
	// such calls do not each hold some.
	gather chan struct{}
	mu     sync.Mutex
	// perTool bounds the batch's calls of a tool whose own limit is below
	// the batch's parallelism.
	perTool map[string]chan struct{}
}

func newMCPBatch(o registry.BatchOptions) *mcpBatch {
	n := o.Parallelism
	if n <= 0 {
		n = registry.DefaultBatchParallelism
	}
	return &mcpBatch{opts: o, slots: make(chan struct{}, n), gather: make(chan struct{}, 1), perTool: map[string]chan struct{}{}}
}

// wait is how long a call of the batch waits for capacity.
func (b *mcpBatch) wait() time.Duration {
	if b.opts.CapacityWait > 0 {
		return b.opts.CapacityWait
	}
	return registry.DefaultCapacityWait
}

// execute runs call once the batch admits it. A call whose request ended
// while it waited is answered as ExecuteBatch answers a call not started.
func (b *mcpBatch) execute(ctx context.Context, e Executor, caller *registry.Caller, call *registry.Call) (*registry.Result, error) {
	t, _ := e.Registry().Lookup(call.ToolName)
	release := b.admit(ctx, t)
	defer release()
	results, err := e.ExecuteBatch(ctx, caller, []*registry.Call{call}, b.opts)
	if err != nil {
		return nil, err
	}
	return results[0], nil
}

// admit waits until a call of t may start, and returns what gives its
// place back; when ctx ends first, the call takes no place.
func (b *mcpBatch) admit(ctx context.Context, t *registry.Tool) (release func()) {
	none := func() {}
	if t != nil && t.Tier != registry.ReadOnly {
		select {
		case b.gather <- struct{}{}:
		case <-ctx.Done():
			return none
		}
		defer func() { <-b.gather }()
		taken := 0
		release = func() {
			for range taken {
				<-b.slots
			}
		}
		for taken < cap(b.slots) {
			select {
			case b.slots <- struct{}{}:
				taken++
			case <-ctx.Done():
				release()
				return none
			}
		}
		return release
	}
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return none
	}
	own := b.own(t)
	if own == nil {
		return func() { <-b.slots }
	}
	select {
	case own <- struct{}{}:
	case <-ctx.Done():
		<-b.slots
		return none
	}
	return func() { <-own; <-b.slots }
}

// own is the batch's bound on its calls of t, nil when t's own limit does
// not bind before the batch's parallelism does.
func (b *mcpBatch) own(t *registry.Tool) chan struct{} {
	if t == nil || t.MaxConcurrency <= 0 || t.MaxConcurrency >= cap(b.slots) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := b.perTool[t.Name]
	if ch == nil {
		ch = make(chan struct{}, t.MaxConcurrency)
		b.perTool[t.Name] = ch
	}
	return ch
}

// mcpToolResult is the CallToolResult of a result. A result whose record
// the store has not taken yet (RecordPending) says so, as POST /calls
// does with recordPending and Toolsvc-Record: in _meta, for the client,
// and in a text block of its own after the result, for the model (the
// first block stays the output, which a client may parse).
func mcpToolResult(res *registry.Result) *mcp.CallToolResult {
	w := mcpResult(res)
	out := &mcp.CallToolResult{IsError: w.IsError, Content: []mcp.Content{&mcp.TextContent{Text: w.Content[0].Text}}}
	if len(w.StructuredContent) > 0 {
		out.StructuredContent = w.StructuredContent
	}
	if res.RecordPending {
		out.Meta = mcp.Meta{mcpRecordPendingMeta: true, mcpToolCallIDMeta: res.ToolCallID}
		out.Content = append(out.Content, &mcp.TextContent{Text: recordPendingText(res.ToolCallID)})
	}
	return out
}

// The _meta keys of a result whose record is not stored yet: the flag,
// and the call's toolCallId, under which GET /calls/{toolCallId} reads the
// record once it is (an MCP tools/call has no toolCallId of its own).
const (
	mcpRecordPendingMeta = "toolsvc/recordPending"
	mcpToolCallIDMeta    = "toolsvc/toolCallId"
)

// recordPendingText tells the model that the result it got is real but
// not yet stored. Repeating a tools/call is a new call, which would run
// the tool again: the model must not do that to make sure.
func recordPendingText(id string) string {
	return "Note: the tool ran and the result above is its real result, but the service could not store the record of this call yet " +
		"(its call store did not take it); it holds the result in memory and keeps trying to store it, so it is not yet durable. " +
		"Do not call the tool again because of this: a new call would run it again. (Tool call id: " + id + ".)"
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
	// id is the request's, when it is known; nil answers with id null.
	id json.RawMessage
}

// twiceInMessage returns the first member name that the JSON-RPC message
// msg, or its params outside the arguments of a call, holds twice in one
// object, dotted ("params.name"); "" when there is none, or when msg is
// not a JSON object (the SDK refuses it). inParams says whether the name
// is within params. JSON readers differ on which of two members counts,
// and the SDK takes the last, so {"params":{"name":"fs__read","name":
// "fs__delete"}} would show a proxy, a log or a person one tool and run
// another, and {"id":7,"id":8} be answered as 8. A name twice within the
// arguments is the executor's to refuse (E_INVALID_ARGUMENTS, with its
// JSON pointer), as it is for POST /calls. An envelope's name given twice
// is reported before one of its params.
func twiceInMessage(msg []byte) (member string, inParams bool) {
	d := jsontext.NewDecoder(bytes.NewBuffer(msg), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", false
	}
	seen := map[string]bool{}
	inParam := ""
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			break
		}
		name := tok.String()
		if seen[name] {
			return name, false
		}
		seen[name] = true
		v, err := d.ReadValue()
		if err != nil {
			break
		}
		if name == "params" && v.Kind() == '{' {
			if m := twiceInParams(v); m != "" {
				inParam = "params." + m
			}
		}
	}
	return inParam, inParam != ""
}

// twiceInParams is twiceInMessage for the object params, whose
// "arguments" it leaves to the executor.
func twiceInParams(params []byte) string {
	d := jsontext.NewDecoder(bytes.NewBuffer(params), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if _, err := d.ReadToken(); err != nil {
		return ""
	}
	seen := map[string]bool{}
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			return ""
		}
		name := tok.String()
		if seen[name] {
			return name
		}
		seen[name] = true
		v, err := d.ReadValue()
		if err != nil {
			return ""
		}
		if k := v.Kind(); name == "arguments" || (k != '{' && k != '[') {
			continue
		}
		// A decoder that refuses duplicate names, on the value alone.
		var se *jsontext.SyntacticError
		if _, err := jsontext.NewDecoder(bytes.NewBuffer(v), jsontext.AllowInvalidUTF8(true)).ReadValue(); errors.As(err, &se) && se.Err == jsontext.ErrDuplicateName {
			path := name
			for t := range se.JSONPointer.Tokens() {
				path += "." + t
			}
			return path
		}
	}
	return ""
}

// twiceError is the error for a message whose member is given twice
// (twiceInMessage), with what of the message is prefixed (for a batch,
// "message 2 of the batch: "), answered with id: -32602 (invalid params)
// for a member of params, -32600 (invalid request) for one of the
// envelope.
func twiceError(member string, inParams bool, what string, id json.RawMessage) *rpcError {
	code := int64(jsonrpc.CodeInvalidRequest)
	if inParams {
		code = jsonrpc.CodeInvalidParams
	}
	return &rpcError{http.StatusBadRequest, code,
		fmt.Sprintf("%sthe message has the member %q twice; JSON readers differ on which one counts, so send it once", what, clipTo(member, maxEchoBytes)), id}
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
		return nil, &rpcError{http.StatusRequestEntityTooLarge, jsonrpc.CodeInvalidRequest, fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit), nil}
	}
	if err != nil {
		return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeParseError, "the request body could not be read: " + err.Error(), nil}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		member, inParams := twiceInMessage(trimmed)
		if member != "" && !inParams {
			return nil, twiceError(member, false, "", nil)
		}
		if m := envelope(trimmed); m != nil {
			if _, bad := rpcIDKey(m["id"]); bad != "" {
				return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest, bad, nil}
			}
			if member != "" {
				return nil, twiceError(member, true, "", m["id"])
			}
			w.id = m["id"]
			wants.add(m)
		}
		return wants, nil
	}
	var batch []json.RawMessage
	if json.Unmarshal(trimmed, &batch) != nil {
		return wants, nil // the SDK reports the parse error
	}
	if len(batch) == 0 {
		// JSON-RPC 2.0 answers an empty array as an invalid request; the
		// SDK would call it a parse error.
		return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest, "the JSON-RPC batch is empty; send at least one message", nil}
	}
	if len(batch) > registry.MaxBatchCalls {
		return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("the JSON-RPC batch holds %d messages; at most %d are allowed, so split it", len(batch), registry.MaxBatchCalls), nil}
	}
	seen := make(map[string]int, len(batch))
	list := 0 // the message that is a tools/list, counting from 1
	wants.batch = true
	for i, msg := range batch {
		if member, inParams := twiceInMessage(msg); member != "" {
			return nil, twiceError(member, inParams, fmt.Sprintf("message %d of the batch: ", i+1), nil)
		}
		m := envelope(msg)
		if m == nil {
			continue // the SDK refuses it
		}
		id := m["id"]
		key, bad := rpcIDKey(id)
		if bad != "" {
			return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest, fmt.Sprintf("message %d of the batch: %s", i+1, bad), nil}
		}
		if j, ok := seen[key]; ok && key != "" {
			return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("messages %d and %d of the batch have the same id %s; each request of a batch needs an id of its own, so that its answer can be told apart", j+1, i+1, clipTo(string(id), maxEchoBytes)), nil}
		}
		seen[key] = i
		if wants.add(m) == "tools/list" {
			if list != 0 {
				return nil, &rpcError{http.StatusBadRequest, jsonrpc.CodeInvalidRequest,
					fmt.Sprintf("messages %d and %d of the batch are both tools/list; a batch may hold at most one, as its answer is the whole catalog, so send one tools/list", list, i+1), nil}
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
// responses with id null, keeping the HTTP status, and cuts the message
// of the JSON-RPC errors it answers with an HTTP error status (which may
// quote a header of the client's whole) to maxDetailBytes.
type jsonRPCErrors struct {
	http.ResponseWriter
	status  int
	text    bytes.Buffer
	capture bool
	// rpc: what is captured is the SDK's own JSON-RPC error.
	rpc bool
	// id is the request's id, when the body is one message.
	id json.RawMessage
}

func (w *jsonRPCErrors) WriteHeader(status int) {
	if w.status != 0 {
		return
	}
	w.status = status
	h := w.Header()
	if ct := h.Get("Content-Type"); status >= 400 && (strings.HasPrefix(ct, "text/plain") || strings.HasPrefix(ct, "application/json")) {
		w.capture, w.rpc = true, strings.HasPrefix(ct, "application/json")
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
	if w.rpc {
		w.finishRPC()
		return
	}
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
	// The SDK may quote what the client sent (a method name of a
	// megabyte).
	if len(msg) > maxDetailBytes {
		msg = clipTo(msg, maxDetailBytes) + "…"
	}
	writeJSONRPCID(w, w.status, id, code, msg)
}

// finishRPC writes the SDK's JSON-RPC error as it is, or with its
// message cut when that is too long: the SDK quotes a header that does not
// match the body whole ("header mismatch: Mcp-Name header value …").
func (w *jsonRPCErrors) finishRPC() {
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int64           `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if json.Unmarshal(w.text.Bytes(), &m) != nil || m.Error == nil || len(m.Error.Message) <= maxDetailBytes {
		w.ResponseWriter.WriteHeader(w.status)
		_, _ = w.ResponseWriter.Write(w.text.Bytes())
		return
	}
	writeJSONRPCData(w, w.status, m.ID, m.Error.Code, clipTo(m.Error.Message, maxDetailBytes)+"…", m.Error.Data)
}

// writeJSONRPC writes a JSON-RPC error response (id null: the request's id
// is unknown or unread) with an HTTP status.
func writeJSONRPC(w http.ResponseWriter, status int, code int64, msg string) {
	writeJSONRPCID(w, status, nil, code, msg)
}

func writeJSONRPCID(w http.ResponseWriter, status int, id json.RawMessage, code int64, msg string) {
	writeJSONRPCData(w, status, id, code, msg, nil)
}

// writeJSONRPCData writes a JSON-RPC error response with data (nil: none).
func writeJSONRPCData(w http.ResponseWriter, status int, id json.RawMessage, code int64, msg string, data json.RawMessage) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	e := map[string]any{"code": code, "message": msg}
	if data != nil {
		e["data"] = data
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": e})
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
