package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// filing is a real store whose CreateApproval fails while createDown is
// set, and whose clean-up of a failed filing (WithdrawCall, and the
// FinishCall an earlier version used) fails while cleanupDown is set.
// CreateApproval takes delay before it writes, so that calls filing at
// once overlap.
type filing struct {
	registry.Store
	createDown, cleanupDown atomic.Bool
	delay                   time.Duration
	creates                 atomic.Int32
}

// failFiling makes call, whose filing fails and whose record then cannot
// be withdrawn either, so that it is left pending without its request.
func (f *filing) failFiling(t *testing.T, e *registry.Executor, caller *registry.Caller, call *registry.Call) {
	t.Helper()
	f.createDown.Store(true)
	f.cleanupDown.Store(true)
	defer f.createDown.Store(false)
	defer f.cleanupDown.Store(false)
	if _, err := e.Execute(t.Context(), caller, call); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("filing: %v, want ErrUnavailable", err)
	}
}

func (f *filing) CreateApproval(ctx context.Context, a *registry.Approval) error {
	if f.createDown.Load() {
		return errDown
	}
	f.creates.Add(1)
	time.Sleep(f.delay)
	return f.Store.CreateApproval(ctx, a)
}

func (f *filing) WithdrawCall(ctx context.Context, c, id, approvalID string) (bool, error) {
	if f.cleanupDown.Load() {
		return false, errDown
	}
	return f.Store.WithdrawCall(ctx, c, id, approvalID)
}

func (f *filing) FinishCall(ctx context.Context, c, id string, r *registry.Result, a *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	if f.cleanupDown.Load() {
		return nil, false, errDown
	}
	return f.Store.FinishCall(ctx, c, id, r, a)
}

// privileged is a tool the default policy asks a human about, and how
// many times it ran.
func privileged() (*registry.Tool, *atomic.Int32) {
	var runs atomic.Int32
	return &registry.Tool{
		Definition: registry.Definition{Name: "shell__exec", Description: "Runs.", Tier: registry.Privileged, Parameters: object},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return runs.Add(1), nil
		}),
	}, &runs
}

// TestFailedApprovalFilingIsWithdrawn: when the approval request cannot
// be filed, the call answers ErrUnavailable and leaves no record behind,
// so the retry the answer asks for files the call, and once approved it
// runs, once.
func TestFailedApprovalFilingIsWithdrawn(t *testing.T) {
	tool, runs := privileged()
	st := &filing{Store: openSQLite(t)}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	caller := registry.Anonymous()
	call := &registry.Call{ToolCallID: "ask-1", ToolName: "shell__exec"}

	st.createDown.Store(true)
	if res, err := e.Execute(t.Context(), caller, call); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("filing while the store refuses approval requests: %v %+v, want ErrUnavailable", err, res)
	}
	if rec, err := st.GetCall(t.Context(), caller.ID, "ask-1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("record after a failed filing: %+v, %v; want none", rec, err)
	}
	st.createDown.Store(false)
	res, err := e.Execute(t.Context(), caller, call)
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("retry: %v %+v, want pending_approval", err, res)
	}
	if _, err := st.GetApproval(t.Context(), res.Approval.ID); err != nil {
		t.Fatalf("the retry's ticket names approval %s: %v", res.Approval.ID, err)
	}
	_, out, err := e.Decide(t.Context(), caller, res.Approval.ID, registry.VerdictApprove, "")
	if err != nil || out.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("approving the retry: %v %+v (runs %d)", err, out, runs.Load())
	}
}

// TestUnfiledPendingCallIsFiledAgain: when the approval request cannot be
// filed and the pending record cannot be withdrawn either, the record
// names a request that does not exist; a retry files that very request,
// which then answers and runs the call.
func TestUnfiledPendingCallIsFiledAgain(t *testing.T) {
	tool, runs := privileged()
	st := &filing{Store: openSQLite(t)}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	caller := registry.Anonymous()
	call := &registry.Call{ToolCallID: "ask-2", ToolName: "shell__exec"}

	st.createDown.Store(true)
	st.cleanupDown.Store(true)
	if _, err := e.Execute(t.Context(), caller, call); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("filing while the store refuses approval requests: %v, want ErrUnavailable", err)
	}
	rec, err := st.GetCall(t.Context(), caller.ID, "ask-2")
	if err != nil || rec.State != registry.CallPendingApproval {
		t.Fatalf("record after a failed filing and clean-up: %+v, %v; want pending", rec, err)
	}
	if _, err := st.GetApproval(t.Context(), rec.ApprovalID); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("approval %s: %v, want ErrNotFound", rec.ApprovalID, err)
	}
	st.createDown.Store(false)
	st.cleanupDown.Store(false)
	res, err := e.Execute(t.Context(), caller, call)
	if err != nil || res.Status != registry.StatusPendingApproval || res.Approval.ID != rec.ApprovalID {
		t.Fatalf("retry: %v %+v, want pending_approval under %s", err, res, rec.ApprovalID)
	}
	if _, err := st.GetApproval(t.Context(), rec.ApprovalID); err != nil {
		t.Fatalf("approval %s after the retry: %v", rec.ApprovalID, err)
	}
	_, out, err := e.Decide(t.Context(), caller, rec.ApprovalID, registry.VerdictApprove, "")
	if err != nil || out.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("approving: %v %+v (runs %d)", err, out, runs.Load())
	}
	if res, err := e.Execute(t.Context(), caller, call); err != nil || res.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("retry after the approved run: %v %+v (runs %d)", err, res, runs.Load())
	}
}

// TestUnfiledPendingCallRunsOnceAllowed: a call whose approval request
// could not be filed (nor its pending record withdrawn) and that the
// policy allows by the time it is retried runs, once, instead of
// answering with a ticket to a request that does not exist.
func TestUnfiledPendingCallRunsOnceAllowed(t *testing.T) {
	tool, runs := privileged()
	st := &filing{Store: openSQLite(t)}
	reg := newRegistry(t, tool)
	e := registry.NewExecutor(registry.Options{Registry: reg, Store: st})
	caller := registry.Anonymous()
	call := &registry.Call{ToolCallID: "ask-allowed", ToolName: "shell__exec"}
	st.failFiling(t, e, caller, call)
	e.Load(reg, registry.TierDefaults{registry.ReadOnly: registry.Allow, registry.SideEffecting: registry.Allow, registry.Privileged: registry.Allow})
	for range 2 {
		if res, err := e.Execute(t.Context(), caller, call); err != nil || res.Status != registry.StatusOK || string(res.Output) != "1" {
			t.Fatalf("retry once allowed: %v %+v", err, res)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("the call ran %d times, want 1", runs.Load())
	}
}

// TestConcurrentRetriesFileOneRequest: retries that find an unfiled
// pending record at once file one approval request between them, all
// answer with its ticket, and the call runs once.
func TestConcurrentRetriesFileOneRequest(t *testing.T) {
	tool, runs := privileged()
	st := &filing{Store: openSQLite(t), delay: 20 * time.Millisecond}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	caller := registry.Anonymous()
	call := &registry.Call{ToolCallID: "ask-3", ToolName: "shell__exec"}
	st.failFiling(t, e, caller, call)

	const n = 8
	tickets := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res, err := e.Execute(t.Context(), caller, call)
			if err != nil || res.Status != registry.StatusPendingApproval {
				t.Errorf("retry %d: %v %+v", i, err, res)
				return
			}
			tickets[i] = res.Approval.ID
		})
	}
	wg.Wait()
	list, err := st.ListApprovals(t.Context(), registry.ApprovalFilter{CallerID: caller.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("%d approval requests filed, want 1: %+v", len(list), list)
	}
	for i, id := range tickets {
		if id != list[0].ID {
			t.Errorf("retry %d answered with ticket %q, want %s", i, id, list[0].ID)
		}
	}
	t.Logf("%d retries filed the request at once", st.creates.Load())
	if _, out, err := e.Decide(t.Context(), caller, list[0].ID, registry.VerdictApprove, ""); err != nil || out.Status != registry.StatusOK {
		t.Fatalf("approving: %v %+v", err, out)
	}
	if runs.Load() != 1 {
		t.Fatalf("the call ran %d times, want 1", runs.Load())
	}
	audit, err := st.ListAudit(t.Context(), registry.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	filed := 0
	for _, a := range audit {
		if a.Event == "call" && a.Status == registry.StatusPendingApproval {
			filed++
		}
	}
	if filed != 1 {
		t.Errorf("%d audit entries of the filing, want 1", filed)
	}
}

// TestRequestWithoutItsCallRunsNothing: a request whose call no longer
// waits for it (its record was withdrawn and filed again under another
// request, as when a filing committed after its caller had given up on
// it) is void: approving it runs nothing, and the call's own request
// still runs it, once.
func TestRequestWithoutItsCallRunsNothing(t *testing.T) {
	tool, runs := privileged()
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
	caller := registry.Anonymous()
	res, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "ask-4", ToolName: "shell__exec"})
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing: %v %+v", err, res)
	}
	own, err := st.GetApproval(t.Context(), res.Approval.ID)
	if err != nil {
		t.Fatal(err)
	}
	stale := *own
	stale.ID = "apr_stale"
	stale.Filed = &registry.Filing{Caller: *caller}
	if err := st.CreateApproval(t.Context(), &stale); err != nil {
		t.Fatal(err)
	}
	a, out, err := e.Decide(t.Context(), caller, stale.ID, registry.VerdictApprove, "")
	if err != nil || a.Status != registry.ApprovalExpired || out.Code() != registry.CodeApprovalExpired || runs.Load() != 0 ||
		!strings.HasPrefix(out.Error.Message, "nothing ran: no call") {
		t.Fatalf("approving a request no call waits for: %v %+v %+v (runs %d)", err, a, out, runs.Load())
	}
	if _, out, err := e.Decide(t.Context(), caller, own.ID, registry.VerdictApprove, ""); err != nil || out.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("approving the call's own request: %v %+v (runs %d)", err, out, runs.Load())
	}
}

// superseding is a real store whose FinishCall, while interrupted is set,
// finds the record already ended as E_INTERRUPTED, as when another replica
// interrupted it after this one could not renew its lease; while repeated
// is set, it finds the very result it was given (an earlier write of it
// committed).
type superseding struct {
	registry.Store
	interrupted, repeated atomic.Bool
}

func (s *superseding) FinishCall(ctx context.Context, c, id string, r *registry.Result, a *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	switch {
	case s.interrupted.Load():
		return &registry.CallRecord{CallerID: c, ToolCallID: id, ToolName: r.ToolName, State: registry.CallDone,
			Result: registry.InterruptedResult(id, r.ToolName)}, false, nil
	case s.repeated.Load():
		stored := *r
		stored.Output = append(json.RawMessage(" "), r.Output...)
		return &registry.CallRecord{CallerID: c, ToolCallID: id, ToolName: r.ToolName, State: registry.CallDone, Result: &stored}, false, nil
	}
	return s.Store.FinishCall(ctx, c, id, r, a)
}

// logBuffer collects log lines for a test to read while calls write them.
type logBuffer struct{ logtest.Buffer }

// lines returns the lines logged at level that hold every one of want.
func (l *logBuffer) lines(level string, want ...string) []string {
	var out []string
	for line := range strings.Lines(l.String()) {
		ok := strings.Contains(line, `"level":"`+level+`"`)
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if ok {
			out = append(out, line)
		}
	}
	return out
}

func newLogger(l *logBuffer) *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// TestRecordEndedElsewhereIsNotAnsweredOK: when the record of a call was
// ended by someone else while the call ran (E_INTERRUPTED), the answer is
// the record's, saying what the tool did here, and never a plain ok the
// record does not hold; the mismatch is logged as an error. A record that
// holds this very result (an earlier write committed) is answered as
// recorded.
func TestRecordEndedElsewhereIsNotAnsweredOK(t *testing.T) {
	tool, runs := appender()
	st := &superseding{Store: openSQLite(t)}
	var logs logBuffer
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st, Logger: newLogger(&logs)})
	caller := registry.Anonymous()

	st.interrupted.Store(true)
	res, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "lost-1", ToolName: "fs__append"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != registry.StatusError || res.Code() != registry.CodeInterrupted || res.RecordPending || runs.Load() != 1 {
		t.Fatalf("answer of a call whose record was interrupted elsewhere: %+v (runs %d), want E_INTERRUPTED", res, runs.Load())
	}
	if msg := res.Error.Message; !strings.Contains(msg, "finish here, with ok") || res.Error.Suggestion == "" {
		t.Errorf("the answer does not say what the tool did: %+v", res.Error)
	}
	if got := logs.lines("ERROR", `"toolCallId":"lost-1"`, `"recorded":"E_INTERRUPTED"`); len(got) != 1 {
		t.Errorf("error lines naming the call: %q", got)
	}

	st.interrupted.Store(false)
	st.repeated.Store(true)
	res, err = e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "lost-2", ToolName: "fs__append"})
	if err != nil || res.Status != registry.StatusOK || string(res.Output) != "2" {
		t.Fatalf("answer of a call whose record holds its result already: %v %+v", err, res)
	}
	if got := logs.lines("ERROR", `"toolCallId":"lost-2"`); len(got) != 0 {
		t.Errorf("error lines for a result recorded already: %q", got)
	}
}

// TestFlushRecordsAtShutdown: the last flush of a stopping service writes
// what the store took back to taking, and logs what it cannot write, one
// error line each (toolCallId, caller, event) and their count.
func TestFlushRecordsAtShutdown(t *testing.T) {
	side := &registry.Tool{
		Definition: registry.Definition{Name: "fs__append", Description: "Appends.", Tier: registry.SideEffecting, Parameters: object},
		Handler:    registry.Func(func(context.Context, *registry.Request) (any, error) { return "appended", nil }),
	}
	ask, _ := privileged()
	st := &flaky{Store: openSQLite(t)}
	var logs logBuffer
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, side, ask), Store: st, Logger: newLogger(&logs)})
	caller := registry.Anonymous()

	st.down.Store(true)
	if res, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "held-result", ToolName: "fs__append"}); err != nil || !res.RecordPending {
		t.Fatalf("call while the store refuses results: %v %+v", err, res)
	}
	if res, err := e.Execute(t.Context(), caller, &registry.Call{ToolCallID: "held-audit", ToolName: "shell__exec"}); err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing while the store refuses audit entries: %v %+v", err, res)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	n := e.FlushRecords(ctx)
	cancel()
	if n != 2 {
		t.Errorf("FlushRecords with the store down = %d, want 2", n)
	}
	for _, id := range []string{"held-result", "held-audit"} {
		if got := logs.lines("ERROR", `"toolCallId":"`+id+`"`, `"caller":"anonymous"`, `"event":"call"`, "stopping with"); len(got) != 1 {
			t.Errorf("error lines for %s: %q", id, got)
		}
	}
	if got := logs.lines("ERROR", `"held":2`); len(got) != 1 {
		t.Errorf("count lines: %q", got)
	}

	st.down.Store(false)
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if n := e.FlushRecords(ctx); n != 0 {
		t.Fatalf("FlushRecords with the store back = %d, want 0", n)
	}
	rec, err := st.GetCall(t.Context(), caller.ID, "held-result")
	if err != nil || rec.State != registry.CallDone || string(rec.Result.Output) != `"appended"` || rec.Result.RecordPending {
		t.Fatalf("record after the flush: %v %+v", err, rec)
	}
	audit, err := st.ListAudit(t.Context(), registry.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range audit {
		got = append(got, a.ToolCallID+" "+string(a.Status))
	}
	if strings.Join(got, ",") != "held-result ok,held-audit pending_approval" && strings.Join(got, ",") != "held-audit pending_approval,held-result ok" {
		t.Errorf("audit trail after the flush: %q", got)
	}
	if got := logs.lines("ERROR", `"held":`); len(got) != 1 {
		t.Errorf("the flush that wrote everything logged a count: %q", got)
	}
}
