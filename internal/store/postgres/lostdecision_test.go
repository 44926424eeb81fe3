package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// askingExecutor is an executor over st with one tool the default policy
// asks a human about, and how many times each call of it ran.
func askingExecutor(t *testing.T, st registry.Store) (*registry.Executor, *atomic.Int32) {
	t.Helper()
	var runs atomic.Int32
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, &registry.Tool{
		Definition: registry.Definition{Name: "shell__exec", Description: "Runs.", Tier: registry.Privileged, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return runs.Add(1), nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := registry.NewExecutor(registry.Options{Registry: reg, Store: st})
	t.Cleanup(e.Drain) // no decision left to settle runs a call after the test
	return e, &runs
}

// file files call id as the anonymous caller and returns its approval id.
func file(t *testing.T, e *registry.Executor, id string) string {
	t.Helper()
	res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolCallID: id, ToolName: "shell__exec"})
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing %s: %v %+v", id, err, res)
	}
	return res.Approval.ID
}

var oncall = &registry.Caller{ID: "oncall", Scopes: []registry.Scope{registry.ScopeApprove}}

// TestApprovalWhoseAnswerWasLostRuns: an approval whose commit PostgreSQL
// finishes after the approver's deadline (its answer is lost: the
// approver gets 503) has moved the call's record to running under this
// replica. The replica finds out and runs the call, once, while the
// record's lease lasts; the approver's retry gets its result. Before, the
// record was left with nothing to run it or renew its lease, lapsed to
// E_INTERRUPTED ("whether its side effects happened is unknown"), and the
// call never ran.
func TestApprovalWhoseAnswerWasLostRuns(t *testing.T) {
	url := testURL(t)
	schema := storetest.PostgresSchema(t, url)
	s := open(t, postgres.Options{URL: url, Schema: schema, Lease: 3 * time.Second})
	e, runs := askingExecutor(t, store.WithDeadline(s, 5*time.Second))

	ctx := t.Context()
	conn := schemaConn(t, url, schema)
	// The commit of an approval of a "slow…" call takes a second, whether
	// or not the client cancels it (as one whose answer was lost).
	if _, err := conn.Exec(ctx, `CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			BEGIN PERFORM pg_sleep(1); EXCEPTION WHEN query_canceled THEN NULL; END;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON approvals DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
			WHEN (NEW.tool_call_id LIKE 'slow%' AND NEW.status = 'approved') EXECUTE FUNCTION slow_commit()`); err != nil {
		t.Fatal(err)
	}

	// Whether the commit goes through after the approver gave up depends
	// on how the cancellation reaches the database; attempts are made
	// until one does.
	var id, approval string
	for attempt := 1; id == ""; attempt++ {
		if attempt > 5 {
			t.Fatal("in 5 attempts, no approval committed after its approver gave up on it: the case under test did not arise")
		}
		try := fmt.Sprintf("slow-%d", attempt)
		aid := file(t, e, try)
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, _, err := e.Decide(short, oncall, aid, registry.VerdictApprove, "")
		cancel()
		if err == nil {
			t.Fatal("Decide with a 200ms deadline over a 1s commit succeeded")
		}
		time.Sleep(1500 * time.Millisecond) // the commit is done by now, if it is done at all
		var status string
		if err := conn.QueryRow(ctx, `SELECT status FROM approvals WHERE id = $1`, aid).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if status == string(registry.ApprovalApproved) {
			id, approval = try, aid
		}
	}

	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	rec, err := s.WaitCall(wctx, "anonymous", id)
	if err != nil || rec.Result == nil || rec.Result.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("record of the approved call = %+v (result %+v), %v; runs %d: want it run once, ok", rec, rec.Result, err, runs.Load())
	}
	_, res, err := e.Decide(ctx, oncall, approval, registry.VerdictApprove, "")
	if err != nil || res == nil || res.Status != registry.StatusOK || runs.Load() != 1 {
		t.Fatalf("the approver's retry: %v %+v (runs %d); want the call's result", err, res, runs.Load())
	}
}

// pauseAfterDecide is a store whose database stops answering right after
// a decision is recorded (the proxy in front of it pauses).
type pauseAfterDecide struct {
	registry.Store
	proxy *storetest.Proxy
}

func (s *pauseAfterDecide) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	a, won, err := s.Store.DecideApproval(ctx, id, v, by, reason, now)
	s.proxy.Pause()
	return a, won, err
}

func (s *pauseAfterDecide) QueueAudit(ctx context.Context, e *registry.AuditEntry, done func(error)) {
	s.Store.(registry.AuditQueuer).QueueAudit(ctx, e, done)
}

// TestApprovalOfStalledStoreAnswersWithinOneDeadline: when the database
// stops answering once a decision is recorded, the approver is answered
// (ok, its record pending) within about one store deadline: the audit
// entry of the decision waits for the database beside the call, not
// before it. Before, it took two: the entry's deadline, then the result's.
func TestApprovalOfStalledStoreAnswersWithinOneDeadline(t *testing.T) {
	dbURL := testURL(t)
	schema := storetest.PostgresSchema(t, dbURL)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := storetest.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	s := open(t, postgres.Options{URL: u.String(), Schema: schema})
	const deadline = time.Second
	st := &pauseAfterDecide{Store: store.WithDeadline(s, deadline), proxy: proxy}
	e, runs := askingExecutor(t, st)
	id := file(t, e, "stalled-1")

	start := time.Now()
	_, res, err := e.Decide(t.Context(), oncall, id, registry.VerdictApprove, "")
	took := time.Since(start)
	proxy.Resume()
	if err != nil || res == nil || res.Status != registry.StatusOK || !res.RecordPending || runs.Load() != 1 {
		t.Fatalf("approving while the store stalls: %v %+v (runs %d); want ok, its record pending", err, res, runs.Load())
	}
	if took > deadline*3/2 {
		t.Errorf("the approver was answered after %s; want about one store deadline (%s), not one for the audit entry and one more for the result", took.Round(time.Millisecond), deadline)
	}
	t.Logf("answered after %s", took.Round(time.Millisecond))
}
