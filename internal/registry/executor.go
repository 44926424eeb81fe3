package registry

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ErrOverloaded means the concurrency limit is reached; the call did not run.
var ErrOverloaded = errors.New("too many tool calls in flight")

// ErrConflict means a toolCallId already names another call (other tool or
// other arguments) of the same caller.
var ErrConflict = errors.New("toolCallId already used for a different call")

// ErrUnavailable means the store did not answer; the call did not run.
var ErrUnavailable = errors.New("the call store is unavailable")

// Options configure an Executor.
type Options struct {
	Registry *Registry
	// Policy decides each call; nil applies the tier defaults.
	Policy Policy
	Logger *slog.Logger
	// Metrics may be nil (no metrics).
	Metrics *Metrics
	// Tracer may be nil (no spans).
	Tracer trace.Tracer
	// TraceContent records arguments and outputs on spans
	// (gen_ai.tool.call.arguments, gen_ai.tool.call.result), cut to
	// TraceContentLimit characters. Off by default: they may hold
	// personal data or secrets.
	TraceContent bool
	// MaxTimeout caps every call's timeout.
	MaxTimeout time.Duration
	// MaxConcurrency bounds the calls running at once; 0 is unbounded.
	MaxConcurrency int
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Store keeps call records, approvals and the audit trail; nil keeps
	// nothing (no idempotency, and calls that need approval are denied).
	Store Store
	// ApprovalTTL is how long an approval request waits; 0 is 15 minutes.
	ApprovalTTL time.Duration
}

// Executor runs calls through the pipeline: lookup, catalog visibility,
// argument decoding, schema validation, policy, timeout, run, panic
// recovery, output truncation, error message limit, metrics, span and audit
// log. Tools only compute.
type Executor struct {
	state   atomic.Pointer[state]
	log     *slog.Logger
	metrics *Metrics
	tracer  trace.Tracer
	content bool
	maxTime time.Duration
	slots   chan struct{}
	now     func() time.Time
	store   Store
	ttl     time.Duration
	// tracing is false for the default no-op tracer, whose spans are
	// given no attributes.
	tracing bool
	// answers recycles the channels handlers answer on.
	answers sync.Pool
}

// state is what a reload replaces as one.
type state struct {
	reg    *Registry
	policy Policy
}

// NewExecutor returns an executor.
func NewExecutor(o Options) *Executor {
	e := &Executor{log: o.Logger, metrics: o.Metrics, tracer: o.Tracer, content: o.TraceContent, maxTime: o.MaxTimeout, now: o.Now, store: o.Store, ttl: o.ApprovalTTL,
		tracing: o.Tracer != nil}
	if e.ttl <= 0 {
		e.ttl = 15 * time.Minute
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.tracer == nil {
		e.tracer = noop.NewTracerProvider().Tracer("")
	}
	if e.now == nil {
		e.now = time.Now
	}
	if o.MaxConcurrency > 0 {
		e.slots = make(chan struct{}, o.MaxConcurrency)
	}
	e.Load(o.Registry, o.Policy)
	return e
}

// Load swaps in a registry and policy; calls in flight keep the ones they
// started with.
func (e *Executor) Load(reg *Registry, p Policy) {
	if p == nil {
		p = DefaultTierEffects()
	}
	if reg == nil {
		reg, _ = New(Defaults{})
	}
	if e.metrics != nil {
		// Create each tool's per-tool series at zero, so dashboards and
		// rate() see them before the first call or truncation.
		for _, t := range reg.tools {
			e.metrics.truncated.WithLabelValues(t.Name)
			e.metrics.inFlight.WithLabelValues(t.Name)
		}
	}
	e.state.Store(&state{reg: reg, policy: p})
}

// Registry returns the registry in use.
func (e *Executor) Registry() *Registry { return e.state.Load().reg }

// Execute runs one call for caller and returns its result. The error is
// non-nil only when the call could not be taken at all: ErrOverloaded,
// ErrConflict (its toolCallId was used for another call) or
// ErrUnavailable (the store did not answer); everything that goes wrong
// with the call itself is an error result.
func (e *Executor) Execute(ctx context.Context, caller *Caller, call *Call) (*Result, error) {
	st := e.state.Load()
	start := e.now()
	res := &Result{ToolCallID: call.ToolCallID, ToolName: call.ToolName}
	if res.ToolCallID == "" {
		res.ToolCallID = NewCallID()
	}
	tool, known := st.reg.Lookup(call.ToolName)
	label, tier, spanName := UnknownTool, Tier(""), "execute_tool "+UnknownTool
	if known {
		label, tier, spanName = tool.Name, tool.Tier, tool.spanName
	}
	ctx, span := e.startSpan(ctx, spanName, label, res.ToolCallID)
	defer span.End()

	var p progress
	err := e.run(ctx, st, caller, call, tool, res, &p)
	if errors.Is(err, ErrOverloaded) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	if !p.replayed && !p.pending {
		e.finalize(res, tool, err, start)
	}
	if p.recorded {
		e.finishRecord(ctx, caller, res, &p)
	}
	e.observe(ctx, span, caller, res, label, tier, p.decision, p.digest, e.now().Sub(start))
	return res, nil
}

// startSpan starts the execute_tool span of a call (OpenTelemetry GenAI
// semantic conventions). The no-op tracer gets neither options nor
// attributes: building them would be its only cost.
func (e *Executor) startSpan(ctx context.Context, name, label, callID string) (context.Context, trace.Span) {
	if !e.tracing {
		return e.tracer.Start(ctx, name)
	}
	return e.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String("gen_ai.operation.name", "execute_tool"),
			attribute.String("gen_ai.tool.name", label),
			attribute.String("gen_ai.tool.call.id", callID),
		))
}

// finalize sets the status, error and duration of a result whose tool ran
// (or was refused) with outcome err.
func (e *Executor) finalize(res *Result, tool *Tool, err error, start time.Time) *Result {
	res.DurationMs = e.now().Sub(start).Milliseconds()
	if err != nil {
		res.Status = StatusError
		res.Output = nil
		res.Error = e.toError(err, tool)
	} else {
		res.Status = StatusOK
	}
	return res
}

// progress is what the pipeline learned about a call on its way.
type progress struct {
	decision Decision
	digest   string
	args     json.RawMessage
	// recorded: a running record was created and awaits the result.
	recorded bool
	// replayed: the result is a stored one, returned as it is.
	replayed bool
	// pending: the call waits for approval.
	pending bool
}

func (e *Executor) run(ctx context.Context, st *state, caller *Caller, call *Call, tool *Tool, res *Result, p *progress) error {
	if tool == nil {
		return e.notFound(st.reg, caller, call.ToolName)
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("gen_ai.tool.type", tool.Type), attribute.String("toolsvc.tool.tier", string(tool.Tier)))
	}
	if !caller.Sees(&tool.Definition) || (len(call.Catalog) > 0 && !containsString(call.Catalog, tool.Name)) {
		return &Error{Code: CodeToolNotInCatalog,
			Message:    fmt.Sprintf("tool %s is not in this caller's catalog", tool.Name),
			Suggestion: "Use only the tools you were given."}
	}
	args, value, derr := decodeArguments(call.Arguments)
	if derr != nil {
		span.AddEvent("validation_failed")
		derr.Suggestion = tool.suggestion()
		return derr
	}
	p.args = args
	p.digest = ArgumentsDigest(value)
	if e.content {
		span.SetAttributes(attribute.String("gen_ai.tool.call.arguments", truncateMessage(string(args), TraceContentLimit)))
	}
	if err := tool.schema.Validate(value); err != nil {
		span.AddEvent("validation_failed")
		return validationError(tool, err)
	}
	// A call recorded before replays its stored outcome, whatever policy
	// says now; only calls whose tier or request asks for it touch the store.
	durable := e.store != nil && (tool.Tier != ReadOnly || (call.Record && call.ToolCallID != ""))
	if durable && call.ToolCallID != "" {
		rec, err := e.store.GetCall(ctx, caller.ID, res.ToolCallID)
		switch {
		case err == nil:
			return e.replay(ctx, caller, rec, tool.Name, p, res)
		case !errors.Is(err, ErrNotFound):
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
	}
	d, perr := st.policy.Decide(ctx, &PolicyInput{Tool: &tool.Definition, Arguments: args, Caller: caller, Context: call.Context})
	if perr != nil {
		return fmt.Errorf("policy: %w", perr)
	}
	if d.Effect == Ask && call.Approval != nil && call.Approval.Granted && caller.Has(ScopeApprove) {
		d = Decision{Effect: Allow, Rule: d.Rule, Reason: "approved inline by " + cmp.Or(call.Approval.By, caller.ID)}
	}
	p.decision = d
	if span.IsRecording() {
		span.AddEvent("policy_decision", trace.WithAttributes(attribute.String("toolsvc.policy.decision", string(d.Effect)), attribute.String("toolsvc.policy.rule", d.Rule)))
	}
	if e.metrics != nil {
		e.metrics.decisions.WithLabelValues(tool.Name, string(d.Effect)).Inc()
	}
	switch d.Effect {
	case Allow:
	case Ask:
		if e.store == nil {
			return &Error{Code: CodePolicyDenied,
				Message:    fmt.Sprintf("tool %s requires human approval (rule %s), and this service keeps no approvals", tool.Name, d.Rule),
				Suggestion: "Tell the user this action needs their approval, or use a tool that does not."}
		}
		return e.ask(ctx, caller, call, tool, d, p, res)
	default:
		msg := fmt.Sprintf("tool %s is denied by policy rule %s", tool.Name, d.Rule)
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		return &Error{Code: CodePolicyDenied, Message: msg, Suggestion: "Do not retry this call; choose another approach or ask the user."}
	}
	release, err := e.acquire(ctx, tool)
	if err != nil {
		return err
	}
	defer release()
	if durable {
		rec, created, err := e.store.BeginCall(ctx, &CallRecord{
			CallerID: caller.ID, ToolCallID: res.ToolCallID, ToolName: tool.Name, ArgumentsDigest: p.digest,
			Arguments: args, Context: call.Context, State: CallRunning,
		})
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if !created {
			return e.replay(ctx, caller, rec, tool.Name, p, res)
		}
		p.recorded = true
	}
	return e.execute(ctx, tool, caller, res, args, call.Context, call.Catalog, call.TimeoutMs)
}

// acquire takes a slot of the service-wide limit and one of the tool's
// own: at once, or within the capacity wait a batch puts in ctx. It fails
// with ErrOverloaded when either has none free in time.
func (e *Executor) acquire(ctx context.Context, tool *Tool) (release func(), err error) {
	global, err := takeSlot(ctx, e.slots)
	if err != nil {
		return nil, err
	}
	own, err := takeSlot(ctx, tool.slots)
	if err != nil {
		global()
		if errors.Is(err, ErrOverloaded) {
			err = fmt.Errorf("%w: tool %s runs at most %d calls at once", ErrOverloaded, tool.Name, tool.MaxConcurrency)
		}
		return nil, err
	}
	return func() { own(); global() }, nil
}

// takeSlot takes one of slots (nil: unbounded).
func takeSlot(ctx context.Context, slots chan struct{}) (release func(), err error) {
	if slots == nil {
		return func() {}, nil
	}
	release = func() { <-slots }
	select {
	case slots <- struct{}{}:
		return release, nil
	default:
	}
	wait, _ := ctx.Value(capacityWaitKey{}).(time.Duration)
	if wait <= 0 {
		return nil, ErrOverloaded
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return release, nil
	case <-t.C:
		return nil, ErrOverloaded
	case <-ctx.Done():
		return nil, canceledError(ctx)
	}
}

// execute runs an admitted call under its timeout and encodes its output.
func (e *Executor) execute(ctx context.Context, tool *Tool, caller *Caller, res *Result, args json.RawMessage, cc CallContext, catalog []string, timeoutMs int64) error {
	timeout := tool.Timeout
	if timeoutMs > 0 && time.Duration(timeoutMs)*time.Millisecond < timeout {
		timeout = time.Duration(timeoutMs) * time.Millisecond
	}
	if e.maxTime > 0 && timeout > e.maxTime {
		timeout = e.maxTime
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Int64("toolsvc.timeout_ms", timeout.Milliseconds()))
	}
	out, err := e.invoke(ctx, tool, &Request{
		Name: tool.Name, CallID: res.ToolCallID, Arguments: args, Context: cc,
		MaxOutputBytes: tool.MaxOutputBytes, Caller: caller, Catalog: catalog,
	}, timeout)
	if err != nil {
		return err
	}
	raw, truncated, original, merr := encodeOutput(out, tool.MaxOutputBytes)
	if merr != nil {
		return fmt.Errorf("%w: output is not JSON-serialisable: %v", errInternal, merr)
	}
	res.Output, res.Truncated = raw, truncated
	if truncated {
		res.OriginalBytes = original
	}
	return nil
}

// capacityWaitKey carries, in a batch's context, how long a call may wait
// for a free slot before it counts as overloaded.
type capacityWaitKey struct{}

// errInternal marks failures that are bugs: the model sees a generic
// message and the detail goes to the log.
var errInternal = errors.New("internal error")

type outcome struct {
	out any
	err error
}

// invoke runs the handler under the timeout. A handler that ignores its
// context is abandoned at the deadline, so the caller always gets an answer.
func (e *Executor) invoke(ctx context.Context, tool *Tool, req *Request, timeout time.Duration) (any, error) {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req.Deadline, _ = tctx.Deadline()
	if e.metrics != nil {
		g := e.metrics.inFlight.WithLabelValues(tool.Name)
		g.Inc()
		defer g.Dec()
	}
	done, _ := e.answers.Get().(chan outcome)
	if done == nil {
		done = make(chan outcome, 1)
	}
	go func() {
		defer func() {
			if p := recover(); p != nil {
				e.log.Error("tool panicked", "tool", tool.Name, "toolCallId", req.CallID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				done <- outcome{err: fmt.Errorf("%w: tool %s panicked", errInternal, tool.Name)}
			}
		}()
		out, err := tool.Handler.Run(tctx, req)
		done <- outcome{out, err}
	}()
	select {
	case o := <-done:
		// The handler has answered and sends nothing more.
		e.answers.Put(done)
		if o.err != nil && tctx.Err() != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
			return nil, timeoutError(tool, timeout)
		}
		if o.err != nil && ctx.Err() != nil {
			return nil, canceledError(ctx)
		}
		return o.out, o.err
	case <-tctx.Done():
		// Give a tool that honours its context a moment to return, so only
		// the ones that ignore it are reported as abandoned.
		grace := time.NewTimer(abandonGrace)
		defer grace.Stop()
		select {
		case <-done:
			e.answers.Put(done)
		case <-grace.C:
			e.log.Warn("tool did not return after its deadline; abandoned", "tool", tool.Name, "toolCallId", req.CallID)
		}
		if ctx.Err() != nil {
			return nil, canceledError(ctx)
		}
		return nil, timeoutError(tool, timeout)
	}
}

// abandonGrace is how long a tool may take to return once its context
// ends: long enough for a process sandbox to stop a process group
// (SIGTERM, a grace, SIGKILL), so the answer comes after the cleanup.
const abandonGrace = time.Second

func timeoutError(tool *Tool, timeout time.Duration) *Error {
	return &Error{Code: CodeTimeout,
		Message:    fmt.Sprintf("tool %s did not finish within %s and was stopped", tool.Name, timeout),
		Suggestion: "Try a smaller or simpler request, or a larger timeoutMs if the tool allows it."}
}

func canceledError(ctx context.Context) *Error {
	msg := "the call was canceled before it finished"
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		msg += ": " + c.Error()
	}
	return &Error{Code: CodeCanceled, Message: msg}
}

func (e *Executor) notFound(reg *Registry, caller *Caller, name string) *Error {
	err := &Error{Code: CodeToolNotFound, Message: fmt.Sprintf("no tool named %q", name)}
	if name == "" {
		err.Message = "no tool name given"
	}
	if close := reg.Closest(caller, name, 3); len(close) > 0 {
		err.Suggestion = "Did you mean " + strings.Join(close, ", ") + "?"
	} else {
		err.Suggestion = "List the available tools and use one of their exact names."
	}
	return err
}

// toError turns whatever went wrong into the error member of a result,
// with the message cut to the tool's limit and made valid UTF-8.
func (e *Executor) toError(err error, tool *Tool) *Error {
	var out *Error
	switch {
	case errors.Is(err, errInternal):
		out = &Error{Code: CodeInternal, Message: "internal error"}
	case errors.As(err, &out):
		c := *out
		out = &c
	case errors.Is(err, context.DeadlineExceeded) && tool != nil:
		out = timeoutError(tool, tool.Timeout)
	default:
		out = &Error{Code: CodeTool, Message: err.Error()}
	}
	limit := 1000
	if tool != nil {
		limit = tool.ErrorMessageLimit
		if out.Name == "" {
			out.Name = tool.Name
		}
	}
	out.Message = truncateMessage(strings.ToValidUTF8(out.Message, "\uFFFD"), limit)
	return out
}

// TraceContentLimit is how many characters of arguments and output a span
// records when content tracing is on.
const TraceContentLimit = 8192

func (e *Executor) observe(ctx context.Context, span trace.Span, caller *Caller, res *Result, label string, tier Tier, d Decision, digest string, elapsed time.Duration) {
	code := string(res.Code())
	if span.IsRecording() {
		if res.Error != nil {
			span.SetAttributes(attribute.String("error.type", code))
			span.SetStatus(codes.Error, code)
		}
		span.SetAttributes(attribute.Bool("toolsvc.output.truncated", res.Truncated))
		if e.content && res.Output != nil {
			span.SetAttributes(attribute.String("gen_ai.tool.call.result", truncateMessage(string(res.Output), TraceContentLimit)))
		}
		if d.Effect != "" {
			span.SetAttributes(attribute.String("toolsvc.policy.decision", string(d.Effect)))
		}
	}
	if e.metrics != nil {
		e.metrics.calls.WithLabelValues(label, string(tier), string(res.Status), code).Inc()
		observeWithTrace(e.metrics.duration.WithLabelValues(label, string(res.Status)), span.SpanContext(), elapsed.Seconds())
		if res.Truncated {
			e.metrics.truncated.WithLabelValues(label).Inc()
		}
	}
	// The call's context carries the trace ids to the log line; its
	// cancellation does not matter to logging.
	e.log.LogAttrs(ctx, slog.LevelInfo, "tool call",
		slog.String("caller", caller.ID), slog.String("tool", label), slog.String("tier", string(tier)),
		slog.String("toolCallId", res.ToolCallID), slog.String("decision", string(d.Effect)), slog.String("rule", d.Rule),
		slog.String("status", string(res.Status)), slog.String("code", code),
		slog.Int64("durationMs", res.DurationMs), slog.String("argumentsDigest", digest))
}

// decodeArguments accepts an object, a string holding one, or nothing
// (an empty object). It returns the object's JSON and its decoded value.
func decodeArguments(raw json.RawMessage) (json.RawMessage, any, *Error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, &Error{Code: CodeInvalidArguments, Message: "arguments string is not valid: " + err.Error()}
		}
		raw = bytes.TrimSpace([]byte(s))
		if len(raw) == 0 {
			raw = json.RawMessage("{}")
		}
	}
	if raw[0] != '{' {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: "arguments must be a JSON object (or a string holding one), got " + describeJSON(raw)}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: "arguments are not valid JSON: " + err.Error()}
	}
	return raw, v, nil
}

func describeJSON(raw []byte) string {
	switch c := raw[0]; {
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	}
	s := string(raw)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	if !utf8.ValidString(s) {
		return "invalid JSON"
	}
	return fmt.Sprintf("%q, which is not JSON", s)
}

// NewCallID returns a fresh toolCallId.
func NewCallID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
