package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

var object = json.RawMessage(`{"type":"object"}`)

func openSQLite(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newRegistry(t *testing.T, tools ...*registry.Tool) *registry.Registry {
	t.Helper()
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// approve files call as caller (it must be privileged, so it asks) and
// approves it, returning the result the approved call ends with.
func approve(t *testing.T, e *registry.Executor, caller *registry.Caller, call *registry.Call) *registry.Result {
	t.Helper()
	res, err := e.Execute(t.Context(), caller, call)
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing: %v %+v", err, res)
	}
	_, out, err := e.Decide(t.Context(), registry.Anonymous(), res.Approval.ID, registry.VerdictApprove, "")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestApprovedCallKeepsFilingCatalog: an approved plan-like call runs as
// the caller that filed it, so the sub-call it makes to a tool outside
// that caller's catalog (or outside the request's catalog) is refused.
func TestApprovedCallKeepsFilingCatalog(t *testing.T) {
	var secretRuns atomic.Int32
	var e *registry.Executor
	plan := &registry.Tool{
		Definition: registry.Definition{Name: "plan__execute", Description: "Runs one step.", Tier: registry.Privileged,
			Parameters: json.RawMessage(`{"type":"object","properties":{"tool":{"type":"string"}},"required":["tool"]}`)},
		Handler: registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
			var args struct{ Tool string }
			if err := json.Unmarshal(req.Arguments, &args); err != nil {
				return nil, err
			}
			res, err := e.Execute(ctx, req.Caller, &registry.Call{ToolName: args.Tool, Catalog: req.Catalog})
			if err != nil {
				return nil, err
			}
			return map[string]any{"status": res.Status, "code": res.Code()}, nil
		}),
	}
	secret := &registry.Tool{
		Definition: registry.Definition{Name: "http__get", Description: "Fetches.", Tier: registry.ReadOnly, Parameters: object},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			secretRuns.Add(1)
			return "fetched", nil
		}),
	}
	public := &registry.Tool{
		Definition: registry.Definition{Name: "text__upper", Description: "Uppercases.", Tier: registry.ReadOnly, Parameters: object},
		Handler:    registry.Func(func(context.Context, *registry.Request) (any, error) { return "OK", nil }),
	}
	e = registry.NewExecutor(registry.Options{Registry: newRegistry(t, plan, secret, public), Store: openSQLite(t)})

	restricted := &registry.Caller{ID: "alice", Tools: []string{"plan__*", "text__*"}, Scopes: []registry.Scope{registry.ScopeCall}}
	for _, tc := range []struct {
		name    string
		caller  *registry.Caller
		catalog []string
	}{
		{"caller's globs", restricted, nil},
		{"request's catalog", &registry.Caller{ID: "bob", Scopes: []registry.Scope{registry.ScopeCall}}, []string{"plan__execute", "text__upper"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := approve(t, e, tc.caller, &registry.Call{ToolCallID: "plan-" + tc.caller.ID, ToolName: "plan__execute",
				Arguments: json.RawMessage(`{"tool":"http__get"}`), Catalog: tc.catalog})
			if out.Status != registry.StatusOK || !strings.Contains(string(out.Output), string(registry.CodeToolNotInCatalog)) {
				t.Fatalf("approved plan reached a tool outside the filing catalog: %+v %s", out, out.Output)
			}
			out = approve(t, e, tc.caller, &registry.Call{ToolCallID: "plan-ok-" + tc.caller.ID, ToolName: "plan__execute",
				Arguments: json.RawMessage(`{"tool":"text__upper"}`), Catalog: tc.catalog})
			if out.Status != registry.StatusOK || !strings.Contains(string(out.Output), `"ok"`) {
				t.Fatalf("approved plan could not use a tool in its catalog: %+v %s", out, out.Output)
			}
		})
	}
	if n := secretRuns.Load(); n != 0 {
		t.Fatalf("http__get ran %d times", n)
	}
}

// TestApprovedCallKeepsTimeout: an approved call filed with timeoutMs 1000
// is stopped at 1s, not at the tool's 30s default.
func TestApprovedCallKeepsTimeout(t *testing.T) {
	loop := &registry.Tool{
		Definition: registry.Definition{Name: "shell__loop", Description: "Loops.", Tier: registry.Privileged, Parameters: object},
		Handler: registry.Func(func(ctx context.Context, _ *registry.Request) (any, error) {
			for ctx.Err() == nil {
				time.Sleep(time.Millisecond)
			}
			return nil, ctx.Err()
		}),
	}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, loop), Store: openSQLite(t)})
	out := approve(t, e, &registry.Caller{ID: "alice", Scopes: []registry.Scope{registry.ScopeCall}},
		&registry.Call{ToolCallID: "loop-1", ToolName: "shell__loop", TimeoutMs: 1000})
	if out.Code() != registry.CodeTimeout || !strings.Contains(out.Error.Message, "within 1s") {
		t.Fatalf("approved call with timeoutMs 1000 ended %+v, want E_TIMEOUT within 1s", out.Error)
	}
}

// TestAbandonedHandlerKeepsItsSlot: a handler that ignores its deadline
// answers E_TIMEOUT but keeps the only slot until it returns, and is
// counted meanwhile.
func TestAbandonedHandlerKeepsItsSlot(t *testing.T) {
	unblock := make(chan struct{})
	stuck := stuckTool("fs__search", registry.ReadOnly, unblock)
	m := registry.NewMetrics(prometheus.NewRegistry())
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, stuck), MaxConcurrency: 1, Metrics: m})
	caller := registry.Anonymous()
	res, err := e.Execute(t.Context(), caller, &registry.Call{ToolName: "fs__search"})
	if err != nil || res.Code() != registry.CodeTimeout {
		t.Fatalf("first call: %v %+v", err, res)
	}
	// It was not stopped, and the model is not told it was.
	if want := "did not finish within 50ms and did not stop when told to: it may still be running"; !strings.Contains(res.Error.Message, want) {
		t.Errorf("abandoned call's message %q, want it to say %q", res.Error.Message, want)
	}
	if _, err := e.Execute(t.Context(), caller, &registry.Call{ToolName: "fs__search"}); !errors.Is(err, registry.ErrOverloaded) {
		t.Fatalf("a call while the abandoned handler runs: %v, want ErrOverloaded", err)
	}
	if got := testutil.ToFloat64(m.AbandonedTotal("fs__search")); got != 1 {
		t.Fatalf("abandoned total %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Abandoned("fs__search")); got != 1 {
		t.Fatalf("abandoned running %v, want 1", got)
	}
	close(unblock)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(m.Abandoned("fs__search")) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned handler returned but is still counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	res, err = e.Execute(t.Context(), caller, &registry.Call{ToolName: "fs__search"})
	if err != nil || res.Status != registry.StatusOK {
		t.Fatalf("after the handler returned: %v %+v", err, res)
	}
}

// stuckTool is a tool with a 50 ms timeout whose handler ignores its
// context and returns only once unblock is closed.
func stuckTool(name string, tier registry.Tier, unblock <-chan struct{}) *registry.Tool {
	return &registry.Tool{
		Definition: registry.Definition{Name: name, Description: "Ignores its context.", Tier: tier, Parameters: object,
			Timeout: 50 * time.Millisecond},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			<-unblock
			return "late", nil
		}),
	}
}

// An abandoned tool that changes things tells the model to check the
// change before calling again: it may still happen.
func TestAbandonedSideEffectSaysCheckFirst(t *testing.T) {
	unblock := make(chan struct{})
	defer close(unblock)
	stuck := stuckTool("fs__write", registry.SideEffecting, unblock)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, stuck)})
	res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "fs__write"})
	if err != nil || res.Code() != registry.CodeTimeout || !strings.Contains(res.Error.Message, "it may still be running") ||
		!strings.HasPrefix(res.Error.Suggestion, "Check whether its change took effect before you call it again") {
		t.Fatalf("abandoned side-effecting call: %v %+v", err, res.Error)
	}
}

// TestStringArgumentsDepth: 100,000-deep nesting inside an arguments
// string is refused before it is decoded.
func TestStringArgumentsDepth(t *testing.T) {
	var ran atomic.Int32
	tool := &registry.Tool{
		Definition: registry.Definition{Name: "data__any", Description: "Takes anything.", Tier: registry.ReadOnly, Parameters: object},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			ran.Add(1)
			return "ran", nil
		}),
	}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool)})
	deep := `{"a":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`
	quoted, _ := json.Marshal(deep)
	res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__any", Arguments: quoted})
	if err != nil || res.Code() != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, "deeper than 64 levels") {
		t.Fatalf("deep string arguments: %v %+v", err, res.Error)
	}
	if ran.Load() != 0 {
		t.Fatal("the tool ran")
	}
}

// appender is a side-effecting tool that answers how many times it ran.
func appender() (*registry.Tool, *atomic.Int32) {
	var runs atomic.Int32
	return &registry.Tool{
		Definition: registry.Definition{Name: "fs__append", Description: "Appends.", Tier: registry.SideEffecting, Parameters: object},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return runs.Add(1), nil
		}),
	}, &runs
}

// flaky is a real store whose FinishCall and AppendAudit fail while down
// is set, as when the database goes away after a tool ran, and whose
// BeginCall fails while beginDown is set.
type flaky struct {
	registry.Store
	down, beginDown atomic.Bool
}

func (f *flaky) BeginCall(ctx context.Context, rec *registry.CallRecord) (*registry.CallRecord, bool, error) {
	if f.beginDown.Load() {
		return nil, false, errDown
	}
	return f.Store.BeginCall(ctx, rec)
}

var errDown = errors.New("store down")

func (f *flaky) FinishCall(ctx context.Context, c, id string, r *registry.Result, a *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	if f.down.Load() {
		return nil, false, errDown
	}
	return f.Store.FinishCall(ctx, c, id, r, a)
}

func (f *flaky) AppendAudit(ctx context.Context, e *registry.AuditEntry) error {
	if f.down.Load() {
		return errDown
	}
	return f.Store.AppendAudit(ctx, e)
}

// TestUnrecordedResultIsHeldAndRetried: when the record cannot be
// finished after the tool ran, the answer says so, a retry is answered
// from memory without running again, and the background retry lands the
// result and its audit entry once the store is back.
func TestUnrecordedResultIsHeldAndRetried(t *testing.T) {
	tool, runs := appender()
	st := &flaky{Store: openSQLite(t)}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	caller := registry.Anonymous()
	call := &registry.Call{ToolCallID: "held-1", ToolName: "fs__append"}
	st.down.Store(true)
	res, err := e.Execute(t.Context(), caller, call)
	if err != nil || res.Status != registry.StatusOK || !res.RecordPending {
		t.Fatalf("call while the store fails: %v %+v", err, res)
	}
	again, err := e.Execute(t.Context(), caller, call)
	if err != nil || !again.RecordPending || string(again.Output) != "1" || runs.Load() != 1 {
		t.Fatalf("retry: %v %+v (runs %d)", err, again, runs.Load())
	}
	if _, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "held-1", ToolName: "fs__append", Arguments: json.RawMessage(`{"x":1}`)}); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("other arguments under a held id: %v, want ErrConflict", err)
	}
	if _, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "held-1", ToolName: "fs__append", Context: registry.CallContext{InstanceKey: "other"}}); !errors.Is(err, registry.ErrConflict) {
		t.Fatalf("another instance under a held id: %v, want ErrConflict", err)
	}
	rec, err := st.GetCall(t.Context(), caller.ID, "held-1")
	if err != nil || rec.State != registry.CallRunning {
		t.Fatalf("record while held: %v %+v", err, rec)
	}
	st.down.Store(false)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { e.RetryRecords(ctx, 50*time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	rec, err = st.WaitCall(wctx, caller.ID, "held-1")
	if err != nil || rec.Result.Status != registry.StatusOK || string(rec.Result.Output) != "1" || rec.Result.RecordPending {
		t.Fatalf("record after the store came back: %v %+v", err, rec)
	}
	for {
		audit, err := st.ListAudit(t.Context(), registry.AuditFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(audit) == 1 && audit[0].ToolCallID == "held-1" && audit[0].Status == registry.StatusOK {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("audit trail after the store came back: %+v", audit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res, err = e.Execute(t.Context(), caller, call)
	if err != nil || res.RecordPending || string(res.Output) != "1" || runs.Load() != 1 {
		t.Fatalf("retry after recording: %v %+v (runs %d)", err, res, runs.Load())
	}
}

// TestAuditNamesTokenCallers: the audit entries of a token caller's call
// (filed, and run once approved) carry its issuer and subject, the
// approval entry the approver's, and a static caller's neither; the
// call's record carries the trace id of the context it was made in.
func TestAuditNamesTokenCallers(t *testing.T) {
	tool := &registry.Tool{
		Definition: registry.Definition{Name: "shell__exec", Description: "Runs.", Tier: registry.Privileged, Parameters: object},
		Handler:    registry.Func(func(context.Context, *registry.Request) (any, error) { return "ran", nil }),
	}
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	const issuer = "https://idp.example.com/realms/ops"
	alice := &registry.Caller{ID: "alice", Issuer: issuer, Subject: "sub-alice", Scopes: []registry.Scope{registry.ScopeCall}}
	oncall := &registry.Caller{ID: "oncall", Issuer: issuer, Subject: "sub-oncall", Scopes: []registry.Scope{registry.ScopeApprove}}
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithRemoteSpanContext(t.Context(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))

	res, err := e.Execute(ctx, alice, &registry.Call{ToolCallID: "a-1", ToolName: "shell__exec"})
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing: %v %+v", err, res)
	}
	if rec, err := st.GetCall(t.Context(), "alice", "a-1"); err != nil || rec.TraceID != tid.String() {
		t.Fatalf("pending record = %+v, %v; want trace id %s", rec, err, tid)
	}
	if _, out, err := e.Decide(t.Context(), oncall, res.Approval.ID, registry.VerdictApprove, ""); err != nil || out.Status != registry.StatusOK {
		t.Fatalf("approving: %v %+v", err, out)
	}
	if _, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolCallID: "s-1", ToolName: "shell__exec"}); err != nil {
		t.Fatal(err)
	}
	if rec, err := st.GetCall(t.Context(), "anonymous", "s-1"); err != nil || rec.TraceID != "" {
		t.Errorf("record of a call without a trace = %+v, %v; want no trace id", rec, err)
	}

	audit, err := st.ListAudit(t.Context(), registry.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range audit {
		got = append(got, a.Event+" "+a.CallerID+" "+string(a.Status)+" "+a.Issuer+" "+a.Subject)
	}
	want := []string{
		"call alice pending_approval " + issuer + " sub-alice",
		"approval oncall  " + issuer + " sub-oncall",
		"call alice ok " + issuer + " sub-alice",
		"call anonymous pending_approval  ",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit trail:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestBatchAnswersRefusedCallsInTheirSlots: a batch call whose toolCallId
// names another call, or that the store cannot record, gets an error
// result in its own slot saying it did not run, and the batch's other
// calls run and keep their results; a batch none of whose calls could be
// recorded fails as a whole, as a single call would.
func TestBatchAnswersRefusedCallsInTheirSlots(t *testing.T) {
	tool, runs := appender()
	st := &flaky{Store: openSQLite(t)}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	caller := registry.Anonymous()
	if res, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "used", ToolName: "fs__append", Arguments: json.RawMessage(`{"x":1}`)}); err != nil || res.Status != registry.StatusOK {
		t.Fatalf("first call: %v %+v", err, res)
	}
	res, err := e.ExecuteBatch(t.Context(), caller, []*registry.Call{
		{ToolCallID: "used", ToolName: "fs__append", Arguments: json.RawMessage(`{"x":2}`)},
		{ToolCallID: "fresh", ToolName: "fs__append", Arguments: json.RawMessage(`{"x":1}`)},
	}, registry.BatchOptions{})
	if err != nil || len(res) != 2 {
		t.Fatalf("batch with a used id: %v %+v", err, res)
	}
	if res[0] == nil || res[0].Code() != registry.CodeInvalidArguments || res[0].ToolCallID != "used" ||
		!strings.HasPrefix(res[0].Error.Message, "not run: ") || res[0].Error.Suggestion == "" {
		t.Errorf("call under a used id: %+v", res[0])
	}
	if res[1] == nil || res[1].Status != registry.StatusOK || string(res[1].Output) != "2" {
		t.Errorf("the other call: %+v", res[1])
	}

	st.beginDown.Store(true)
	res, err = e.ExecuteBatch(t.Context(), caller, []*registry.Call{
		{ToolCallID: "fresh", ToolName: "fs__append", Arguments: json.RawMessage(`{"x":1}`)},
		{ToolCallID: "down", ToolName: "fs__append", Arguments: json.RawMessage(`{"x":1}`)},
	}, registry.BatchOptions{})
	if err != nil || len(res) != 2 {
		t.Fatalf("batch while the store cannot record: %v %+v", err, res)
	}
	if res[1] == nil || res[1].Code() != registry.CodeCanceled || !strings.Contains(res[1].Error.Message, "store did not answer") || res[1].ToolCallID != "down" {
		t.Errorf("call the store could not record: %+v", res[1])
	}
	if _, err := e.ExecuteBatch(t.Context(), caller, []*registry.Call{
		{ToolCallID: "down", ToolName: "fs__append", Arguments: json.RawMessage(`{"x":1}`)},
	}, registry.BatchOptions{}); !errors.Is(err, registry.ErrUnavailable) {
		t.Errorf("batch none of whose calls could be recorded: %v, want ErrUnavailable", err)
	}
	if runs.Load() != 2 {
		t.Errorf("the tool ran %d times, want 2", runs.Load())
	}
}

// A call that lends its slot to the calls it runs (Tool.Nests) gives that
// slot back only once a borrower abandoned at its deadline has returned:
// until then the borrower still runs and counts against the limit.
func TestAbandonedBorrowerKeepsTheLendersSlot(t *testing.T) {
	unblock := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(unblock) }) }
	defer free()
	var e *registry.Executor
	nest := &registry.Tool{
		Definition: registry.Definition{Name: "test__nest", Description: "Runs test__stuck.", Tier: registry.ReadOnly, Parameters: object, Timeout: 10 * time.Second},
		Nests:      true,
		Handler: registry.Func(func(ctx context.Context, _ *registry.Request) (any, error) {
			res, err := e.Execute(ctx, registry.Anonymous(), &registry.Call{ToolName: "test__stuck"})
			if err != nil {
				return nil, err
			}
			return res.Code(), nil
		}),
	}
	other := &registry.Tool{
		Definition: registry.Definition{Name: "test__other", Description: "Answers.", Tier: registry.ReadOnly, Parameters: object},
		Handler:    registry.Func(func(context.Context, *registry.Request) (any, error) { return "ok", nil }),
	}
	e = registry.NewExecutor(registry.Options{Registry: newRegistry(t, nest, other, stuckTool("test__stuck", registry.ReadOnly, unblock)), MaxConcurrency: 1})
	res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__nest"})
	if err != nil || res.Status != registry.StatusOK || string(res.Output) != `"`+string(registry.CodeTimeout)+`"` {
		t.Fatalf("the lender: %v %+v %s", err, res, res.Output)
	}
	// The lender has returned; its borrower runs on, abandoned.
	if _, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__other"}); !errors.Is(err, registry.ErrOverloaded) {
		t.Fatalf("a call while the abandoned borrower runs on a service with one slot: %v, want ErrOverloaded", err)
	}
	free()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__other"})
		if err == nil && res.Status == registry.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot did not come back after the borrower returned: %v %+v", err, res)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// What an exec, HTTP or MCP tool writes reaches every client. JSON that
// parsers read differently or not at all (RFC 7493's I-JSON is what they
// read alike) is passed on as the text it is, so that every client can
// read the result; a tool that declares an output schema is faulty.
func TestOutputThatParsersReadDifferentlyIsText(t *testing.T) {
	outputs := map[string]string{
		"dup":       `{"a":1,"a":2}`,
		"overflow":  `{"a":1e999999}`,
		"surrogate": `{"a":"\ud800"}`,
		"utf8":      "{\"a\":\"\xff\"}",
	}
	emit := registry.Func(func(_ context.Context, r *registry.Request) (any, error) {
		var args struct{ Mode string }
		if err := r.Bind(&args); err != nil {
			return nil, err
		}
		return json.RawMessage(outputs[args.Mode]), nil
	})
	plain := &registry.Tool{Definition: registry.Definition{Name: "test__emit", Description: "Emits.", Tier: registry.ReadOnly, Parameters: object, Type: "exec"}, Handler: emit}
	shaped := &registry.Tool{Definition: registry.Definition{Name: "test__shaped", Description: "Emits.", Tier: registry.ReadOnly, Parameters: object, Type: "exec",
		OutputSchema: json.RawMessage(`{"type":"object"}`)}, Handler: emit}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, plain, shaped)})
	for mode, out := range outputs {
		args := json.RawMessage(`{"mode":"` + mode + `"}`)
		res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__emit", Arguments: args})
		if err != nil || res.Status != registry.StatusOK {
			t.Fatalf("%s: %v %+v", mode, err, res)
		}
		var text string
		if err := json.Unmarshal(res.Output, &text); err != nil || !utf8.Valid(res.Output) || text != strings.ToValidUTF8(out, "\uFFFD") {
			t.Errorf("%s: output %q, want the tool's text %q as a JSON string (%v)", mode, res.Output, out, err)
		}
		whole, _ := json.Marshal(res)
		var back map[string]any
		if err := json.Unmarshal(whole, &back); err != nil {
			t.Errorf("%s: a Go client cannot read the result %s: %v", mode, whole, err)
		}
		res, err = e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__shaped", Arguments: args})
		if err != nil || res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "not interoperable JSON") {
			t.Errorf("%s with an output schema: %v %+v", mode, err, res.Error)
		}
	}
	// JSON every parser reads alike stays structured.
	outputs["fine"] = `{"a":{"b":1},"c":{"b":2},"d":"\ud83d\ude00","e":123456789012345678901234567890}`
	res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__shaped", Arguments: json.RawMessage(`{"mode":"fine"}`)})
	if err != nil || res.Status != registry.StatusOK || string(res.Output) != outputs["fine"] {
		t.Errorf("I-JSON output: %v %+v %s", err, res.Error, res.Output)
	}
}

// A handler that returns its own E_TIMEOUT at its deadline knows better
// why the time ran out (a bridge to an overloaded server does): its
// account is kept. Any other error at the deadline is the executor's.
func TestOwnTimeoutAccountIsKept(t *testing.T) {
	own := &registry.Error{Code: registry.CodeTimeout, Message: "server x is overloaded", Suggestion: "Try again later."}
	for _, late := range []time.Duration{0, 100 * time.Millisecond} {
		tool := func(name string, err error) *registry.Tool {
			return &registry.Tool{
				Definition: registry.Definition{Name: name, Description: "Waits.", Tier: registry.ReadOnly, Parameters: object, Timeout: 50 * time.Millisecond},
				Handler: registry.Func(func(ctx context.Context, _ *registry.Request) (any, error) {
					<-ctx.Done()
					time.Sleep(late) // within the grace, or not at all
					return nil, err
				}),
			}
		}
		e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool("test__own", own), tool("test__plain", context.DeadlineExceeded))})
		res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__own"})
		if err != nil || res.Code() != registry.CodeTimeout || res.Error.Message != own.Message || res.Error.Suggestion != own.Suggestion {
			t.Errorf("returned %s after the deadline with its own E_TIMEOUT: %v %+v", late, err, res.Error)
		}
		res, err = e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "test__plain"})
		if err != nil || res.Code() != registry.CodeTimeout || !strings.Contains(res.Error.Message, "did not finish within") {
			t.Errorf("returned %s after the deadline with the context's error: %v %+v", late, err, res.Error)
		}
	}
}
