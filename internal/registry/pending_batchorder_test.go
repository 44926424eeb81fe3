package registry_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// askFor asks a human about the calls of tool, and allows the others.
type askFor string

func (a askFor) Decide(_ context.Context, in *registry.PolicyInput) (registry.Decision, error) {
	if in.Tool.Name == string(a) {
		return registry.Decision{Effect: registry.Ask, Rule: "ask-" + string(a)}, nil
	}
	return registry.Decision{Effect: registry.Allow, Rule: "allow"}, nil
}

// runLog records, in order, the calls of the tools it makes.
type runLog struct {
	mu  sync.Mutex
	ran []string
}

func (l *runLog) tool(name string, tier registry.Tier) *registry.Tool {
	return &registry.Tool{
		Definition: registry.Definition{Name: name, Description: "Runs.", Tier: tier, Parameters: object},
		Handler: registry.Func(func(_ context.Context, r *registry.Request) (any, error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.ran = append(l.ran, r.CallID)
			return "ran", nil
		}),
	}
}

func (l *runLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.ran, ",")
}

func batchCalls(tools ...string) []*registry.Call {
	calls := make([]*registry.Call, len(tools))
	for i, name := range tools {
		calls[i] = &registry.Call{ToolCallID: "c" + string(rune('1'+i)), ToolName: name, Arguments: json.RawMessage(`{}`)}
	}
	return calls
}

// TestBatchHoldsCallsAfterAPendingOne: a call that waits for approval has
// not run, so the calls that would start only after it finished do not
// start (a write after it would overtake it, a read after it would read
// what it has not yet changed); the read_only calls running alongside a
// pending read_only call do run. Sent again once the call is approved and
// done, the batch goes on where it stopped, running nothing twice.
func TestBatchHoldsCallsAfterAPendingOne(t *testing.T) {
	var log runLog
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Store: st, Policy: askFor("t__deploy"), Registry: newRegistry(t,
		log.tool("t__read", registry.ReadOnly), log.tool("t__deploy", registry.SideEffecting), log.tool("t__write", registry.SideEffecting))})
	calls := batchCalls("t__read", "t__deploy", "t__read", "t__write", "t__read")
	res, err := e.ExecuteBatch(t.Context(), registry.Anonymous(), calls, registry.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != registry.StatusOK || res[1].Status != registry.StatusPendingApproval {
		t.Fatalf("the call before and the pending call: %+v / %+v", res[0], res[1])
	}
	for i, r := range res[2:] {
		if r.Code() != registry.CodeCanceled || r.ToolCallID != calls[i+2].ToolCallID ||
			!strings.HasPrefix(r.Error.Message, `not started: call 2 of the batch (toolCallId "c2") waits for approval`) ||
			!strings.Contains(r.Error.Message, registry.HeldText) || !strings.Contains(r.Error.Message, "nothing was executed") ||
			!strings.Contains(r.Error.Suggestion, "its toolCallId may be used again") {
			t.Errorf("call %d after the pending one: %+v", i+3, r.Error)
		}
	}
	if got := log.String(); got != "c1" {
		t.Fatalf("calls that ran: %s, want only c1", got)
	}
	// The pending call is approved, and runs; the batch sent again then
	// runs the rest after it.
	if _, out, err := e.Decide(t.Context(), registry.Anonymous(), res[1].Approval.ID, registry.VerdictApprove, ""); err != nil || out.Status != registry.StatusOK {
		t.Fatalf("approving: %v %+v", err, out)
	}
	res, err = e.ExecuteBatch(t.Context(), registry.Anonymous(), calls, registry.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Status != registry.StatusOK {
			t.Errorf("call %d of the batch sent again: %+v", i+1, r.Error)
		}
	}
	// c1 and c3, c5 are read_only (not recorded) and run again; c2 ran
	// once, when approved, and c4 after it.
	if got := log.String(); got != "c1,c2,c1,c3,c4,c5" {
		t.Errorf("calls that ran: %s, want c1,c2,c1,c3,c4,c5", got)
	}
}

// TestBatchRunsReadsAlongsideAPendingRead: read_only calls next to each
// other do not wait for one another, so a pending one among them holds
// back only what follows the run of them.
func TestBatchRunsReadsAlongsideAPendingRead(t *testing.T) {
	var log runLog
	e := registry.NewExecutor(registry.Options{Store: openSQLite(t), Policy: askFor("t__peek"), Registry: newRegistry(t,
		log.tool("t__read", registry.ReadOnly), log.tool("t__peek", registry.ReadOnly), log.tool("t__write", registry.SideEffecting))})
	res, err := e.ExecuteBatch(t.Context(), registry.Anonymous(), batchCalls("t__read", "t__peek", "t__read", "t__write", "t__read"), registry.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != registry.StatusOK || res[1].Status != registry.StatusPendingApproval || res[2].Status != registry.StatusOK {
		t.Fatalf("the run of reads: %+v / %+v / %+v", res[0], res[1], res[2])
	}
	for i, r := range res[3:] {
		if r.Code() != registry.CodeCanceled || !strings.HasPrefix(r.Error.Message, `not started: call 2 of the batch (toolCallId "c2") waits for approval`) {
			t.Errorf("call %d after the run: %+v", i+4, r.Error)
		}
	}
	if got := log.String(); got != "c1,c3" && got != "c3,c1" {
		t.Errorf("calls that ran: %s, want c1 and c3", got)
	}
}

// decisions allows every call, and says on its channel which tool it
// decided about.
type decisions chan string

func (d decisions) Decide(_ context.Context, in *registry.PolicyInput) (registry.Decision, error) {
	d <- in.Tool.Name
	return registry.Decision{Effect: registry.Allow, Rule: "allow"}, nil
}

// blocker is a tool of tier that, once started, says so on started and
// returns when its context ends.
func blocker(name string, tier registry.Tier, started chan<- string) *registry.Tool {
	return &registry.Tool{
		Definition: registry.Definition{Name: name, Description: "Blocks.", Tier: tier, Parameters: object, MaxConcurrency: 1},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			started <- r.CallID
			<-ctx.Done()
			return nil, ctx.Err()
		}),
	}
}

// TestBatchSaysWhetherACanceledCallHadStarted: a call of a tool that is
// not read_only, canceled with its batch, says whether its tool had
// started (its change may have happened part-way) or not (nothing was
// executed), and the record of the one that started answers so again.
func TestBatchSaysWhetherACanceledCallHadStarted(t *testing.T) {
	started := make(chan string, 4)
	for _, stored := range []bool{true, false} {
		decided := make(decisions, 8)
		o := registry.Options{Policy: decided, Registry: newRegistry(t, blocker("t__change", registry.SideEffecting, started), blocker("t__read", registry.ReadOnly, started))}
		if stored {
			o.Store = openSQLite(t)
		}
		e := registry.NewExecutor(o)
		// A call from outside holds the tool's only slot, so the batch's
		// second call of it waits.
		outside, stop := context.WithCancel(t.Context())
		go func() {
			_, _ = e.Execute(outside, registry.Anonymous(), &registry.Call{ToolCallID: "out", ToolName: "t__change", Arguments: json.RawMessage(`{}`)})
		}()
		<-decided
		<-started
		calls := batchCalls("t__change", "t__read")
		ctx, cancel := context.WithCancel(t.Context())
		var res []*registry.Result
		done := make(chan struct{})
		go func() {
			defer close(done)
			var err error
			if res, err = e.ExecuteBatch(ctx, registry.Anonymous(), calls, registry.BatchOptions{CapacityWait: time.Minute}); err != nil {
				t.Error(err)
			}
		}()
		<-decided // past policy, nothing stops the call but the slot it waits for
		cancel()
		<-done
		stop()
		first := res[0]
		if first.Code() != registry.CodeCanceled || first.Error.Message != "not started: the call was canceled before tool t__change started; nothing was executed" {
			t.Errorf("a call canceled while it waited for a slot (store %v): %+v", stored, first.Error)
		}

		// The call now gets the slot, starts, and is canceled.
		ctx, cancel = context.WithCancel(t.Context())
		done = make(chan struct{})
		go func() {
			defer close(done)
			var err error
			if res, err = e.ExecuteBatch(ctx, registry.Anonymous(), calls, registry.BatchOptions{}); err != nil {
				t.Error(err)
			}
		}()
		<-decided
		<-started
		cancel()
		<-done
		want := "stopped: the call was canceled while tool t__change ran; " + registry.EffectsUnknownText
		if r := res[0]; r.Code() != registry.CodeCanceled || r.Error.Message != want || !strings.Contains(r.Error.Suggestion, "new toolCallId") {
			t.Errorf("a call canceled while its tool ran (store %v): %+v", stored, r.Error)
		}
		if r := res[1]; r.Code() != registry.CodeCanceled || strings.Contains(r.Error.Message, registry.EffectsUnknownText) {
			t.Errorf("a read_only call after it: %+v", r.Error)
		}
		if !stored {
			continue
		}
		// Its record answers a batch sent again the same way.
		res, err := e.ExecuteBatch(t.Context(), registry.Anonymous(), calls[:1], registry.BatchOptions{})
		if err != nil || res[0].Code() != registry.CodeCanceled || res[0].Error.Message != want {
			t.Errorf("the canceled call sent again: %v %+v", err, res[0].Error)
		}
	}
}

// TestBatchHoldsCallsAfterOneStillRunning: a call answered as still
// running (its toolCallId's first call runs on past the wait timeout) has
// not finished either, and the calls after it do not start.
func TestBatchHoldsCallsAfterOneStillRunning(t *testing.T) {
	var log runLog
	started, gate := make(chan struct{}), make(chan struct{})
	slow := log.tool("t__slow", registry.SideEffecting)
	record := slow.Handler
	slow.Handler = registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
		close(started)
		<-gate
		return record.Run(ctx, r)
	})
	e := registry.NewExecutor(registry.Options{Store: openSQLite(t), WaitTimeout: 50 * time.Millisecond,
		Registry: newRegistry(t, slow, log.tool("t__write", registry.SideEffecting))})
	calls := batchCalls("t__slow", "t__write")
	first := make(chan []*registry.Result, 1)
	go func() {
		res, err := e.ExecuteBatch(t.Context(), registry.Anonymous(), calls, registry.BatchOptions{})
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-started
	res, err := e.ExecuteBatch(t.Context(), registry.Anonymous(), calls, registry.BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Status != registry.StatusRunning || res[1].Code() != registry.CodeCanceled ||
		!strings.HasPrefix(res[1].Error.Message, `not started: call 1 of the batch (toolCallId "c1") is still running`) {
		t.Errorf("the batch sent again while its first call runs: %+v / %+v", res[0], res[1].Error)
	}
	if got := log.String(); got != "" {
		t.Errorf("calls that ran while the first still ran: %s", got)
	}
	close(gate)
	if res := <-first; res[0].Status != registry.StatusOK || res[1].Status != registry.StatusOK {
		t.Errorf("the first batch: %+v / %+v", res[0], res[1])
	}
	if got := log.String(); got != "c1,c2" {
		t.Errorf("calls that ran: %s, want c1,c2", got)
	}
}
