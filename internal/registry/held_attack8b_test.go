package registry_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestHeldResultIsTheCallsRecord: a call that finished while the store
// was full has its result held in memory, and its record in the store
// still says it runs. The executor's GetCall answers with the held result
// (done, recordPending), its WaitCall ends as soon as the result is held
// rather than at its deadline, and so does a repeat of the call that
// waits for the first: each said "running" until the store took the
// result. Once the store takes it, the store's record answers.
func TestHeldResultIsTheCallsRecord(t *testing.T) {
	started, release := make(chan struct{}, 2), make(chan struct{})
	tool := &registry.Tool{
		Definition: registry.Definition{Name: "fs__append", Description: "Appends.", Tier: registry.SideEffecting, Parameters: object},
		Handler: registry.Func(func(ctx context.Context, _ *registry.Request) (any, error) {
			started <- struct{}{}
			<-release
			return "appended", nil
		}),
	}
	st := &flaky{Store: openSQLite(t)} // FinishCall fails, as on a full disk, while down
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st, WaitTimeout: 20 * time.Second})
	caller := registry.Anonymous()
	call := &registry.Call{ToolCallID: "held-1", ToolName: "fs__append"}
	st.down.Store(true)

	first := make(chan *registry.Result, 1)
	go func() {
		res, err := e.Execute(context.Background(), caller, call)
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-started
	if rec, err := e.GetCall(t.Context(), caller.ID, "held-1"); err != nil || rec.State != registry.CallRunning {
		t.Fatalf("GetCall while the call runs: %v %+v", err, rec)
	}
	type answer struct {
		rec *registry.CallRecord
		res *registry.Result
		err error
		at  time.Duration
	}
	begin := time.Now()
	waited, repeated := make(chan answer, 1), make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		rec, err := e.WaitCall(ctx, caller.ID, "held-1")
		waited <- answer{rec: rec, err: err, at: time.Since(begin)}
	}()
	go func() {
		res, err := e.Execute(context.Background(), caller, call)
		repeated <- answer{res: res, err: err, at: time.Since(begin)}
	}()
	time.Sleep(200 * time.Millisecond) // both wait on the running record
	close(release)

	if res := <-first; !res.RecordPending || res.Status != registry.StatusOK {
		t.Fatalf("the call's own answer: %+v, want ok with its record pending", res)
	}
	w := <-waited
	if w.err != nil || w.rec.State != registry.CallDone || w.rec.Result == nil || w.rec.Result.Status != registry.StatusOK || !w.rec.Result.RecordPending ||
		w.rec.ToolName != "fs__append" || w.at > 5*time.Second {
		t.Errorf("WaitCall: %v %+v after %s; want done, ok, recordPending, at once", w.err, w.rec, w.at)
	}
	r := <-repeated
	if r.err != nil || r.res.Status != registry.StatusOK || !r.res.RecordPending || r.at > 5*time.Second {
		t.Errorf("a repeat that waited for the call: %v %+v after %s; want ok, recordPending, at once", r.err, r.res, r.at)
	}
	if rec, err := st.GetCall(t.Context(), caller.ID, "held-1"); err != nil || rec.State != registry.CallRunning {
		t.Fatalf("the store's record: %v %+v; the test needs it still running", err, rec)
	}
	rec, err := e.GetCall(t.Context(), caller.ID, "held-1")
	if err != nil || rec.State != registry.CallDone || rec.Result.Status != registry.StatusOK || !rec.Result.RecordPending || rec.CreatedAt.IsZero() {
		t.Errorf("GetCall of the held result: %v %+v; want done, ok, recordPending (and the store's record around it)", err, rec)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	rec, err = e.WaitCall(ctx, caller.ID, "held-1")
	cancel()
	if err != nil || rec.State != registry.CallDone || !rec.Result.RecordPending {
		t.Errorf("WaitCall of a result held already: %v %+v", err, rec)
	}

	st.down.Store(false)
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if n := e.FlushRecords(ctx); n != 0 {
		t.Fatalf("FlushRecords = %d", n)
	}
	rec, err = e.GetCall(t.Context(), caller.ID, "held-1")
	if err != nil || rec.State != registry.CallDone || rec.Result.Status != registry.StatusOK || rec.Result.RecordPending {
		t.Errorf("GetCall once the store took the result: %v %+v; want the stored record", err, rec)
	}
	if rec, err := e.GetCall(t.Context(), caller.ID, "no-such"); rec != nil || err == nil {
		t.Errorf("GetCall of no call: %+v %v", rec, err)
	}
}
