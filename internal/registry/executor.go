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

// ErrConflict means a toolCallId already names another call (other tool,
// other arguments or another instance) of the same caller.
var ErrConflict = errors.New("toolCallId already used for a different call")

// ErrUnavailable means the store did not answer; the call did not run.
var ErrUnavailable = errors.New("the call store is unavailable")

// ErrStoreFull marks a store's failure for want of disk space, which
// retrying does not cure until an operator frees some. Stores wrap their
// disk-full errors in it, and an ErrUnavailable keeps it visible.
var ErrStoreFull = errors.New("the call store is out of disk space")

// unavailable is a store failure as ErrUnavailable; an ErrStoreFull or an
// ErrStoreBroken in it stays visible to errors.Is, so the answer says that
// an operator must act, not to retry shortly. (Other errors in it do not:
// a store's ErrNotFound must not read as "no such call".)
func unavailable(err error) error {
	if errors.Is(err, ErrStoreFull) || errors.Is(err, ErrStoreBroken) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// ErrUnidentified marks a refusal of credentials that name no caller: a
// verified token without the claim its issuer takes the caller's id from,
// or with one no caller id can be made of. It is the credentials' fault
// (401 invalid_token), not a want of scope (403), and the Policy says so
// because which claim names the caller is its business.
var ErrUnidentified = errors.New("the credentials name no caller")

// ErrShutdown is the cause the main program cancels calls with when it
// stops. A recorded call it cancels ends as E_INTERRUPTED, not E_CANCELED:
// it may have had side effects, and a retry with its toolCallId gets that
// answer (use a new toolCallId after checking), exactly like a call whose
// process died.
var ErrShutdown = errors.New("the service is shutting down")

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
	// MaxPendingApprovals bounds the approval requests one caller may have
	// waiting at once; a call that would file one more is E_POLICY_DENIED.
	// 0 leaves them unbounded.
	MaxPendingApprovals int
	// MaxArgumentsDepth bounds the nesting of a call's arguments, also
	// when they arrive as a string holding JSON; 0 is 64.
	MaxArgumentsDepth int
	// WaitTimeout bounds how long a call waits for another call's record
	// with the same toolCallId to finish; 0 is one minute.
	WaitTimeout time.Duration
	// RecordBacklog bounds how many results whose record could not be
	// finished are held in memory and retried into the store; 0 is 1000.
	RecordBacklog int
	// Observer hears of approval requests filed and decided; nil is none.
	Observer ApprovalObserver
	// Spill keeps the full output of cut results; nil keeps none.
	Spill *Spiller
	// Disabled names tools this service could serve but does not, each
	// with what turns it on, so that a call of one says so.
	Disabled map[string]string
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
	// maxPending is Options.MaxPendingApprovals.
	maxPending int
	// disabled is Options.Disabled.
	disabled map[string]string
	// tracing is false for the default no-op tracer, whose spans are
	// given no attributes.
	tracing bool
	// answers recycles the channels handlers answer on.
	answers sync.Pool
	// jsonCheck checks arguments, and the outputs toolsvc does not write
	// itself, for I-JSON.
	jsonCheck jsonChecker
	// runners run the handlers.
	runners  *runners
	maxDepth int
	wait     time.Duration
	// backlog holds results whose record could not be finished yet.
	backlog *backlog
	// observer hears of approval requests filed and decided.
	observer ApprovalObserver
	spill    *Spiller
	// draining is closed by Drain.
	draining  chan struct{}
	drainOnce sync.Once
}

// state is what a reload replaces as one.
type state struct {
	reg    *Registry
	policy Policy
	// series are each tool's metric series for the common case, looked
	// up at load (nil without metrics).
	series map[string]*toolSeries
}

// NewExecutor returns an executor.
func NewExecutor(o Options) *Executor {
	e := &Executor{log: o.Logger, metrics: o.Metrics, tracer: o.Tracer, content: o.TraceContent, maxTime: o.MaxTimeout, now: o.Now, store: o.Store, ttl: o.ApprovalTTL, maxPending: o.MaxPendingApprovals, disabled: o.Disabled,
		tracing: o.Tracer != nil, observer: o.Observer, spill: o.Spill, draining: make(chan struct{})}
	if e.ttl <= 0 {
		e.ttl = 15 * time.Minute
	}
	e.maxDepth = cmp.Or(o.MaxArgumentsDepth, 64)
	e.wait = cmp.Or(o.WaitTimeout, time.Minute)
	e.backlog = newBacklog(cmp.Or(o.RecordBacklog, 1000))
	e.runners = newRunners(runnerIdle)
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
	if prev := e.state.Load(); prev != nil {
		keepSlots(prev.reg, reg)
	}
	st := &state{reg: reg, policy: p}
	if e.metrics != nil {
		// Create each tool's per-tool series at zero, so dashboards and
		// rate() see them before the first call or truncation, and look
		// up the ones every call touches once.
		st.series = make(map[string]*toolSeries, len(reg.tools))
		for _, t := range reg.tools {
			e.metrics.abandonedTotal.WithLabelValues(t.Name)
			e.metrics.abandoned.WithLabelValues(t.Name)
			st.series[t.Name] = e.metrics.seriesOf(t)
		}
	}
	old := e.state.Swap(st)
	if e.metrics != nil && old != nil {
		// A tool the new catalog no longer has takes its series with it,
		// unless calls of it still run: a catalog whose names change (an
		// MCP server that renames its tools on every listing) would
		// otherwise grow /metrics without end.
		for name := range old.series {
			if _, kept := st.series[name]; !kept {
				e.metrics.forget(name)
			}
		}
	}
}

// keepSlots gives each tool of next that prev has with the same
// maxConcurrency prev's slots, so that the calls still running from
// before a reload count against the tool's limit after it: with slots of
// its own, each reload would let as many calls again run at once. A
// changed limit starts afresh; the calls of the old one finish.
func keepSlots(prev, next *Registry) {
	for _, t := range next.tools {
		if old, ok := prev.byName[t.Name]; ok && old.slots != nil && t.slots != nil && cap(old.slots) == cap(t.slots) {
			t.slots = old.slots
		}
	}
}

// Registry returns the registry in use.
func (e *Executor) Registry() *Registry { return e.state.Load().reg }

// Execute runs one call for caller and returns its result. The error is
// non-nil only when the call could not be taken at all: ErrOverloaded,
// ErrConflict (its toolCallId was used for another call) or
// ErrUnavailable (the store did not answer); everything that goes wrong
// with the call itself is an error result.
func (e *Executor) Execute(ctx context.Context, caller *Caller, call *Call) (*Result, error) {
	return e.process(ctx, &flight{st: e.state.Load(), caller: caller, call: call})
}

// flight is one call on its way through the pipeline, and what the
// pipeline has learned about it.
type flight struct {
	st     *state
	caller *Caller
	call   *Call
	tool   *Tool
	// series are the tool's prepared metric series (nil without metrics
	// or tool).
	series *toolSeries
	res    *Result
	// resumed is the approval request of an approved call that resumes at
	// the run stage; caller and call are then what it was filed with.
	resumed *Approval

	decision Decision
	digest   string
	args     json.RawMessage
	value    any
	// req is what the handler was given; the cut reads what it reported.
	req *Request
	// durable: the call is recorded in the store.
	durable bool
	// recorded: a running record was created and awaits the result.
	recorded bool
	// answered: an earlier stage set the result (a stored or held one, or
	// the pending ticket of an approval request); the rest is skipped.
	answered bool
	// nested counts, for an approved call of a tool that nests, the calls
	// its handler made that were not finished when they answered (nil for
	// every other call).
	nested *nested
	// held is set, for a call of a tool that nests, when a call its
	// handler made answered with a result whose record is held
	// (RecordPending); nil for every other call.
	held *atomic.Bool
}

// nested counts the calls a Nests tool's handler made that answered
// before they finished: pending approval, or still running. Its call's
// answer then holds their state of the moment, which changes without the
// call.
type nested struct{ unsettled atomic.Int32 }

// nestedKey carries a *nested in the context of a Nests tool's handler,
// so that the calls it makes count themselves in it.
type nestedKey struct{}

// heldKey carries a flight's held in the context of a Nests tool's
// handler, so that a call it makes whose record is held sets it.
type heldKey struct{}

// errAnswered ends the pipeline of a call whose result a stage has set.
var errAnswered = errors.New("answered")

// process runs a call through the pipeline, one stage after another:
// lookup, catalog, decode and validate, recall (a toolCallId seen before),
// policy, approval, admission, record, run, cut, finish. A call the first
// three refuse is answered from its record all the same when its
// toolCallId has one (refused). A call approved by a human enters the
// same pipeline (resume) and passes the stages that belong to filing
// (recall, approval, record) as already done; policy it meets again, for
// a denial (decideResumed).
func (e *Executor) process(ctx context.Context, f *flight) (*Result, error) {
	start := e.now()
	ctx, span := e.lookup(ctx, f)
	defer span.End()
	err := func() error {
		if f.tool == nil {
			return e.refused(ctx, f, e.notFound(f.st.reg, f.caller, f.call.ToolName))
		}
		if err := e.checkCatalog(f); err != nil {
			return e.refused(ctx, f, err)
		}
		if err := e.decode(ctx, f); err != nil {
			return e.refused(ctx, f, err)
		}
		if err := e.recall(ctx, f); err != nil {
			return err
		}
		if err := e.decide(ctx, f); err != nil {
			return err
		}
		if err := e.approval(ctx, f); err != nil {
			return err
		}
		release, err := e.admit(ctx, f)
		if err != nil {
			return err
		}
		if err := e.record(ctx, f); err != nil {
			release()
			return err
		}
		out, err := e.runTool(ctx, f, release)
		if f.req != nil {
			defer f.req.settle()
		}
		if err != nil {
			return err
		}
		return e.cut(ctx, f, out)
	}()
	if errors.Is(err, ErrOverloaded) || errors.Is(err, ErrConflict) || errors.Is(err, ErrUnavailable) {
		span.SetStatus(codes.Error, err.Error())
		if f.resumed == nil {
			return nil, err
		}
		// An approved call has no client to refuse; its record ends.
		err = fmt.Errorf("%w: %v", errInternal, err)
	}
	if !errors.Is(err, errAnswered) {
		e.finalize(f.res, f.tool, err, start)
		if f.recorded && f.res.Code() == CodeCanceled && errors.Is(context.Cause(ctx), ErrShutdown) {
			f.res = InterruptedResult(f.res.ToolCallID, f.res.ToolName)
			f.res.DurationMs = e.now().Sub(start).Milliseconds()
		}
	}
	e.finish(ctx, f)
	if f.res.RecordPending {
		if h, ok := ctx.Value(heldKey{}).(*atomic.Bool); ok {
			h.Store(true) // a call of a plan's, see below
		}
	}
	if f.held != nil && f.held.Load() && f.res.Status == StatusOK && !f.res.RecordPending {
		// Its answer holds the results of calls whose records are not
		// stored yet, which a repeat of it answers from (Tool.Nests): it
		// is no more durable than they are. After finish, so that a
		// record of its own does not keep the flag.
		answer := *f.res
		answer.RecordPending = true
		f.res = &answer
	}
	if f.res.Status == StatusPendingApproval || f.res.Status == StatusRunning {
		if n, ok := ctx.Value(nestedKey{}).(*nested); ok {
			n.unsettled.Add(1) // a call of an approved plan's, see finishRecord
		}
	}
	e.observe(ctx, span, f, e.now().Sub(start))
	return f.res, nil
}

// lookup finds the tool a call names and starts the call's span.
func (e *Executor) lookup(ctx context.Context, f *flight) (context.Context, trace.Span) {
	f.res = &Result{ToolCallID: f.call.ToolCallID, ToolName: f.call.ToolName}
	if f.res.ToolCallID == "" {
		f.res.ToolCallID = NewCallID()
	}
	f.tool, _ = f.st.reg.Lookup(f.call.ToolName)
	name := "execute_tool " + UnknownTool
	if f.tool != nil {
		f.series = f.st.series[f.tool.Name]
		name = f.tool.spanName
	}
	ctx, span := e.startSpan(ctx, name, f.label(), f.res.ToolCallID)
	if f.tool != nil && span.IsRecording() {
		span.SetAttributes(attribute.String("gen_ai.tool.type", f.tool.Type), attribute.String("toolsvc.tool.tier", string(f.tool.Tier)))
	}
	return ctx, span
}

// label is the metric label and span name of the call's tool.
func (f *flight) label() string {
	if f.tool == nil {
		return UnknownTool
	}
	return f.tool.Name
}

// checkCatalog refuses a tool outside the caller's catalog or the call's
// own. A resumed call is checked against the caller and catalog it was
// filed with.
func (e *Executor) checkCatalog(f *flight) error {
	if f.resumed != nil && f.resumed.Filed == nil {
		return &Error{Code: CodePolicyDenied,
			Message:    fmt.Sprintf("approval %s was filed by an earlier version that did not record the caller's restrictions, so it is not run", f.resumed.ID),
			Suggestion: "Make the call again with a new toolCallId and have it approved again."}
	}
	if !f.caller.Sees(&f.tool.Definition) || (len(f.call.Catalog) > 0 && !containsString(f.call.Catalog, f.tool.Name)) {
		return &Error{Code: CodeToolNotInCatalog,
			Message:    fmt.Sprintf("tool %s is not in this caller's catalog", f.tool.Name),
			Suggestion: "Use only the tools you were given."}
	}
	return nil
}

// decode decodes the arguments and validates them against the tool's
// schema (again, for a resumed call: the tool may have been reloaded
// since the call was filed).
func (e *Executor) decode(ctx context.Context, f *flight) error {
	span := trace.SpanFromContext(ctx)
	args, value, derr := decodeArguments(f.call.Arguments, e.maxDepth, &e.jsonCheck)
	if derr != nil {
		span.AddEvent("validation_failed")
		derr.Suggestion = f.tool.suggestion()
		return derr
	}
	f.args, f.value = args, value
	f.digest = ArgumentsDigest(value)
	if e.content {
		span.SetAttributes(attribute.String("gen_ai.tool.call.arguments", truncateMessage(string(args), TraceContentLimit)))
	}
	if err := f.tool.schema.Validate(value); err != nil {
		span.AddEvent("validation_failed")
		return validationError(f.tool, err)
	}
	if f.resumed != nil && f.resumed.ArgumentsDigest != "" {
		// Filed arguments are normalized already; the digest is of the
		// arguments as the client sent them, which it may send again.
		f.digest = f.resumed.ArgumentsDigest
	}
	if m, ok := value.(map[string]any); ok && f.tool.Normalize != nil && f.tool.Normalize(m) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			return &Error{Code: CodeInternal, Message: "internal error"}
		}
		f.args = bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	}
	// Only calls whose tier or request asks for it touch the store. A tool
	// that nests records nothing of its own: its calls are recorded (see
	// Tool.Nests).
	f.durable = e.store != nil && ((f.tool.Tier != ReadOnly && !f.tool.Nests) || (f.call.Record && f.call.ToolCallID != "") || f.resumed != nil)
	return nil
}

// decide asks the policy about the call; a resumed call carries its
// approver's decision, unless the policy now denies it (decideResumed).
func (e *Executor) decide(ctx context.Context, f *flight) error {
	if f.resumed != nil {
		return e.decideResumed(ctx, f)
	}
	d, err := f.st.policy.Decide(ctx, &PolicyInput{Tool: &f.tool.Definition, Arguments: f.args, Caller: f.caller, Context: f.call.Context})
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if d.Effect == Ask && f.call.Approval != nil && f.call.Approval.Granted && f.caller.Has(ScopeApprove) {
		d = Decision{Effect: Allow, Rule: d.Rule, Reason: "approved inline by " + cmp.Or(f.call.Approval.By, f.caller.ID)}
	}
	f.decision = d
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.AddEvent("policy_decision", trace.WithAttributes(attribute.String("toolsvc.policy.decision", string(d.Effect)), attribute.String("toolsvc.policy.rule", d.Rule)))
	}
	if f.series != nil && d.Effect == Allow {
		f.series.allowed.get().Inc()
	} else if e.metrics != nil {
		e.metrics.decisions.WithLabelValues(f.tool.Name, string(d.Effect)).Inc()
	}
	switch d.Effect {
	case Allow, Ask:
		return nil
	}
	msg := fmt.Sprintf("tool %s is denied by policy rule %s", f.tool.Name, d.Rule)
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	return &Error{Code: CodePolicyDenied, Message: msg, Suggestion: "Do not retry this call; choose another approach or ask the user."}
}

// decideResumed decides an approved call by the policy and callers in
// force now, not only by those it was filed under: a reload since may have
// added a rule that denies it, or removed the caller that filed it (whose
// token no longer opens anything), and an approval overrides neither. The
// call then ends E_POLICY_DENIED without running, recorded and audited
// as a denial, and the approver's answer says why. An ask is what the
// approval answered; any other verdict leaves the approver's decision.
func (e *Executor) decideResumed(ctx context.Context, f *flight) error {
	f.decision = Decision{Effect: Allow, Rule: f.resumed.Rule, Reason: "approved by " + f.resumed.DecidedBy}
	if k, ok := f.st.policy.(CallerChecker); ok {
		now, exists := k.CurrentCaller(f.caller)
		switch {
		case !exists:
			f.decision = Decision{Effect: Deny, Rule: f.resumed.Rule, Reason: "its caller no longer exists"}
			return &Error{Code: CodePolicyDenied,
				Message: fmt.Sprintf("caller %s, which filed this call, no longer exists (the configuration was reloaded without it after the call was filed), so the approval of request %s did not run it; nothing ran",
					f.caller.ID, f.resumed.ID),
				Suggestion: "Do not retry this call; a caller that exists must make it again."}
		case !now.Has(ScopeCall) || !now.Sees(&f.tool.Definition):
			f.decision = Decision{Effect: Deny, Rule: f.resumed.Rule, Reason: "its caller may no longer call the tool"}
			return &Error{Code: CodePolicyDenied,
				Message: fmt.Sprintf("caller %s, which filed this call, may no longer call tool %s (the configuration was reloaded after the call was filed, and took the tool or the call scope from it), so the approval of request %s did not run it; nothing ran",
					f.caller.ID, f.tool.Name, f.resumed.ID),
				Suggestion: "Do not retry this call; it is no longer among this caller's tools."}
		}
	}
	d, err := f.st.policy.Decide(ctx, &PolicyInput{Tool: &f.tool.Definition, Arguments: f.args, Caller: f.caller, Context: f.call.Context})
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if d.Effect != Deny {
		return nil
	}
	f.decision = d
	msg := fmt.Sprintf("tool %s is denied by policy rule %s", f.tool.Name, d.Rule)
	if d.Reason != "" {
		msg += ": " + d.Reason
	}
	msg += fmt.Sprintf(". The policy has changed since this call was filed (then rule %s asked for approval, and none denied it), and an approval does not override a denial, so request %s did not run it: nothing ran",
		f.resumed.Rule, f.resumed.ID)
	return &Error{Code: CodePolicyDenied, Message: msg, Suggestion: "Do not retry this call; choose another approach or ask the user."}
}

// approval files an approval request for a call the policy asks a human
// about; the call ends here as pending and resumes at admission once
// approved (Decide).
func (e *Executor) approval(ctx context.Context, f *flight) error {
	if f.decision.Effect != Ask {
		return nil
	}
	if e.store == nil {
		return &Error{Code: CodePolicyDenied,
			Message:    fmt.Sprintf("tool %s requires human approval (rule %s), and this service keeps no approvals", f.tool.Name, f.decision.Rule),
			Suggestion: "Tell the user this action needs their approval, or use a tool that does not."}
	}
	if err := e.pendingRoom(ctx, f); err != nil {
		return err
	}
	return e.ask(ctx, f)
}

// pendingRoom refuses a new approval request of a caller who already has
// maxPending waiting, so that one caller cannot fill the approvers'
// inbox (lists show the oldest requests first, at most 1,000) and hide
// everyone else's. A repeat of a call already filed is not a new
// request. This count is read, not locked: it spares a caller at its
// bound the writes of a filing. The bound itself holds where the store
// counts and files in one step (PendingLimiter, see ask), also for
// callers filing at the same moment on several replicas. It is a count,
// not a list: listing the requests read every one of them whole, and a
// token caller's filings carry its claims, so each filing grew slower
// with the requests already waiting.
func (e *Executor) pendingRoom(ctx context.Context, f *flight) error {
	if e.maxPending <= 0 {
		return nil
	}
	waiting, err := e.store.CountApprovals(ctx, ApprovalFilter{Status: ApprovalPending, CallerID: f.caller.ID})
	if err != nil {
		return unavailable(err)
	}
	if waiting < e.maxPending {
		return nil
	}
	if f.res.ToolCallID != "" {
		if _, err := e.store.GetCall(ctx, f.caller.ID, f.res.ToolCallID); err == nil {
			return nil // a repeat: ask answers it from its record
		}
	}
	return e.tooManyPending(f)
}

// tooManyPending is the E_POLICY_DENIED of a call whose caller already has
// maxPending approval requests waiting.
func (e *Executor) tooManyPending(f *flight) error {
	return &Error{Code: CodePolicyDenied,
		Message: fmt.Sprintf("tool %s requires human approval (rule %s), and caller %s already has %d approval requests waiting, the most one caller may have; nothing ran",
			f.tool.Name, f.decision.Rule, f.caller.ID, e.maxPending),
		Suggestion: "Wait for decisions on the requests already waiting (GET /approvals) before asking for more, or tell the user."}
}

// admit takes a slot of the service-wide limit and one of the tool's own.
// An approved call has waited long enough: it runs even when the limits
// are reached.
func (e *Executor) admit(ctx context.Context, f *flight) (release func(), err error) {
	if f.resumed != nil {
		return func() {}, nil
	}
	return e.acquire(ctx, f.tool)
}

// runTool runs an admitted call under its timeout. release gives back its
// concurrency slots once the handler has returned, which may be after the
// answer when the handler ignores its deadline.
func (e *Executor) runTool(ctx context.Context, f *flight, release func()) (any, error) {
	timeout := f.tool.Timeout
	// Compared in milliseconds: a timeoutMs past what a Duration holds
	// (a gateway's "no limit") must not wrap around to a short one.
	if ms := f.call.TimeoutMs; ms > 0 && ms < timeout.Milliseconds() {
		timeout = time.Duration(ms) * time.Millisecond
	}
	if e.maxTime > 0 && timeout > e.maxTime {
		timeout = e.maxTime
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Int64("toolsvc.timeout_ms", timeout.Milliseconds()))
	}
	f.req = &Request{
		Name: f.tool.Name, CallID: f.res.ToolCallID, Arguments: f.args, Context: f.call.Context,
		MaxOutputBytes: f.tool.MaxOutputBytes, Caller: f.caller, Catalog: f.call.Catalog, spiller: e.spill, reg: f.st.reg, recorded: f.recorded,
		settles: true,
	}
	if f.tool.Nests && f.resumed == nil {
		// The call holds a slot of the service-wide limit (an approved
		// call, admitted without one, has none to lend).
		lent := &lentSlot{ch: make(chan struct{}, 1)}
		release = lent.keep(release)
		ctx = context.WithValue(ctx, lentSlotKey{}, lent)
	}
	if f.tool.Nests {
		f.held = new(atomic.Bool)
		ctx = context.WithValue(ctx, heldKey{}, f.held)
	}
	if f.tool.Nests && f.resumed != nil {
		// Its record must not keep a state of its calls that goes stale
		// (see finishRecord).
		f.nested = &nested{}
		ctx = context.WithValue(ctx, nestedKey{}, f.nested)
	}
	return e.invoke(ctx, f.tool, f.series, f.req, timeout, release)
}

// lentSlotKey carries, in the context of a Nests tool's handler, the
// service-wide slot its call holds, lent to the calls the handler runs
// (*lentSlot). Those calls take it when the service has no slot free, so
// each such tool always has one slot for its calls however full the
// service is: at worst they run one at a time on it.
type lentSlotKey struct{}

// lentSlot is a slot lent by a call to the calls its handler runs. ch has
// capacity 1 and is taken by a send and given back by a receive, as the
// executor's own slots are. The lender's slots are given back only once
// the lent one is free: a borrower abandoned at its deadline may run on
// after the lender has returned, and until it returns it still counts
// against the service-wide limit through the lender's slot.
type lentSlot struct {
	ch      chan struct{}
	mu      sync.Mutex
	gone    bool   // the lender's handler has returned
	release func() // the lender's slots, until given back
}

// keep wraps release, the lender's, so that it runs once both the
// lender's handler has returned and the lent slot is free.
func (l *lentSlot) keep(release func()) func() {
	l.release = release
	return func() {
		l.mu.Lock()
		l.gone = true
		select {
		case l.ch <- struct{}{}:
			// Free: taken for good, so nothing borrows it from now on.
		default:
			// A borrower holds it and gives the lender's slots back.
			l.mu.Unlock()
			return
		}
		r := l.release
		l.release = nil
		l.mu.Unlock()
		r()
	}
}

// giveBack is a borrower's release.
func (l *lentSlot) giveBack() {
	l.mu.Lock()
	<-l.ch
	var r func()
	if l.gone {
		r, l.release = l.release, nil
	}
	l.mu.Unlock()
	if r != nil {
		r()
	}
}

// cut encodes the output, cut to the tool's maxOutputBytes; a cut
// output is kept whole in the spill store when the service keeps spills.
func (e *Executor) cut(ctx context.Context, f *flight, out any) error {
	return e.encodeResult(ctx, f.tool, f.req, out, f.res)
}

// finish stores the result of a recorded call and audits it.
func (e *Executor) finish(ctx context.Context, f *flight) {
	if f.recorded {
		e.finishRecord(ctx, f)
	}
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

// acquire takes a slot of the service-wide limit and one of the tool's
// own: at once, or within the capacity wait a batch puts in ctx. It fails
// with ErrOverloaded when either has none free in time.
func (e *Executor) acquire(ctx context.Context, tool *Tool) (release func(), err error) {
	global, err := takeSlot(ctx, e.slots, true)
	if err != nil {
		return nil, notStarted(err, tool)
	}
	own, err := takeSlot(ctx, tool.slots, false)
	if err != nil {
		global()
		if errors.Is(err, ErrOverloaded) {
			err = &ToolLimitError{Tool: tool.Name, Max: tool.MaxConcurrency}
		}
		return nil, notStarted(err, tool)
	}
	return func() { own(); global() }, nil
}

// ToolLimitError is ErrOverloaded of a call refused by its tool's own
// limit (maxConcurrency) rather than the service's.
type ToolLimitError struct {
	Tool string
	Max  int
}

func (e *ToolLimitError) Error() string {
	return fmt.Sprintf("%v: tool %s runs at most %d calls at once", ErrOverloaded, e.Tool, e.Max)
}

func (e *ToolLimitError) Unwrap() error { return ErrOverloaded }

// takeSlot takes one of slots (nil: unbounded). With borrow, when slots
// has none free, it takes the slot lent by the call that runs this one,
// if any (lentSlotKey).
func takeSlot(ctx context.Context, slots chan struct{}, borrow bool) (release func(), err error) {
	if slots == nil {
		return func() {}, nil
	}
	select {
	case slots <- struct{}{}:
		return func() { <-slots }, nil
	default:
	}
	var lent chan struct{} // nil never ready: nothing to borrow
	var lender *lentSlot
	if borrow {
		if lender, _ = ctx.Value(lentSlotKey{}).(*lentSlot); lender != nil {
			lent = lender.ch
		}
	}
	select {
	case lent <- struct{}{}:
		return lender.giveBack, nil
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
		return func() { <-slots }, nil
	case lent <- struct{}{}:
		return lender.giveBack, nil
	case <-t.C:
		return nil, ErrOverloaded
	case <-ctx.Done():
		return nil, canceledError(ctx)
	}
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
// context is abandoned at the deadline, so the caller always gets an
// answer; it keeps its concurrency slots (release runs when the handler
// really returns) and is counted until then.
func (e *Executor) invoke(ctx context.Context, tool *Tool, series *toolSeries, req *Request, timeout time.Duration, release func()) (any, error) {
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req.Deadline, _ = tctx.Deadline()
	if series != nil {
		series.inFlight.Inc()
		defer series.inFlight.Dec()
	} else if e.metrics != nil {
		g := e.metrics.inFlight.WithLabelValues(tool.Name)
		g.Inc()
		defer g.Dec()
	}
	done, _ := e.answers.Get().(chan outcome)
	if done == nil {
		done = make(chan outcome, 1)
	}
	// fate is running until the handler returns or is abandoned, whichever
	// comes first; an abandoned handler is counted until it returns.
	var fate atomic.Int32
	returned := func() {
		req.dropSpills()
		release()
		if !fate.CompareAndSwap(handlerRunning, handlerReturned) {
			e.log.Info("abandoned tool returned", "tool", tool.Name, "toolCallId", req.CallID)
			if e.metrics != nil {
				e.metrics.abandoned.WithLabelValues(tool.Name).Dec()
			}
		}
	}
	e.runners.Go(func() {
		defer func() {
			if p := recover(); p != nil {
				e.log.Error("tool panicked", "tool", tool.Name, "toolCallId", req.CallID, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				returned()
				done <- outcome{err: fmt.Errorf("%w: tool %s panicked", errInternal, tool.Name)}
			}
		}()
		out, err := tool.Handler.Run(tctx, req)
		returned()
		done <- outcome{out, err}
	})
	select {
	case o := <-done:
		// The handler has answered and sends nothing more.
		e.answers.Put(done)
		if o.err != nil && tctx.Err() != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded) {
			return nil, timedOut(tool, timeout, o.err)
		}
		if o.err != nil && ctx.Err() != nil {
			return nil, stoppedError(ctx, tool)
		}
		return o.out, o.err
	case <-tctx.Done():
		// Give a tool that honours its context a moment to return, so only
		// the ones that ignore it are reported as abandoned.
		grace := time.NewTimer(abandonGrace)
		defer grace.Stop()
		abandoned := false
		var late error // what a handler that returned in the grace said
		select {
		case o := <-done:
			e.answers.Put(done)
			late = o.err
		case <-grace.C:
			if fate.CompareAndSwap(handlerRunning, handlerAbandoned) {
				abandoned = true
				e.log.Warn("tool did not return after its deadline; abandoned, its concurrency slot stays taken until it returns", "tool", tool.Name, "toolCallId", req.CallID)
				if e.metrics != nil {
					e.metrics.abandonedTotal.WithLabelValues(tool.Name).Inc()
					e.metrics.abandoned.WithLabelValues(tool.Name).Inc()
				}
			} else {
				<-done
				e.answers.Put(done)
			}
		}
		if ctx.Err() != nil {
			return nil, stoppedError(ctx, tool)
		}
		if abandoned {
			return nil, abandonedError(tool, timeout)
		}
		return nil, timedOut(tool, timeout, late)
	}
}

// timedOut is the error of a call whose handler returned err at or after
// its deadline: the handler's own E_TIMEOUT when it gave one (it may know
// why better, as a bridge to a server that was overloaded does), else
// timeoutError.
func timedOut(tool *Tool, timeout time.Duration, err error) error {
	var own *Error
	if errors.As(err, &own) && own.Code == CodeTimeout && own.Message != "" {
		return own
	}
	return timeoutError(tool, timeout)
}

// The fates of a handler goroutine.
const (
	handlerRunning int32 = iota
	handlerReturned
	handlerAbandoned
)

// abandonGrace is how long a tool may take to return once its context
// ends: long enough for a process sandbox to stop a process group
// (SIGTERM, a grace, SIGKILL), so the answer comes after the cleanup.
const abandonGrace = time.Second

// abandonedError is the E_TIMEOUT of a tool that did not return when its
// deadline told it to stop: unlike timeoutError it cannot say the tool
// was stopped, and a model that took it so could repeat a change that
// still happens.
func abandonedError(tool *Tool, timeout time.Duration) *Error {
	suggestion := "Try a smaller or simpler request, or a larger timeoutMs if the tool allows it."
	if tool.Tier != ReadOnly {
		suggestion = "Check whether its change took effect before you call it again: it may still complete. " + suggestion
	}
	return &Error{Code: CodeTimeout,
		Message:    fmt.Sprintf("tool %s did not finish within %s and did not stop when told to: it may still be running", tool.Name, timeout),
		Suggestion: suggestion}
}

func timeoutError(tool *Tool, timeout time.Duration) *Error {
	return &Error{Code: CodeTimeout,
		Message:    fmt.Sprintf("tool %s did not finish within %s and was stopped", tool.Name, timeout),
		Suggestion: "Try a smaller or simpler request, or a larger timeoutMs if the tool allows it."}
}

// Drain says that the service is shutting down: batches and plans in
// flight start none of their calls not yet started (those get E_CANCELED
// results saying so, and can be retried elsewhere), so that as little as
// can be is still running at the shutdown timeout, to be cut short and
// read E_INTERRUPTED. Calls already running go on; Execute itself is not
// affected (the HTTP server refuses new requests).
func (e *Executor) Drain() { e.drainOnce.Do(func() { close(e.draining) }) }

// isDraining reports whether Drain was called.
func (e *Executor) isDraining() bool {
	select {
	case <-e.draining:
		return true
	default:
		return false
	}
}

// canceledText is the message of a call canceled before it finished
// (canceledError), before the cause.
const canceledText = "the call was canceled before it finished"

func canceledError(ctx context.Context) *Error {
	msg := canceledText
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		msg += ": " + c.Error()
	}
	return &Error{Code: CodeCanceled, Message: msg}
}

// EffectsUnknownText ends the message of a call stopped while its tool
// may have been making its change.
const EffectsUnknownText = "whether its side effects happened is unknown"

// notStarted is err of a call canceled while it waited for a concurrency
// slot, saying that its tool never started. Any other err is returned as
// it is.
func notStarted(err error, tool *Tool) error {
	var c *Error
	if !errors.As(err, &c) || c.Code != CodeCanceled {
		return err
	}
	why := ""
	if cause := strings.TrimPrefix(c.Message, canceledText+": "); cause != c.Message {
		why = " (" + cause + ")"
	}
	return &Error{Code: CodeCanceled,
		Message:    fmt.Sprintf("not started: the call was canceled%s before tool %s started; nothing was executed", why, tool.Name),
		Suggestion: "Send the call again: nothing of it ran, so its toolCallId may be used again."}
}

// stoppedError is the E_CANCELED of a call canceled (its caller went
// away, or the call that made it ran out of time) while its tool ran. A
// tool that is not read_only may have made its change, or part of it:
// the answer, and the record a repeat reads, must not let a model take it
// for one that did nothing ("canceled before it finished") and make the
// change again. (At shutdown, process records such a call E_INTERRUPTED.)
func stoppedError(ctx context.Context, tool *Tool) *Error {
	err := canceledError(ctx)
	if tool.Tier == ReadOnly {
		return err
	}
	why := ""
	if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
		why = " (" + c.Error() + ")"
	}
	err.Message = fmt.Sprintf("stopped: the call was canceled%s while tool %s ran; %s", why, tool.Name, EffectsUnknownText)
	err.Suggestion = "Check whether the change this call was meant to make happened before making it again, with a new toolCallId (this one keeps this result)."
	return err
}

func (e *Executor) notFound(reg *Registry, caller *Caller, name string) *Error {
	err := &Error{Code: CodeToolNotFound, Message: fmt.Sprintf("no tool named %q", name)}
	if name == "" {
		err.Message = "no tool name given"
	}
	if how, ok := e.disabled[name]; ok {
		err.Message = fmt.Sprintf("tool %s is disabled on this service (%s)", name, how)
		err.Suggestion = "Do not call " + name + "; make the calls it would make one by one."
		return err
	}
	if close := reg.Closest(caller, name, 3); len(close) > 0 {
		err.Suggestion = "Did you mean " + strings.Join(close, ", ") + "?"
	} else {
		err.Suggestion = "No tool has a similar name. Use one of the exact names of the catalog (GET /tools lists it)."
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
	out.Message = clipMessage(strings.ToValidUTF8(out.Message, "\uFFFD"), limit)
	return out
}

// TraceContentLimit is how many characters of arguments and output a span
// records when content tracing is on.
const TraceContentLimit = 8192

func (e *Executor) observe(ctx context.Context, span trace.Span, f *flight, elapsed time.Duration) {
	res, label, caller, d, digest := f.res, f.label(), f.caller, f.decision, f.digest
	tier := Tier("")
	if f.tool != nil {
		tier = f.tool.Tier
	}
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
		if caller.Issuer != "" {
			// Who vouched for a token caller; never the token.
			span.SetAttributes(attribute.String("toolsvc.caller.issuer", caller.Issuer), attribute.String("toolsvc.caller.subject", caller.Subject))
		}
	}
	if s := f.series; s != nil && res.Status == StatusOK && code == "" {
		s.ok.get().Inc()
		ObserveWithTrace(s.okDuration.get(), span.SpanContext(), elapsed.Seconds())
		if res.Truncated {
			s.truncated.Inc()
		}
	} else if e.metrics != nil {
		e.metrics.calls.WithLabelValues(label, string(tier), string(res.Status), code).Inc()
		ObserveWithTrace(e.metrics.duration.WithLabelValues(label, string(res.Status)), span.SpanContext(), elapsed.Seconds())
		if res.Truncated {
			e.metrics.truncated.WithLabelValues(label).Inc()
		}
	}
	e.auditLine(ctx, caller, label, tier, res, d, digest)
}

// auditLine writes the audit line of a call ("tool call"). The call's context
// carries the trace ids to the log line; its cancellation does not matter
// to logging.
func (e *Executor) auditLine(ctx context.Context, caller *Caller, label string, tier Tier, res *Result, d Decision, digest string) {
	h := e.log.Handler()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	// Room for every attribute, so the line's attributes are gathered
	// without growing the slice.
	var room [14]slog.Attr
	attrs := append(room[:0], slog.String("caller", caller.ID))
	if caller.Issuer != "" {
		attrs = append(attrs, slog.String("issuer", caller.Issuer), slog.String("subject", caller.Subject))
	}
	attrs = append(attrs, slog.String("tool", label), slog.String("tier", string(tier)),
		slog.String("toolCallId", res.ToolCallID), slog.String("decision", string(d.Effect)), slog.String("rule", d.Rule),
		slog.String("status", string(res.Status)), slog.String("code", string(res.Code())),
		slog.Int64("durationMs", res.DurationMs), slog.String("argumentsDigest", digest))
	if id := RequestIDFrom(ctx); id != "" {
		attrs = append(attrs, slog.String("requestId", id))
	}
	// The record goes to the handler as Logger.LogAttrs would send it, less
	// the caller's program counter (runtime.Callers on every call), which
	// the handler has no use for: the service's log has no source
	// locations.
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "tool call", 0)
	r.AddAttrs(attrs...)
	_ = h.Handle(ctx, r)
}

// AuditRefused writes the audit line of a call answered before it reached
// the executor (a call of a batch that could not be read, or whose id
// another call of the batch has): every call the service answers has one.
// Its decision and digest are empty, as for a call refused before policy.
func (e *Executor) AuditRefused(ctx context.Context, caller *Caller, res *Result) {
	label, tier := UnknownTool, Tier("")
	if t, ok := e.Registry().Lookup(res.ToolName); ok {
		label, tier = t.Name, t.Tier
	}
	e.auditLine(ctx, caller, label, tier, res, Decision{}, "")
}

// AuditSettled writes the audit line of the call approval request a
// ended without running it: a denied request's call (E_APPROVAL_DENIED,
// decision deny) or an expired one's (E_APPROVAL_EXPIRED, decision ask,
// as nobody decided). An approved call has the line of its run instead,
// and a request still pending none, so for them it writes nothing. The
// line is the call's, as its run's would be: the caller it was filed by,
// the request's tool, tier, rule and arguments digest, and the request
// id ctx carries (the decider's). Only the one that moved the request
// (the decision's winner, the sweep that expired it) calls it, so a call
// has one such line however many approvers and replicas race.
func (e *Executor) AuditSettled(ctx context.Context, a *Approval) {
	var res *Result
	d := Decision{Rule: a.Rule}
	switch a.Status {
	case ApprovalDenied:
		res, d.Effect = ApprovalDeniedResult(a.ToolCallID, a.ToolName, a.DecidedBy, a.DecisionReason), Deny
	case ApprovalExpired:
		res, d.Effect = ApprovalExpiredResult(a.ToolCallID, a.ToolName), Ask
	default:
		return
	}
	caller := &Caller{ID: a.CallerID}
	if a.Filed != nil {
		filed := a.Filed.Caller
		caller = &filed
	}
	label := UnknownTool
	if t, ok := e.Registry().Lookup(a.ToolName); ok {
		label = t.Name
	}
	e.auditLine(ctx, caller, label, a.Tier, res, d, a.ArgumentsDigest)
}

// decodeArguments accepts an object, a string holding one, or nothing
// (an empty object). It returns the object's JSON and its decoded value.
// The object must be I-JSON (c checks it): arguments that parsers read
// differently, such as a member sent twice, would show a person
// approving the call one value and give the tool another.
func decodeArguments(raw json.RawMessage, maxDepth int, c *jsonChecker) (json.RawMessage, any, *Error) {
	raw = bytes.TrimSpace(raw)
	if !utf8.Valid(raw) {
		// Decoding would turn the bad bytes into U+FFFD for validation and
		// for the tool while the record kept them: refuse them, in an
		// object and in a string holding one alike.
		return nil, nil, &Error{Code: CodeInvalidArguments,
			Message: fmt.Sprintf("arguments are not valid UTF-8 (a bad byte at offset %d); JSON text must be UTF-8", invalidUTF8At(raw))}
	}
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, &Error{Code: CodeInvalidArguments, Message: "arguments string is not valid: " + err.Error()}
		}
		raw = bytes.TrimSpace([]byte(s))
		if len(raw) == 0 || string(raw) == "null" {
			raw = json.RawMessage("{}")
		}
	}
	if raw[0] != '{' {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: "arguments must be a JSON object (or a string holding one), got " + describeJSON(raw)}
	}
	if maxDepth > 0 && !WithinDepth(raw, maxDepth) {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: fmt.Sprintf("arguments nest deeper than %d levels", maxDepth)}
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: "arguments are not valid JSON: " + err.Error()}
	}
	if err := c.interoperable(raw); err != nil {
		return nil, nil, &Error{Code: CodeInvalidArguments, Message: "arguments are not interoperable JSON (RFC 7493): " + err.Error()}
	}
	return raw, v, nil
}

// invalidUTF8At returns the offset of the first byte of b that is not
// part of a valid UTF-8 sequence.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// WithinDepth reports whether the JSON in b nests at most max levels,
// before any decoder spends memory or stack on it.
func WithinDepth(b []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return false
			}
		case '}', ']':
			depth--
		}
	}
	return true
}

// describeJSON says what arguments that are not an object are.
func describeJSON(raw []byte) string {
	switch c := raw[0]; {
	case c == '[':
		return "an array"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '-' || c >= '0' && c <= '9':
		return "a number"
	case c == '"' && json.Valid(raw):
		return "a string holding a string: the arguments were encoded as JSON twice; send the object, or one string holding it"
	}
	s := Clip(string(raw), 40)
	if len(s) < len(raw) {
		s += "…"
	}
	return fmt.Sprintf("%q, which is not JSON", s)
}

// NewCallID returns a fresh toolCallId: the time in milliseconds (48
// bits) and 80 random bits, in hex. The time first makes the ids of
// calls that arrive together sort together, so their records land in
// the same pages of the store's index instead of one page each; the
// random part keeps two ids from ever meeting.
func NewCallID() string {
	var b [16]byte
	ms := uint64(time.Now().UnixMilli())
	b[0], b[1], b[2], b[3], b[4], b[5] = byte(ms>>40), byte(ms>>32), byte(ms>>24), byte(ms>>16), byte(ms>>8), byte(ms)
	_, _ = rand.Read(b[6:])
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
