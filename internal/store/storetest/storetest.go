// Package storetest is the conformance suite every registry.Store passes:
// each method, the expiry and retention rules, and the races the contract
// settles (concurrent BeginCalls on one key create once; concurrent
// decisions on one approval win once), within one store and, for stores
// that several replicas share, across stores on one database.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// OpenOptions configure one store opened over a shared database.
type OpenOptions struct {
	// Lease is the lease of running calls; 0 means one minute.
	Lease time.Duration
	// MaxPoll is the longest pause between reads of a waited call; 0 means
	// one minute (so wake-ups must come from notifications).
	MaxPoll time.Duration
	// Now is the store's clock; nil is time.Now.
	Now func() time.Time
}

// SharedOpener opens a new store over the database of one test: every store
// it returns sees the same data. The opener closes them at the test's end.
type SharedOpener func(t *testing.T, o OpenOptions) registry.Store

// Run runs the suite for one implementation; open returns a new store
// over a new, empty database each time it is called, and closes it when
// the test ends.
func Run(t *testing.T, open func(t *testing.T) registry.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s registry.Store)
	}{
		{"BeginCall", testBeginCall},
		{"BeginCallRejectsIncompleteRecords", testBeginCallInvalid},
		{"BeginCallRace", testBeginCallRace},
		{"TraceID", testTraceID},
		{"FinishCall", testFinishCall},
		{"FinishCallAudited", testFinishCallAudited},
		{"FinishCallDropsLongArguments", testFinishDropsLongArguments},
		{"DenyAndExpiryDropLongArguments", testDecidedDropLongArguments},
		{"WaitCall", testWaitCall},
		{"WaitCallTimeout", testWaitCallTimeout},
		{"ApprovalApprove", testApprovalApprove},
		{"ApprovalDeny", testApprovalDeny},
		{"DecideApprovalRace", testDecideRace},
		{"WithdrawCall", testWithdrawCall},
		{"RefileApproval", testRefileApproval},
		{"DecideMovesOnlyItsOwnCall", testDecideOwnCall},
		{"AdoptDecisionWhoseAnswerWasLost", testAdoptDecision},
		{"ApprovalExpiry", testApprovalExpiry},
		{"ExpireApprovals", testExpireApprovals},
		{"ListApprovals", testListApprovals},
		{"ListApprovalsLeaveFilingsOut", testListedFilings},
		{"CreateApprovalValidation", testCreateApprovalInvalid},
		{"UnstorableKeysFindNothing", testUnstorableKeys},
		{"AuditOfUnstorableText", testAuditUnstorableText},
		{"Audit", testAudit},
		{"DeleteExpired", testDeleteExpired},
		{"InterruptRunningSparesOwnCalls", testInterruptOwn},
		{"RevokeSession", testRevokeSession},
		{"ConcurrentWrites", RunConcurrentWrites},
		{"Ping", func(t *testing.T, s registry.Store) {
			if err := s.Ping(t.Context()); err != nil {
				t.Fatalf("Ping: %v", err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
	}
}

// RunOrphanedLease checks that a store renews only the calls it still
// runs: a record whose result will never come (ReleaseCall) lapses and is
// interrupted by the very store that began it, while a running call's
// lease is kept alive. s must have been opened with a lease of a few
// hundred milliseconds.
func RunOrphanedLease(t *testing.T, s registry.Store) {
	ctx := t.Context()
	for _, id := range []string{"orphan", "live"} {
		if _, created, err := s.BeginCall(ctx, &registry.CallRecord{CallerID: "c", ToolCallID: id, ToolName: "fs__write",
			ArgumentsDigest: "d", State: registry.CallRunning}); err != nil || !created {
			t.Fatal(created, err)
		}
	}
	s.ReleaseCall("c", "orphan")
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, err := s.WaitCall(wctx, "c", "orphan")
	if err != nil || rec.Result.Code() != registry.CodeInterrupted {
		t.Fatalf("orphaned record: %v %+v", err, rec)
	}
	time.Sleep(time.Second) // several leases: the live call must have been renewed meanwhile
	if n, err := s.InterruptRunning(ctx); err != nil || n != 0 {
		t.Fatalf("InterruptRunning ended %d calls (%v); the live call must be kept", n, err)
	}
	live, err := s.GetCall(ctx, "c", "live")
	if err != nil || live.State != registry.CallRunning {
		t.Fatalf("live call: %v %+v", err, live)
	}
}

// RunRestart checks that state survives a restart and that calls left
// running by a stopped process end as E_INTERRUPTED: one store runs calls
// and closes without finishing them, the next one opens over the same
// database. The opener must allow a new store once the previous one is
// closed.
func RunRestart(t *testing.T, newDB func(t *testing.T) SharedOpener) {
	open := newDB(t)
	ctx := t.Context()
	a := open(t, OpenOptions{})
	// Its arguments are over what a done record keeps: interrupting it
	// drops them, as FinishCall would.
	run := running("alice", "call-run", longArgs(registry.KeptArgumentsBytes+1))
	mustBegin(t, a, run, true)
	pend := pending("alice", "call-pend", "appr-restart", time.Now().Add(time.Hour))
	mustBegin(t, a, pend, true)
	mustCreateApproval(t, a, approvalFor(pend))
	done := running("alice", "call-done", `{"n":1}`)
	mustBegin(t, a, done, true)
	mustFinish(t, a, done, okResult(done, `{"content":"kept"}`), true)
	audit := &registry.AuditEntry{CallerID: "alice", ToolName: "fs__read", Status: registry.StatusOK, ArgumentsDigest: done.ArgumentsDigest}
	if err := a.AppendAudit(ctx, audit); err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeSession(ctx, "signed-out", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	// The next process; its clock is past any lease the first one held, so
	// the outcome does not depend on how a store recognises a dead owner.
	b := open(t, OpenOptions{Now: offsetClock(10 * time.Minute)})
	n, err := b.InterruptRunning(ctx)
	if err != nil || n != 1 {
		t.Fatalf("InterruptRunning after restart = %d, %v; want 1 (the call left running)", n, err)
	}
	rec := mustGet(t, b, run)
	wantDone(t, rec, registry.CodeInterrupted)
	if rec.Result.ToolCallID != run.ToolCallID || rec.Result.ToolName != run.ToolName {
		t.Errorf("interrupted result names %s/%s, want %s/%s", rec.Result.ToolCallID, rec.Result.ToolName, run.ToolCallID, run.ToolName)
	}
	if len(rec.Arguments) != 0 || rec.ArgumentsDigest != run.ArgumentsDigest {
		t.Errorf("interrupted call keeps %d bytes of arguments, digest %s; want none kept (over %d), digest %s",
			len(rec.Arguments), rec.ArgumentsDigest, registry.KeptArgumentsBytes, run.ArgumentsDigest)
	}
	again, created, err := b.BeginCall(ctx, run)
	if err != nil || created || again.State != registry.CallDone || again.Result.Code() != registry.CodeInterrupted {
		t.Fatalf("repeating an interrupted call: created=%v err=%v rec=%+v; want the stored E_INTERRUPTED", created, err, again)
	}
	if rec := mustGet(t, b, done); rec.State != registry.CallDone || string(rec.Result.Output) != `{"content":"kept"}` {
		t.Errorf("done call after restart = %+v, want its result kept", rec)
	}
	if rec := mustGet(t, b, pend); rec.State != registry.CallPendingApproval {
		t.Errorf("pending call after restart is %s, want pending_approval (it was not running)", rec.State)
	}
	if a, err := b.GetApproval(ctx, pend.ApprovalID); err != nil || a.Status != registry.ApprovalPending {
		t.Errorf("approval after restart = %+v, %v; want pending", a, err)
	}
	entries, err := b.ListAudit(ctx, registry.AuditFilter{})
	if err != nil || len(entries) != 1 || entries[0].ID != audit.ID {
		t.Errorf("audit after restart = %v, %v; want the one entry", entries, err)
	}
	if n, err := b.InterruptRunning(ctx); err != nil || n != 0 {
		t.Errorf("second InterruptRunning = %d, %v; want 0", n, err)
	}
	if revoked, err := b.SessionRevoked(ctx, "signed-out"); err != nil || !revoked {
		t.Errorf("a session signed out before the restart: revoked = %v, %v; want true", revoked, err)
	}
}

// RunReplicas checks the races and hand-offs between stores that share one
// database at the same time (PostgreSQL replicas).
func RunReplicas(t *testing.T, newDB func(t *testing.T) SharedOpener) {
	t.Run("BeginCallRaceAcrossStores", func(t *testing.T) {
		open := newDB(t)
		stores := []registry.Store{open(t, OpenOptions{}), open(t, OpenOptions{})}
		for round := range 5 {
			rec := running("alice", fmt.Sprintf("race-%d", round), `{"x":1}`)
			created := raceBegin(t, 20, func(i int) registry.Store { return stores[i%2] }, rec)
			if created != 1 {
				t.Fatalf("round %d: %d BeginCalls created the record, want exactly 1", round, created)
			}
		}
	})
	t.Run("DecideApprovalRaceAcrossStores", func(t *testing.T) {
		open := newDB(t)
		a, b := open(t, OpenOptions{}), open(t, OpenOptions{})
		for round := range 10 {
			pend := pending("alice", fmt.Sprintf("decide-%d", round), fmt.Sprintf("appr-%d", round), time.Now().Add(time.Hour))
			mustBegin(t, a, pend, true)
			mustCreateApproval(t, a, approvalFor(pend))
			winners := raceDecide(t, []registry.Store{a, b}, pend.ApprovalID, []registry.Verdict{registry.VerdictApprove, registry.VerdictApprove})
			if len(winners) != 1 {
				t.Fatalf("round %d: %d decisions won, want exactly 1", round, len(winners))
			}
			w := []registry.Store{a, b}[winners[0]]
			other := []registry.Store{a, b}[1-winners[0]]
			rec := mustGet(t, other, pend)
			if rec.State != registry.CallRunning {
				t.Fatalf("round %d: approved call is %s, want running", round, rec.State)
			}
			if _, stored, err := other.FinishCall(t.Context(), pend.CallerID, pend.ToolCallID, okResult(pend, `"loser"`), nil); err != nil || stored {
				t.Fatalf("round %d: the losing store finished the winner's call (stored=%v, err=%v)", round, stored, err)
			}
			mustFinish(t, w, pend, okResult(pend, `"winner"`), true)
		}
	})
	t.Run("LapsedLeaseIsInterrupted", func(t *testing.T) {
		open := newDB(t)
		a := open(t, OpenOptions{Lease: time.Minute})
		b := open(t, OpenOptions{Lease: time.Minute})
		late := open(t, OpenOptions{Now: offsetClock(10 * time.Minute)})
		ctx := t.Context()
		x := running("alice", "lease-x", `{"a":1}`)
		mustBegin(t, a, x, true)
		if n, err := b.InterruptRunning(ctx); err != nil || n != 0 {
			t.Fatalf("InterruptRunning on a live lease = %d, %v; want 0", n, err)
		}
		if rec := mustGet(t, b, x); rec.State != registry.CallRunning {
			t.Fatalf("call with a live lease is %s, want running", rec.State)
		}
		// A store whose clock is past the lease sees the owner as gone.
		if n, err := late.InterruptRunning(ctx); err != nil || n != 1 {
			t.Fatalf("InterruptRunning past the lease = %d, %v; want 1", n, err)
		}
		wantDone(t, mustGet(t, a, x), registry.CodeInterrupted)
		rec, stored, err := a.FinishCall(ctx, x.CallerID, x.ToolCallID, okResult(x, `"late"`), nil)
		if err != nil || stored || rec.Result.Code() != registry.CodeInterrupted {
			t.Fatalf("finishing an interrupted call: stored=%v err=%v code=%s; want the interruption to stand", stored, err, rec.Result.Code())
		}

		// A waiter that finds a lapsed lease ends the call itself.
		y := running("alice", "lease-y", `{"a":2}`)
		mustBegin(t, a, y, true)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		rec, err = late.WaitCall(wctx, y.CallerID, y.ToolCallID)
		if err != nil {
			t.Fatalf("WaitCall on a lapsed lease: %v", err)
		}
		wantDone(t, rec, registry.CodeInterrupted)
	})
	t.Run("LeaseIsRenewed", func(t *testing.T) {
		open := newDB(t)
		a := open(t, OpenOptions{Lease: 900 * time.Millisecond})
		x := running("alice", "renew", `{}`)
		first := mustBegin(t, a, x, true)
		deadline := time.Now().Add(30 * time.Second)
		for {
			rec := mustGet(t, a, x)
			if rec.State != registry.CallRunning {
				t.Fatalf("call is %s while its store lives, want running", rec.State)
			}
			if rec.ExpiresAt.After(first.ExpiresAt) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease never renewed: still expires at %v", rec.ExpiresAt)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("SessionRevokedAcrossStores", func(t *testing.T) {
		open := newDB(t)
		a, b := open(t, OpenOptions{}), open(t, OpenOptions{})
		ctx := t.Context()
		if revoked, err := b.SessionRevoked(ctx, "sess-x"); err != nil || revoked {
			t.Fatalf("before sign-out: revoked = %v, %v; want false", revoked, err)
		}
		if err := a.RevokeSession(ctx, "sess-x", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		// At once, on the other store: the next request may reach it.
		if revoked, err := b.SessionRevoked(ctx, "sess-x"); err != nil || !revoked {
			t.Fatalf("a session revoked through one store reads revoked = %v, %v on another; want true", revoked, err)
		}
	})
	t.Run("WaitAcrossStores", func(t *testing.T) {
		open := newDB(t)
		a := open(t, OpenOptions{})
		b := open(t, OpenOptions{MaxPoll: time.Minute})
		x := running("alice", "wait-x", `{}`)
		mustBegin(t, a, x, true)
		got := make(chan *registry.CallRecord, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			rec, err := b.WaitCall(ctx, x.CallerID, x.ToolCallID)
			if err != nil {
				t.Errorf("WaitCall: %v", err)
			}
			got <- rec
		}()
		mustFinish(t, a, x, okResult(x, `{"content":"from a"}`), true)
		rec := <-got
		if rec == nil || rec.State != registry.CallDone || string(rec.Result.Output) != `{"content":"from a"}` {
			t.Fatalf("waiter on another store got %+v, want the result stored by the first", rec)
		}
	})
}

func offsetClock(d time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(d) }
}

// digestOf digests the suite's own, constant, arguments.
func digestOf(args string) string {
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		panic("storetest: bad test arguments " + args)
	}
	return registry.ArgumentsDigest(v)
}

func running(caller, id, args string) *registry.CallRecord {
	return &registry.CallRecord{
		CallerID: caller, ToolCallID: id, ToolName: "fs__write",
		ArgumentsDigest: digestOf(args), Arguments: json.RawMessage(args),
		Context: registry.CallContext{InstanceKey: "conv-1", AgentName: "coder", TurnID: "t1"},
		State:   registry.CallRunning,
	}
}

func pending(caller, id, approvalID string, expires time.Time) *registry.CallRecord {
	rec := running(caller, id, `{"command":"make test"}`)
	rec.ToolName = "shell__exec"
	rec.State = registry.CallPendingApproval
	rec.ApprovalID = approvalID
	rec.ExpiresAt = expires
	rec.Result = &registry.Result{ToolCallID: id, ToolName: rec.ToolName, Status: registry.StatusPendingApproval,
		Approval: &registry.ApprovalTicket{ID: approvalID, ExpiresAt: expires.UTC().Truncate(time.Microsecond), ArgumentsDigest: rec.ArgumentsDigest}}
	return rec
}

func approvalFor(rec *registry.CallRecord) *registry.Approval {
	return &registry.Approval{
		ID: rec.ApprovalID, CallerID: rec.CallerID, ToolCallID: rec.ToolCallID, ToolName: rec.ToolName,
		Tier: registry.Privileged, Rule: "ops/shell-needs-approval", Reason: "runs programs",
		ArgumentsDigest: rec.ArgumentsDigest, Arguments: rec.Arguments, Context: rec.Context, ExpiresAt: rec.ExpiresAt,
	}
}

func okResult(rec *registry.CallRecord, output string) *registry.Result {
	return &registry.Result{ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Status: registry.StatusOK,
		Output: json.RawMessage(output), DurationMs: 7}
}

func mustBegin(t *testing.T, s registry.Store, rec *registry.CallRecord, wantCreated bool) *registry.CallRecord {
	t.Helper()
	got, created, err := s.BeginCall(t.Context(), rec)
	if err != nil {
		t.Fatalf("BeginCall(%s/%s): %v", rec.CallerID, rec.ToolCallID, err)
	}
	if created != wantCreated {
		t.Fatalf("BeginCall(%s/%s) created = %v, want %v", rec.CallerID, rec.ToolCallID, created, wantCreated)
	}
	return got
}

func mustFinish(t *testing.T, s registry.Store, rec *registry.CallRecord, res *registry.Result, wantStored bool) *registry.CallRecord {
	t.Helper()
	got, stored, err := s.FinishCall(t.Context(), rec.CallerID, rec.ToolCallID, res, nil)
	if err != nil {
		t.Fatalf("FinishCall(%s/%s): %v", rec.CallerID, rec.ToolCallID, err)
	}
	if stored != wantStored {
		t.Fatalf("FinishCall(%s/%s) stored = %v, want %v", rec.CallerID, rec.ToolCallID, stored, wantStored)
	}
	return got
}

func mustGet(t *testing.T, s registry.Store, rec *registry.CallRecord) *registry.CallRecord {
	t.Helper()
	got, err := s.GetCall(t.Context(), rec.CallerID, rec.ToolCallID)
	if err != nil {
		t.Fatalf("GetCall(%s/%s): %v", rec.CallerID, rec.ToolCallID, err)
	}
	return got
}

func mustCreateApproval(t *testing.T, s registry.Store, a *registry.Approval) {
	t.Helper()
	if err := s.CreateApproval(t.Context(), a); err != nil {
		t.Fatalf("CreateApproval(%s): %v", a.ID, err)
	}
}

func wantDone(t *testing.T, rec *registry.CallRecord, code registry.Code) {
	t.Helper()
	if rec.State != registry.CallDone {
		t.Fatalf("call %s is %s, want done", rec.ToolCallID, rec.State)
	}
	if rec.Result == nil || rec.Result.Code() != code {
		t.Fatalf("call %s result = %+v, want an error %s", rec.ToolCallID, rec.Result, code)
	}
	if rec.Result.Error.Message == "" || rec.Result.Error.Suggestion == "" {
		t.Errorf("call %s error %s has no message or suggestion for the model: %+v", rec.ToolCallID, code, rec.Result.Error)
	}
}

// raceBegin starts n BeginCalls of rec at once, on the stores storeFor
// picks, and returns how many created the record. All must agree on it.
func raceBegin(t *testing.T, n int, storeFor func(i int) registry.Store, rec *registry.CallRecord) int {
	t.Helper()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		created int
		owners  = map[string]int{}
	)
	for i := range n {
		wg.Go(func() {
			<-start
			got, c, err := storeFor(i).BeginCall(context.Background(), rec)
			if err != nil {
				t.Errorf("BeginCall %d: %v", i, err)
				return
			}
			if !got.Matches(rec.ToolName, rec.ArgumentsDigest, rec.Context.InstanceKey) || got.State != registry.CallRunning {
				t.Errorf("BeginCall %d returned %+v, want the running record of the same call", i, got)
			}
			mu.Lock()
			defer mu.Unlock()
			owners[got.Owner]++
			if c {
				created++
			}
		})
	}
	close(start)
	wg.Wait()
	if len(owners) != 1 {
		t.Errorf("concurrent BeginCalls saw %d different owners %v, want one record", len(owners), owners)
	}
	return created
}

// raceDecide runs one decision per store at once and returns the indexes
// of those that won.
func raceDecide(t *testing.T, stores []registry.Store, id string, verdicts []registry.Verdict) []int {
	t.Helper()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		winners []int
	)
	for i := range stores {
		wg.Go(func() {
			<-start
			a, won, err := stores[i].DecideApproval(context.Background(), id, verdicts[i], fmt.Sprintf("approver-%d", i), "", time.Now())
			if err != nil {
				t.Errorf("DecideApproval %d: %v", i, err)
				return
			}
			if a.Status == registry.ApprovalPending {
				t.Errorf("DecideApproval %d returned a pending request", i)
			}
			if won {
				mu.Lock()
				winners = append(winners, i)
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	return winners
}

func testBeginCall(t *testing.T, s registry.Store) {
	ctx := t.Context()
	before := time.Now().Add(-time.Second)
	rec := running("alice", "call-1", `{"path":"notes.txt","content":"hi"}`)
	got := mustBegin(t, s, rec, true)
	if got.State != registry.CallRunning || got.Owner == "" || got.Result != nil {
		t.Fatalf("created record = %+v, want running, owned, no result", got)
	}
	if got.CreatedAt.Before(before) || !got.ExpiresAt.After(got.CreatedAt) {
		t.Errorf("created %v, lease until %v; want now and a lease in the future", got.CreatedAt, got.ExpiresAt)
	}
	stored := mustGet(t, s, rec)
	if stored.ToolName != rec.ToolName || stored.ArgumentsDigest != rec.ArgumentsDigest ||
		string(stored.Arguments) != string(rec.Arguments) || stored.Context != rec.Context ||
		stored.Owner != got.Owner || !stored.CreatedAt.Equal(got.CreatedAt) || !stored.ExpiresAt.Equal(got.ExpiresAt) {
		t.Errorf("GetCall = %+v\nwant the record BeginCall returned %+v", stored, got)
	}

	// The same key again returns the stored record, whatever it asks for.
	other := running("alice", "call-1", `{"path":"other.txt"}`)
	again := mustBegin(t, s, other, false)
	if again.Matches(other.ToolName, other.ArgumentsDigest, other.Context.InstanceKey) {
		t.Error("a repeat with other arguments matches the stored record; want a mismatch (409)")
	}
	if !again.Matches(rec.ToolName, rec.ArgumentsDigest, rec.Context.InstanceKey) {
		t.Error("the stored record does not match its own call")
	}
	// Keys are per caller.
	bob := running("bob", "call-1", `{"path":"other.txt"}`)
	if b := mustBegin(t, s, bob, true); b.CallerID != "bob" {
		t.Errorf("bob's record has caller %q", b.CallerID)
	}
	if _, err := s.GetCall(ctx, "carol", "call-1"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("GetCall of an unknown key: %v, want ErrNotFound", err)
	}
}

// testTraceID checks that a record keeps the trace id it was created with
// through every state, and reads "" when it had none.
func testTraceID(t *testing.T, s registry.Store) {
	ctx := t.Context()
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	run := running("alice", "traced-run", `{"n":1}`)
	run.TraceID = traceID
	if got := mustBegin(t, s, run, true); got.TraceID != traceID {
		t.Errorf("BeginCall returned trace id %q, want %q", got.TraceID, traceID)
	}
	if got := mustGet(t, s, run); got.TraceID != traceID {
		t.Errorf("GetCall of a running call: trace id %q, want %q", got.TraceID, traceID)
	}
	repeat := running("alice", "traced-run", `{"n":1}`)
	repeat.TraceID = "0af7651916cd43dd8448eb211c80319c"
	if got := mustBegin(t, s, repeat, false); got.TraceID != traceID {
		t.Errorf("a repeat read trace id %q, want the first call's %q", got.TraceID, traceID)
	}
	mustFinish(t, s, run, okResult(run, `1`), true)
	if got := mustGet(t, s, run); got.TraceID != traceID {
		t.Errorf("GetCall of a finished call: trace id %q, want %q", got.TraceID, traceID)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if got, err := s.WaitCall(wctx, run.CallerID, run.ToolCallID); err != nil || got.TraceID != traceID {
		t.Errorf("WaitCall of a done call = %+v, %v; want trace id %q", got, err, traceID)
	}

	pend := pending("alice", "traced-pend", "appr-traced", time.Now().Add(time.Hour))
	pend.TraceID = traceID
	mustBegin(t, s, pend, true)
	if got := mustGet(t, s, pend); got.State != registry.CallPendingApproval || got.TraceID != traceID {
		t.Errorf("GetCall of a pending call: %s, trace id %q; want pending_approval, %q", got.State, got.TraceID, traceID)
	}

	plain := running("alice", "untraced", `{}`)
	mustBegin(t, s, plain, true)
	if got := mustGet(t, s, plain); got.TraceID != "" {
		t.Errorf("a call without a trace reads trace id %q, want none", got.TraceID)
	}
}

func testBeginCallInvalid(t *testing.T, s registry.Store) {
	ctx := t.Context()
	bad := []func(r *registry.CallRecord){
		func(r *registry.CallRecord) { r.CallerID = "" },
		func(r *registry.CallRecord) { r.ToolCallID = "" },
		func(r *registry.CallRecord) { r.ArgumentsDigest = "" },
		func(r *registry.CallRecord) { r.State = registry.CallDone },
		func(r *registry.CallRecord) { r.State = registry.CallPendingApproval }, // no approval id, expiry or result
	}
	for i, mutate := range bad {
		rec := running("alice", fmt.Sprintf("bad-%d", i), `{}`)
		mutate(rec)
		if _, _, err := s.BeginCall(ctx, rec); err == nil {
			t.Errorf("case %d: BeginCall(%+v) accepted an incomplete record", i, rec)
		}
	}
}

func testBeginCallRace(t *testing.T, s registry.Store) {
	for round := range 3 {
		rec := running("alice", fmt.Sprintf("race-%d", round), `{"x":1}`)
		if created := raceBegin(t, 20, func(int) registry.Store { return s }, rec); created != 1 {
			t.Fatalf("round %d: %d of 20 concurrent BeginCalls created the record, want exactly 1", round, created)
		}
	}
}

func testFinishCall(t *testing.T, s registry.Store) {
	ctx := t.Context()
	rec := running("alice", "fin", `{"path":"x"}`)
	mustBegin(t, s, rec, true)
	res := &registry.Result{ToolCallID: "fin", ToolName: rec.ToolName, Status: registry.StatusOK,
		Output: json.RawMessage(`{"content":"héllo \u2028","n":[1,2.5,null]}`), Truncated: true, OriginalBytes: 99999, DurationMs: 12}
	if got := mustFinish(t, s, rec, res, true); got != nil {
		t.Errorf("FinishCall that stored returned a record: %+v", got)
	}
	stored := mustGet(t, s, rec)
	if stored.State != registry.CallDone || stored.Owner != "" || !stored.ExpiresAt.IsZero() {
		t.Errorf("finished record = %+v, want done, no owner, no expiry", stored)
	}
	r := stored.Result
	if r == nil || r.Status != registry.StatusOK || !r.Truncated || r.OriginalBytes != 99999 || r.DurationMs != 12 || r.ToolCallID != "fin" {
		t.Fatalf("stored result = %+v, want the one given", r)
	}
	var out, want any
	_ = json.Unmarshal(r.Output, &out)
	_ = json.Unmarshal(res.Output, &want)
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Errorf("stored output %s, want %s", r.Output, res.Output)
	}
	// The first result stands.
	second := &registry.Result{ToolCallID: "fin", ToolName: rec.ToolName, Status: registry.StatusError,
		Error: registry.Errorf(registry.CodeTool, "second")}
	again := mustFinish(t, s, rec, second, false)
	if again.Result.Status != registry.StatusOK {
		t.Errorf("a second FinishCall replaced the result: %+v", again.Result)
	}
	// Error results keep their code and details.
	e := running("alice", "fin-err", `{}`)
	mustBegin(t, s, e, true)
	errRes := &registry.Result{ToolCallID: "fin-err", ToolName: e.ToolName, Status: registry.StatusError, Error: &registry.Error{
		Code: registry.CodeInvalidArguments, Message: "bad", Suggestion: "fix it", Details: []registry.Detail{{Path: "/path", Message: "required"}}}}
	mustFinish(t, s, e, errRes, true)
	if got := mustGet(t, s, e).Result; got.Code() != registry.CodeInvalidArguments || len(got.Error.Details) != 1 || got.Error.Details[0].Path != "/path" {
		t.Errorf("stored error result = %+v", got.Error)
	}
	if _, _, err := s.FinishCall(ctx, "alice", "nope", res, nil); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("FinishCall of an unknown call: %v, want ErrNotFound", err)
	}
	// A repeat of a done call returns it.
	if rep := mustBegin(t, s, rec, false); rep.State != registry.CallDone || rep.Result.Status != registry.StatusOK {
		t.Errorf("repeating a done call returned %+v, want the stored result", rep)
	}
}

// testFinishDropsLongArguments: a done call keeps its arguments up to
// registry.KeptArgumentsBytes; longer ones are kept while it runs and
// dropped when it ends, and its digest still makes a repeat of it a
// repeat, not a conflict.
func testFinishDropsLongArguments(t *testing.T, s registry.Store) {
	argsOf := func(n int) string { // {"content":"xx…"}, n bytes in all
		return `{"content":"` + strings.Repeat("x", n-len(`{"content":""}`)) + `"}`
	}
	for _, c := range []struct {
		id   string
		size int
		kept bool
	}{
		{"at-bound", registry.KeptArgumentsBytes, true},
		{"over-bound", registry.KeptArgumentsBytes + 1, false},
		{"large", 1 << 20, false},
	} {
		rec := running("alice", c.id, argsOf(c.size))
		mustBegin(t, s, rec, true)
		if got := mustGet(t, s, rec); len(got.Arguments) != c.size {
			t.Errorf("%s: a running call keeps %d bytes of arguments, want all %d", c.id, len(got.Arguments), c.size)
		}
		mustFinish(t, s, rec, okResult(rec, `"done"`), true)
		got := mustGet(t, s, rec)
		if kept := len(got.Arguments) == c.size && string(got.Arguments) == string(rec.Arguments); kept != c.kept || (!c.kept && len(got.Arguments) != 0) {
			t.Errorf("%s: a done call of %d bytes of arguments keeps %d bytes; want them kept: %v", c.id, c.size, len(got.Arguments), c.kept)
		}
		if got.ArgumentsDigest != rec.ArgumentsDigest || got.State != registry.CallDone {
			t.Errorf("%s: done record %s with digest %s, want done with %s", c.id, got.State, got.ArgumentsDigest, rec.ArgumentsDigest)
		}
		if rep := mustBegin(t, s, rec, false); rep.State != registry.CallDone || rep.Result.Status != registry.StatusOK {
			t.Errorf("%s: repeating the call returned %+v, want its result", c.id, rep)
		}
	}
}

// longArgs is {"content":"xx…"}, n bytes in all.
func longArgs(n int) string {
	return `{"content":"` + strings.Repeat("x", n-len(`{"content":""}`)) + `"}`
}

// testDecidedDropLongArguments: a call ended by a denial or by its
// request's expiry keeps arguments as FinishCall does: up to
// registry.KeptArgumentsBytes, its digest still making a repeat of it a
// repeat. (RunRestart checks an interrupted call.)
func testDecidedDropLongArguments(t *testing.T, s registry.Store) {
	ctx := t.Context()
	now := time.Now()
	end := map[string]func(rec *registry.CallRecord) registry.Code{
		"deny": func(rec *registry.CallRecord) registry.Code {
			if _, won, err := s.DecideApproval(ctx, rec.ApprovalID, registry.VerdictDeny, "oncall", "no", now); err != nil || !won {
				t.Fatalf("deny %s: won %v, %v", rec.ApprovalID, won, err)
			}
			return registry.CodeApprovalDenied
		},
		"expire": func(rec *registry.CallRecord) registry.Code {
			if n, err := s.ExpireApprovals(ctx, now.Add(2*time.Hour)); err != nil || n != 1 {
				t.Fatalf("ExpireApprovals = %d, %v; want 1", n, err)
			}
			return registry.CodeApprovalExpired
		},
	}
	for how, fn := range end {
		for _, size := range []int{registry.KeptArgumentsBytes, registry.KeptArgumentsBytes + 1} {
			id := fmt.Sprintf("%s-%d", how, size)
			rec := pending("alice", id, "appr-"+id, now.Add(time.Hour))
			rec.Arguments = json.RawMessage(longArgs(size))
			rec.ArgumentsDigest = digestOf(string(rec.Arguments))
			rec.Result.Approval.ArgumentsDigest = rec.ArgumentsDigest
			mustBegin(t, s, rec, true)
			mustCreateApproval(t, s, approvalFor(rec))
			code := fn(rec)
			got := mustGet(t, s, rec)
			wantDone(t, got, code)
			if want := size <= registry.KeptArgumentsBytes; (string(got.Arguments) == string(rec.Arguments)) != want || (!want && len(got.Arguments) != 0) {
				t.Errorf("%s: a call of %d bytes of arguments ended keeping %d bytes; want them kept: %v", id, size, len(got.Arguments), want)
			}
			if rep := mustBegin(t, s, rec, false); rep.State != registry.CallDone || rep.Result.Code() != code {
				t.Errorf("%s: repeating the call returned %+v, want its result", id, rep)
			}
			if a, err := s.GetApproval(ctx, rec.ApprovalID); err != nil || string(a.Arguments) != string(rec.Arguments) {
				t.Errorf("%s: the request keeps %d bytes of arguments (%v), want all %d", id, len(a.Arguments), err, size)
			}
		}
	}
}

// testFinishCallAudited: the audit entry given to FinishCall is written
// with the result, in the same commit, whether or not the result is
// stored, but not again for a repeat of a write that committed, and not
// at all when the write fails.
func testFinishCallAudited(t *testing.T, s registry.Store) {
	ctx := t.Context()
	rec := running("audited", "fa1", `{"path":"x"}`)
	mustBegin(t, s, rec, true)
	entry := func(id string, code registry.Code) *registry.AuditEntry {
		return &registry.AuditEntry{CallerID: "audited", ToolCallID: id, ToolName: rec.ToolName, Tier: registry.SideEffecting,
			Decision: registry.Allow, Rule: "tier-default:side_effecting", Status: registry.StatusOK, Code: code, DurationMs: 7, ArgumentsDigest: rec.ArgumentsDigest}
	}
	first := entry("fa1", "")
	if got, stored, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, okResult(rec, `"one"`), first); err != nil || !stored || got != nil {
		t.Fatalf("FinishCall with an audit entry = %+v, stored %v, %v; want stored, no record", got, stored, err)
	}
	if first.ID == 0 || first.Time.IsZero() || first.Event != "call" {
		t.Fatalf("audit entry after FinishCall: id %d, time %v, event %q; want them assigned", first.ID, first.Time, first.Event)
	}
	// A second result is not stored; its audit entry still is: it records
	// a call that ran.
	second := entry("fa1", registry.CodeTool)
	got, stored, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, okResult(rec, `"two"`), second)
	if err != nil || stored || got == nil || string(got.Result.Output) != `"one"` {
		t.Fatalf("second FinishCall = %+v, stored %v, %v; want the first result back, not stored", got, stored, err)
	}
	if second.ID <= first.ID {
		t.Fatalf("second audit id %d, want after %d", second.ID, first.ID)
	}
	// The first write again (its caller did not learn that it committed):
	// not stored, and no second entry for it.
	again := entry("fa1", "")
	again.Time = first.Time
	if got, stored, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, okResult(rec, `"one"`), again); err != nil || stored || got == nil {
		t.Fatalf("FinishCall repeated = %+v, stored %v, %v; want not stored, the record back", got, stored, err)
	}
	if again.ID != 0 {
		t.Fatalf("a repeated FinishCall wrote audit entry %d", again.ID)
	}
	// No record: nothing is written, the entry included.
	if _, _, err := s.FinishCall(ctx, "audited", "fa-none", okResult(rec, `1`), entry("fa-none", "")); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("FinishCall of an unknown call: %v, want ErrNotFound", err)
	}
	list, err := s.ListAudit(ctx, registry.AuditFilter{CallerID: "audited"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range list {
		ids = append(ids, fmt.Sprintf("%d:%s:%s", e.ID, e.ToolCallID, e.Code))
	}
	want := []string{fmt.Sprintf("%d:fa1:", first.ID), fmt.Sprintf("%d:fa1:%s", second.ID, registry.CodeTool)}
	if fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Fatalf("audit trail = %v, want %v", ids, want)
	}
	if e := list[0]; e.Tier != registry.SideEffecting || e.Rule != "tier-default:side_effecting" || e.DurationMs != 7 || e.ArgumentsDigest != rec.ArgumentsDigest {
		t.Errorf("stored entry = %+v, want the one given", e)
	}
}

func testWaitCall(t *testing.T, s registry.Store) {
	ctx := t.Context()
	rec := running("alice", "wait", `{}`)
	mustBegin(t, s, rec, true)
	const waiters = 5
	got := make(chan *registry.CallRecord, waiters)
	var ready sync.WaitGroup
	for range waiters {
		ready.Add(1)
		go func() {
			ready.Done()
			wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := s.WaitCall(wctx, rec.CallerID, rec.ToolCallID)
			if err != nil {
				t.Errorf("WaitCall: %v", err)
			}
			got <- r
		}()
	}
	ready.Wait()
	mustFinish(t, s, rec, okResult(rec, `"done"`), true)
	for range waiters {
		r := <-got
		if r == nil || r.State != registry.CallDone || string(r.Result.Output) != `"done"` {
			t.Fatalf("waiter got %+v, want the finished record", r)
		}
	}
	// A done call returns at once, an unknown one fails.
	if r, err := s.WaitCall(ctx, rec.CallerID, rec.ToolCallID); err != nil || r.State != registry.CallDone {
		t.Errorf("WaitCall on a done call = %+v, %v", r, err)
	}
	if _, err := s.WaitCall(ctx, "alice", "unknown"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("WaitCall on an unknown call: %v, want ErrNotFound", err)
	}
}

func testWaitCallTimeout(t *testing.T, s registry.Store) {
	rec := running("alice", "wait-timeout", `{}`)
	mustBegin(t, s, rec, true)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	r, err := s.WaitCall(ctx, rec.CallerID, rec.ToolCallID)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitCall past its deadline: err = %v, want context.DeadlineExceeded", err)
	}
	if r == nil || r.State != registry.CallRunning {
		t.Fatalf("WaitCall past its deadline returned %+v, want the running record as last read", r)
	}
}

func testApprovalApprove(t *testing.T, s registry.Store) {
	ctx := t.Context()
	expires := time.Now().Add(15 * time.Minute)
	rec := pending("alice", "ask-1", "appr-1", expires)
	got := mustBegin(t, s, rec, true)
	if got.State != registry.CallPendingApproval || got.Owner != "" || got.Result == nil || got.Result.Approval.ID != "appr-1" {
		t.Fatalf("pending record = %+v", got)
	}
	a := approvalFor(rec)
	mustCreateApproval(t, s, a)
	if err := s.CreateApproval(ctx, approvalFor(rec)); err == nil {
		t.Error("CreateApproval accepted a duplicate id")
	}
	stored, err := s.GetApproval(ctx, "appr-1")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Status != registry.ApprovalPending || stored.CallerID != "alice" || stored.ToolCallID != "ask-1" ||
		stored.ToolName != "shell__exec" || stored.Tier != registry.Privileged || stored.Rule != a.Rule || stored.Reason != a.Reason ||
		stored.ArgumentsDigest != rec.ArgumentsDigest || string(stored.Arguments) != string(rec.Arguments) ||
		stored.Context != rec.Context || !stored.ExpiresAt.Equal(expires.UTC().Truncate(time.Microsecond)) || stored.CreatedAt.IsZero() {
		t.Errorf("stored approval = %+v\nwant the request created %+v", stored, a)
	}
	// The repeat of a pending call returns the pending result.
	if rep := mustBegin(t, s, rec, false); rep.State != registry.CallPendingApproval || rep.Result.Status != registry.StatusPendingApproval {
		t.Errorf("repeat of a pending call = %+v", rep)
	}

	decided, won, err := s.DecideApproval(ctx, "appr-1", registry.VerdictApprove, "oncall", "looks fine", time.Now())
	if err != nil || !won {
		t.Fatalf("DecideApproval = won %v, %v; want won", won, err)
	}
	if decided.Status != registry.ApprovalApproved || decided.DecidedBy != "oncall" || decided.DecisionReason != "looks fine" || decided.DecidedAt.IsZero() {
		t.Errorf("decided approval = %+v", decided)
	}
	call := mustGet(t, s, rec)
	if call.State != registry.CallRunning || call.Owner == "" || call.Result != nil {
		t.Fatalf("approved call = %+v, want running and owned by the deciding store", call)
	}
	_, won, err = s.DecideApproval(ctx, "appr-1", registry.VerdictDeny, "someone", "", time.Now())
	if err != nil || won {
		t.Fatalf("second DecideApproval: won=%v err=%v; want lost", won, err)
	}
	if a, _ := s.GetApproval(ctx, "appr-1"); a.Status != registry.ApprovalApproved || a.DecidedBy != "oncall" {
		t.Errorf("after a losing decision the approval is %+v, want the first decision", a)
	}
	waiter := make(chan *registry.CallRecord, 1)
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := s.WaitCall(wctx, rec.CallerID, rec.ToolCallID)
		if err != nil {
			t.Errorf("WaitCall: %v", err)
		}
		waiter <- r
	}()
	mustFinish(t, s, rec, okResult(rec, `{"exitCode":0}`), true)
	if r := <-waiter; r == nil || r.State != registry.CallDone || string(r.Result.Output) != `{"exitCode":0}` {
		t.Errorf("waiter on the approved call got %+v, want its result", r)
	}
	if _, _, err := s.DecideApproval(ctx, "missing", registry.VerdictApprove, "x", "", time.Now()); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("deciding an unknown approval: %v, want ErrNotFound", err)
	}
	if _, _, err := s.DecideApproval(ctx, "appr-1", registry.Verdict("maybe"), "x", "", time.Now()); err == nil {
		t.Error("DecideApproval accepted an unknown verdict")
	}
}

// testAdoptDecision: a decision whose answer was lost leaves its call
// running under this store and not leased, as ReleaseCall leaves it.
// AdoptDecision adopts that call for the decision that made it, once,
// and for no other decision; nothing while the request is pending or
// once the call has moved on.
func testAdoptDecision(t *testing.T, s registry.Store) {
	ad, ok := s.(registry.DecisionAdopter)
	if !ok {
		t.Skip("the store does not adopt decisions")
	}
	ctx := t.Context()
	rec := pending("alice", "adopt-1", "appr-adopt", time.Now().Add(15*time.Minute))
	mustBegin(t, s, rec, true)
	mustCreateApproval(t, s, approvalFor(rec))
	at := time.Now()
	if a, adopted, err := ad.AdoptDecision(ctx, "appr-adopt", "oncall", at); err != nil || adopted || a == nil || a.Status != registry.ApprovalPending {
		t.Fatalf("AdoptDecision before any decision = %+v, %v, %v; want the pending request, not adopted", a, adopted, err)
	}
	if _, won, err := s.DecideApproval(ctx, "appr-adopt", registry.VerdictApprove, "oncall", "", at); err != nil || !won {
		t.Fatalf("DecideApproval = won %v, %v; want won", won, err)
	}
	s.ReleaseCall(rec.CallerID, rec.ToolCallID) // as if the decision's answer had been lost
	before := mustGet(t, s, rec)
	for _, c := range []struct {
		by string
		at time.Time
	}{{"someone", at}, {"oncall", at.Add(time.Millisecond)}} {
		if _, adopted, err := ad.AdoptDecision(ctx, "appr-adopt", c.by, c.at); err != nil || adopted {
			t.Errorf("AdoptDecision by %s at %s = %v, %v; want not adopted: another decision made it", c.by, c.at, adopted, err)
		}
	}
	a, adopted, err := ad.AdoptDecision(ctx, "appr-adopt", "oncall", at)
	if err != nil || !adopted || a.ID != "appr-adopt" || a.ToolCallID != rec.ToolCallID || a.Status != registry.ApprovalApproved {
		t.Fatalf("AdoptDecision of the lost decision = %+v, %v, %v; want the approved request, adopted", a, adopted, err)
	}
	after := mustGet(t, s, rec)
	if after.State != registry.CallRunning || after.Owner != before.Owner || after.ExpiresAt.Before(before.ExpiresAt) {
		t.Errorf("adopted record = %+v, want running, owned as before (%s), its lease renewed", after, before.Owner)
	}
	if _, adopted, err := ad.AdoptDecision(ctx, "appr-adopt", "oncall", at); err != nil || adopted {
		t.Errorf("second AdoptDecision = %v, %v; want not adopted: the call runs here already", adopted, err)
	}
	mustFinish(t, s, rec, okResult(rec, `{"exitCode":0}`), true)
	if _, adopted, err := ad.AdoptDecision(ctx, "appr-adopt", "oncall", at); err != nil || adopted {
		t.Errorf("AdoptDecision of a finished call = %v, %v; want not adopted", adopted, err)
	}
	if a, adopted, err := ad.AdoptDecision(ctx, "missing", "oncall", at); err != nil || adopted || a != nil {
		t.Errorf("AdoptDecision of an unknown request = %+v, %v, %v; want nothing", a, adopted, err)
	}
}

func testApprovalDeny(t *testing.T, s registry.Store) {
	ctx := t.Context()
	rec := pending("alice", "ask-deny", "appr-deny", time.Now().Add(time.Hour))
	mustBegin(t, s, rec, true)
	mustCreateApproval(t, s, approvalFor(rec))
	a, won, err := s.DecideApproval(ctx, "appr-deny", registry.VerdictDeny, "oncall", "not on prod", time.Now())
	if err != nil || !won || a.Status != registry.ApprovalDenied {
		t.Fatalf("deny = %+v, won %v, %v", a, won, err)
	}
	call := mustGet(t, s, rec)
	wantDone(t, call, registry.CodeApprovalDenied)
	if msg := call.Result.Error.Message; !strings.Contains(msg, "not on prod") || !strings.Contains(msg, "oncall") {
		t.Errorf("denied message %q does not name the approver and the reason", msg)
	}
	// The pending call cannot start running after a denial.
	if _, won, _ := s.DecideApproval(ctx, "appr-deny", registry.VerdictApprove, "other", "", time.Now()); won {
		t.Error("an approve after a deny won")
	}
	if call := mustGet(t, s, rec); call.State != registry.CallDone {
		t.Errorf("denied call is %s after a late approve, want done", call.State)
	}
}

func testDecideRace(t *testing.T, s registry.Store) {
	for round := range 5 {
		rec := pending("alice", fmt.Sprintf("race-ask-%d", round), fmt.Sprintf("race-appr-%d", round), time.Now().Add(time.Hour))
		mustBegin(t, s, rec, true)
		mustCreateApproval(t, s, approvalFor(rec))
		stores := make([]registry.Store, 8)
		verdicts := make([]registry.Verdict, 8)
		for i := range stores {
			stores[i] = s
			verdicts[i] = []registry.Verdict{registry.VerdictApprove, registry.VerdictDeny}[i%2]
		}
		winners := raceDecide(t, stores, rec.ApprovalID, verdicts)
		if len(winners) != 1 {
			t.Fatalf("round %d: %d of 8 concurrent decisions won, want exactly 1", round, len(winners))
		}
		a, _ := s.GetApproval(t.Context(), rec.ApprovalID)
		wantStatus := map[registry.Verdict]registry.ApprovalStatus{registry.VerdictApprove: registry.ApprovalApproved, registry.VerdictDeny: registry.ApprovalDenied}[verdicts[winners[0]]]
		if a.Status != wantStatus || a.DecidedBy != fmt.Sprintf("approver-%d", winners[0]) {
			t.Errorf("round %d: approval is %s by %s, want the winner's %s by approver-%d", round, a.Status, a.DecidedBy, wantStatus, winners[0])
		}
		call := mustGet(t, s, rec)
		if (wantStatus == registry.ApprovalApproved) != (call.State == registry.CallRunning) {
			t.Errorf("round %d: call is %s after %s", round, call.State, wantStatus)
		}
	}
}

// testWithdrawCall: the pending record of a request that was not filed
// goes, and the call can be filed anew; a record whose request exists, or
// that is not pending under the request named, stays.
// testRefileApproval: a request is filed again only while its call's
// record waits for it.
func testRefileApproval(t *testing.T, s registry.Store) {
	r, ok := s.(registry.ApprovalRefiler)
	if !ok {
		t.Skip("this store files no request again")
	}
	ctx := t.Context()
	expires := time.Now().Add(time.Hour)
	rec := pending("alice", "rf-1", "rf-appr-1", expires)
	mustBegin(t, s, rec, true)
	if err := r.RefileApproval(ctx, approvalFor(rec)); err != nil {
		t.Fatalf("filing the request a pending record waits for: %v", err)
	}
	if a, err := s.GetApproval(ctx, "rf-appr-1"); err != nil || a.Status != registry.ApprovalPending {
		t.Fatalf("the request filed again: %+v, %v", a, err)
	}
	other := pending("alice", "rf-2", "rf-appr-2", expires)
	mustBegin(t, s, other, true)
	for _, a := range []*registry.Approval{
		approvalFor(pending("alice", "rf-none", "rf-appr-none", expires)), // no record at all
		approvalFor(pending("alice", "rf-2", "rf-appr-other", expires)),   // a record waiting for another request
	} {
		if err := r.RefileApproval(ctx, a); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("filing %s, which no record waits for: %v, want ErrNotFound", a.ID, err)
		}
		if _, err := s.GetApproval(ctx, a.ID); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("request %s was filed: %v", a.ID, err)
		}
	}
}

func testWithdrawCall(t *testing.T, s registry.Store) {
	ctx := t.Context()
	expires := time.Now().Add(time.Hour)
	unfiled := pending("alice", "wd-1", "wd-appr-1", expires)
	mustBegin(t, s, unfiled, true)
	if ok, err := s.WithdrawCall(ctx, "alice", "wd-1", "wd-appr-other"); err != nil || ok {
		t.Fatalf("WithdrawCall under another request = %v, %v; want false", ok, err)
	}
	if ok, err := s.WithdrawCall(ctx, "alice", "wd-1", "wd-appr-1"); err != nil || !ok {
		t.Fatalf("WithdrawCall = %v, %v; want true", ok, err)
	}
	if _, err := s.GetCall(ctx, "alice", "wd-1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetCall after WithdrawCall: %v, want ErrNotFound", err)
	}
	if ok, err := s.WithdrawCall(ctx, "alice", "wd-1", "wd-appr-1"); err != nil || ok {
		t.Fatalf("second WithdrawCall = %v, %v; want false", ok, err)
	}
	mustBegin(t, s, pending("alice", "wd-1", "wd-appr-2", expires), true)

	filed := pending("alice", "wd-filed", "wd-appr-filed", expires)
	mustBegin(t, s, filed, true)
	mustCreateApproval(t, s, approvalFor(filed))
	if ok, err := s.WithdrawCall(ctx, "alice", "wd-filed", "wd-appr-filed"); err != nil || ok {
		t.Fatalf("WithdrawCall of a filed request = %v, %v; want false", ok, err)
	}
	if got := mustGet(t, s, filed); got.State != registry.CallPendingApproval {
		t.Fatalf("record of a filed request after WithdrawCall = %+v, want pending", got)
	}

	run := running("alice", "wd-running", `{}`)
	mustBegin(t, s, run, true)
	if ok, err := s.WithdrawCall(ctx, "alice", "wd-running", ""); err != nil || ok {
		t.Fatalf("WithdrawCall of a running record = %v, %v; want false", ok, err)
	}
	mustGet(t, s, run)
}

// testDecideOwnCall: a request moves only the record filed under it. One
// whose record was withdrawn and filed again under another request is
// expired when decided, and neither runs nor ends the call; the other
// request still decides it.
func testDecideOwnCall(t *testing.T, s registry.Store) {
	ctx := t.Context()
	expires := time.Now().Add(time.Hour)
	for _, v := range []registry.Verdict{registry.VerdictApprove, registry.VerdictDeny} {
		id := "own-" + string(v)
		stale := approvalFor(pending("alice", id, id+"-stale", expires))
		mustCreateApproval(t, s, stale)
		rec := pending("alice", id, id+"-live", expires)
		mustBegin(t, s, rec, true)
		mustCreateApproval(t, s, approvalFor(rec))
		a, won, err := s.DecideApproval(ctx, stale.ID, v, "oncall", "", time.Now())
		if err != nil || won || a.Status != registry.ApprovalExpired {
			t.Fatalf("%s of a request no call waits for = %+v, won %v, %v; want expired, not won", v, a, won, err)
		}
		if got := mustGet(t, s, rec); got.State != registry.CallPendingApproval || got.ApprovalID != rec.ApprovalID {
			t.Fatalf("after a %s of another request the call is %+v, want pending under its own", v, got)
		}
		if _, won, err := s.DecideApproval(ctx, rec.ApprovalID, v, "oncall", "", time.Now()); err != nil || !won {
			t.Fatalf("%s of the call's own request: won %v, %v", v, won, err)
		}
		want := map[registry.Verdict]registry.CallState{registry.VerdictApprove: registry.CallRunning, registry.VerdictDeny: registry.CallDone}[v]
		if got := mustGet(t, s, rec); got.State != want {
			t.Fatalf("after a %s of its own request the call is %s, want %s", v, got.State, want)
		}
	}
}

func testApprovalExpiry(t *testing.T, s registry.Store) {
	ctx := t.Context()
	// Expired a second ago: it reads as expired before anything writes it.
	rec := pending("alice", "ask-old", "appr-old", time.Now().Add(-time.Second))
	mustBegin(t, s, rec, true)
	mustCreateApproval(t, s, approvalFor(rec))
	a, err := s.GetApproval(ctx, "appr-old")
	if err != nil || a.Status != registry.ApprovalExpired {
		t.Fatalf("GetApproval past expiry = %+v, %v; want expired", a, err)
	}
	wantDone(t, mustGet(t, s, rec), registry.CodeApprovalExpired)
	if rep := mustBegin(t, s, rec, false); rep.Result.Code() != registry.CodeApprovalExpired {
		t.Errorf("repeating an expired call returned %+v, want E_APPROVAL_EXPIRED", rep.Result)
	}
	if pending, _ := s.ListApprovals(ctx, registry.ApprovalFilter{Status: registry.ApprovalPending}); len(pending) != 0 {
		t.Errorf("ListApprovals(pending) includes an expired request: %+v", pending[0])
	}
	// Deciding it loses, and writes the expiry down.
	a, won, err := s.DecideApproval(ctx, "appr-old", registry.VerdictApprove, "late", "", time.Now())
	if err != nil || won || a.Status != registry.ApprovalExpired {
		t.Fatalf("deciding an expired request = %+v, won %v, %v; want expired and lost", a, won, err)
	}
	expired, _ := s.ListApprovals(ctx, registry.ApprovalFilter{Status: registry.ApprovalExpired})
	if len(expired) != 1 || expired[0].ID != "appr-old" {
		t.Errorf("ListApprovals(expired) = %v, want appr-old", ids(expired))
	}
	if n, err := s.ExpireApprovals(ctx, time.Now()); err != nil || n != 0 {
		t.Errorf("ExpireApprovals after the decision expired it = %d, %v; want 0", n, err)
	}

	// A waiter on a pending call learns of its expiry without anyone
	// writing it down.
	soon := pending("alice", "ask-soon", "appr-soon", time.Now().Add(300*time.Millisecond))
	mustBegin(t, s, soon, true)
	mustCreateApproval(t, s, approvalFor(soon))
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := s.WaitCall(wctx, soon.CallerID, soon.ToolCallID)
	if err != nil {
		t.Fatalf("WaitCall on a pending call that expires: %v", err)
	}
	wantDone(t, r, registry.CodeApprovalExpired)
}

func testExpireApprovals(t *testing.T, s registry.Store) {
	ctx := t.Context()
	now := time.Now()
	soon := pending("alice", "ask-soon", "appr-soon", now.Add(10*time.Minute))
	later := pending("alice", "ask-later", "appr-later", now.Add(time.Hour))
	for _, r := range []*registry.CallRecord{soon, later} {
		mustBegin(t, s, r, true)
		mustCreateApproval(t, s, approvalFor(r))
	}
	waiter := make(chan *registry.CallRecord, 1)
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := s.WaitCall(wctx, soon.CallerID, soon.ToolCallID)
		if err != nil {
			t.Errorf("WaitCall: %v", err)
		}
		waiter <- r
	}()
	n, err := s.ExpireApprovals(ctx, now.Add(20*time.Minute))
	if err != nil || n != 1 {
		t.Fatalf("ExpireApprovals = %d, %v; want 1", n, err)
	}
	expired, _ := s.ListApprovals(ctx, registry.ApprovalFilter{Status: registry.ApprovalExpired})
	if len(expired) != 1 || expired[0].ID != "appr-soon" || expired[0].DecidedAt.IsZero() {
		t.Errorf("expired requests = %+v, want appr-soon with its time", expired)
	}
	if a, _ := s.GetApproval(ctx, "appr-later"); a.Status != registry.ApprovalPending {
		t.Errorf("appr-later is %s, want pending", a.Status)
	}
	wantDone(t, mustGet(t, s, soon), registry.CodeApprovalExpired)
	if r := <-waiter; r == nil || r.Result.Code() != registry.CodeApprovalExpired {
		t.Errorf("waiter on the expired call got %+v", r)
	}
	if mustGet(t, s, later).State != registry.CallPendingApproval {
		t.Error("the later call is no longer pending")
	}
	if _, won, _ := s.DecideApproval(ctx, "appr-soon", registry.VerdictApprove, "x", "", now); won {
		t.Error("approving an expired request won")
	}
}

func testListApprovals(t *testing.T, s registry.Store) {
	ctx := t.Context()
	exp := time.Now().Add(time.Hour)
	mk := func(caller, id string) *registry.CallRecord {
		r := pending(caller, "c-"+id, id, exp)
		mustBegin(t, s, r, true)
		mustCreateApproval(t, s, approvalFor(r))
		return r
	}
	mk("alice", "a1")
	mk("bob", "b1")
	mk("alice", "a2")
	mk("alice", "a3")
	if _, won, err := s.DecideApproval(ctx, "a2", registry.VerdictDeny, "x", "", time.Now()); !won || err != nil {
		t.Fatal(err)
	}
	cursor := func(id string) *registry.ApprovalCursor {
		a, err := s.GetApproval(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Cursor()
	}
	for _, tc := range []struct {
		f    registry.ApprovalFilter
		want []string
	}{
		{registry.ApprovalFilter{}, []string{"a1", "b1", "a2", "a3"}},
		{registry.ApprovalFilter{Status: registry.ApprovalPending}, []string{"a1", "b1", "a3"}},
		{registry.ApprovalFilter{Status: registry.ApprovalPending, CallerID: "alice"}, []string{"a1", "a3"}},
		{registry.ApprovalFilter{CallerID: "bob"}, []string{"b1"}},
		{registry.ApprovalFilter{Status: registry.ApprovalDenied}, []string{"a2"}},
		{registry.ApprovalFilter{Status: registry.ApprovalApproved}, []string{}},
		{registry.ApprovalFilter{Limit: 2}, []string{"a1", "b1"}},
		{registry.ApprovalFilter{Newest: true}, []string{"a3", "a2", "b1", "a1"}},
		// pages: each goes on after the last request of the one before
		{registry.ApprovalFilter{Limit: 2, After: cursor("b1")}, []string{"a2", "a3"}},
		{registry.ApprovalFilter{After: cursor("a3")}, []string{}},
		{registry.ApprovalFilter{Newest: true, After: cursor("a2")}, []string{"b1", "a1"}},
		{registry.ApprovalFilter{Status: registry.ApprovalPending, CallerID: "alice", After: cursor("a1")}, []string{"a3"}},
		{registry.ApprovalFilter{ExpiresAfter: exp.Add(-time.Minute)}, []string{"a1", "b1", "a2", "a3"}},
		{registry.ApprovalFilter{ExpiresAfter: exp.Add(time.Minute)}, []string{}},
	} {
		got, err := s.ListApprovals(ctx, tc.f)
		if err != nil {
			t.Fatalf("ListApprovals(%+v): %v", tc.f, err)
		}
		if fmt.Sprint(ids(got)) != fmt.Sprint(tc.want) {
			t.Errorf("ListApprovals(%+v) = %v, want %v", tc.f, ids(got), tc.want)
		}
	}
	for _, tc := range []struct {
		f    registry.ApprovalFilter
		want int
	}{
		{registry.ApprovalFilter{}, 4},
		{registry.ApprovalFilter{Status: registry.ApprovalPending}, 3},
		{registry.ApprovalFilter{Status: registry.ApprovalPending, CallerID: "alice"}, 2},
		{registry.ApprovalFilter{Status: registry.ApprovalDenied}, 1},
		{registry.ApprovalFilter{Status: registry.ApprovalExpired}, 0},
		{registry.ApprovalFilter{CallerID: "nobody"}, 0},
		{registry.ApprovalFilter{CallerID: "bad\x00id"}, 0},
	} {
		if n, err := s.CountApprovals(ctx, tc.f); err != nil || n != tc.want {
			t.Errorf("CountApprovals(%+v) = %d, %v; want %d", tc.f, n, err, tc.want)
		}
	}
	if _, err := s.GetApproval(ctx, "zzz"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("GetApproval of an unknown id: %v, want ErrNotFound", err)
	}
	// A list leaves out arguments longer than ListedArgumentsBytes, giving
	// their length; GetApproval has them whole.
	for id, size := range map[string]int{"fits": registry.ListedArgumentsBytes, "large": registry.ListedArgumentsBytes + 1} {
		r := running("carol", "c-"+id, `{"command":"`+strings.Repeat("x", size-len(`{"command":""}`))+`"}`)
		r.ToolName, r.State, r.ApprovalID, r.ExpiresAt = "shell__exec", registry.CallPendingApproval, id, exp
		r.Result = &registry.Result{ToolCallID: r.ToolCallID, ToolName: r.ToolName, Status: registry.StatusPendingApproval,
			Approval: &registry.ApprovalTicket{ID: id, ExpiresAt: exp.UTC().Truncate(time.Microsecond), ArgumentsDigest: r.ArgumentsDigest}}
		mustBegin(t, s, r, true)
		mustCreateApproval(t, s, approvalFor(r))
		listed, err := s.ListApprovals(ctx, registry.ApprovalFilter{CallerID: "carol"})
		if err != nil {
			t.Fatal(err)
		}
		var got *registry.Approval
		for _, a := range listed {
			if a.ID == id {
				got = a
			}
		}
		if want := size <= registry.ListedArgumentsBytes; got == nil || got.ArgumentsBytes != size || (len(got.Arguments) == size) != want || (!want && got.Arguments != nil) {
			if got == nil {
				t.Fatalf("%s: not listed", id)
			}
			t.Errorf("%s: listed with %d bytes of arguments, %d said; want %d said, given: %v", id, len(got.Arguments), got.ArgumentsBytes, size, want)
		}
		if a, err := s.GetApproval(ctx, id); err != nil || string(a.Arguments) != string(r.Arguments) || a.ArgumentsBytes != size {
			t.Errorf("%s: GetApproval gave %d bytes (%d said, %v), want all %d", id, len(a.Arguments), a.ArgumentsBytes, err, size)
		}
	}
}

// testListedFilings: a list leaves out what each request was filed with
// (a token caller's claims may be hundreds of KiB, read for every request
// listed); GetApproval and a decision, which resume the call, have it.
func testListedFilings(t *testing.T, s registry.Store) {
	ctx := t.Context()
	groups := make([]any, 2000)
	for i := range groups {
		groups[i] = fmt.Sprintf("group-%04d", i)
	}
	filing := func() *registry.Filing {
		return &registry.Filing{Caller: registry.Caller{ID: "dana", Issuer: "https://idp.example", Subject: "d"},
			CallerMayApprove: true, TimeoutMs: 5000, Claims: map[string]any{"team": "ops", "groups": groups}}
	}
	exp := time.Now().Add(time.Hour)
	for _, id := range []string{"f1", "f2"} {
		r := pending("dana", "c-"+id, id, exp)
		mustBegin(t, s, r, true)
		a := approvalFor(r)
		a.Filed = filing()
		mustCreateApproval(t, s, a)
	}
	for _, f := range []registry.ApprovalFilter{{}, {Status: registry.ApprovalPending}, {CallerID: "dana", Newest: true}, {Limit: 1}} {
		list, err := s.ListApprovals(ctx, f)
		if err != nil || len(list) == 0 {
			t.Fatalf("ListApprovals(%+v) = %d requests, %v", f, len(list), err)
		}
		for _, a := range list {
			if a.Filed != nil {
				t.Errorf("ListApprovals(%+v) read %s's filing, claims and all; a list leaves it out", f, a.ID)
			}
		}
	}
	want := filing()
	wantJSON, _ := json.Marshal(want)
	a, err := s.GetApproval(ctx, "f1")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := json.Marshal(a.Filed); string(got) != string(wantJSON) || !a.CallerMayApprove() {
		t.Errorf("GetApproval's filing = %.200s…, want %.200s…", got, wantJSON)
	}
	a, won, err := s.DecideApproval(ctx, "f2", registry.VerdictApprove, "oncall", "", time.Now())
	if err != nil || !won {
		t.Fatalf("DecideApproval: won %v, %v", won, err)
	}
	if got, _ := json.Marshal(a.Filed); string(got) != string(wantJSON) {
		t.Errorf("the decided request's filing = %.200s…, want %.200s… (an approved call runs with it)", got, wantJSON)
	}
}

// testUnstorableKeys: a key or filter no text column can hold (a NUL,
// invalid UTF-8: PostgreSQL refuses either, failing the statement as if
// the store were down) names nothing, in every lookup that takes one
// from a caller (ids in paths, console filters).
func testUnstorableKeys(t *testing.T, s registry.Store) {
	ctx := t.Context()
	for _, k := range []string{"a\x00b", "a\xffb"} {
		if _, err := s.GetCall(ctx, "alice", k); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("GetCall(alice, %q): %v, want ErrNotFound", k, err)
		}
		if _, err := s.GetCall(ctx, k, "c1"); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("GetCall(%q, c1): %v, want ErrNotFound", k, err)
		}
		if _, err := s.GetApproval(ctx, k); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("GetApproval(%q): %v, want ErrNotFound", k, err)
		}
		if _, won, err := s.DecideApproval(ctx, k, registry.VerdictDeny, "oncall", "", time.Now()); won || !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("DecideApproval(%q): won %v, %v; want ErrNotFound", k, won, err)
		}
		if list, err := s.ListApprovals(ctx, registry.ApprovalFilter{CallerID: k}); err != nil || len(list) != 0 {
			t.Errorf("ListApprovals of caller %q: %d, %v; want none", k, len(list), err)
		}
		for _, f := range []registry.AuditFilter{{CallerID: k}, {ToolName: k}} {
			if list, err := s.ListAudit(ctx, f); err != nil || len(list) != 0 {
				t.Errorf("ListAudit(caller %q, tool %q): %d, %v; want none", f.CallerID, f.ToolName, len(list), err)
			}
		}
		if sp, ok := s.(registry.SpillStore); ok {
			if _, _, err := sp.ReadSpill(ctx, "alice", k, registry.SpillStreamOutput, 0, 10); !errors.Is(err, registry.ErrNotFound) {
				t.Errorf("ReadSpill(alice, %q): %v, want ErrNotFound", k, err)
			}
			if list, err := sp.ListSpills(ctx, "alice", k); err != nil || len(list) != 0 {
				t.Errorf("ListSpills(alice, %q): %d, %v; want none", k, len(list), err)
			}
		}
	}
}

// testAuditUnstorableText: an audit entry holding text PostgreSQL cannot
// store (a token's subject with a NUL, an issuer with invalid UTF-8) is
// recorded with U+FFFD in its place, alone or with the call's result: it
// failed the result with it before, at every retry.
func testAuditUnstorableText(t *testing.T, s registry.Store) {
	ctx := t.Context()
	rec := running("alice", "odd-subject", `{"path":"a.txt"}`)
	mustBegin(t, s, rec, true)
	audit := &registry.AuditEntry{CallerID: "alice", ToolCallID: rec.ToolCallID, ToolName: rec.ToolName, Status: registry.StatusOK,
		ArgumentsDigest: rec.ArgumentsDigest, Issuer: "https://idp\xff", Subject: "a\x00b"}
	if _, stored, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, okResult(rec, `"done"`), audit); err != nil || !stored {
		t.Fatalf("FinishCall with an audit entry of subject %q: stored %v, %v", "a\x00b", stored, err)
	}
	if err := s.AppendAudit(ctx, &registry.AuditEntry{CallerID: "alice", Event: "approval", ToolName: "fs__write", Subject: "c\x00d"}); err != nil {
		t.Fatalf("AppendAudit with a subject %q: %v", "c\x00d", err)
	}
	list, err := s.ListAudit(ctx, registry.AuditFilter{CallerID: "alice"})
	if err != nil || len(list) != 2 {
		t.Fatalf("ListAudit = %d entries, %v; want 2", len(list), err)
	}
	if list[0].Subject != "a\uFFFDb" || list[0].Issuer != "https://idp\uFFFD" || list[1].Subject != "c\uFFFDd" {
		t.Errorf("stored subjects %q, %q and issuer %q; want the NUL and invalid byte as U+FFFD", list[0].Subject, list[1].Subject, list[0].Issuer)
	}
}

func testCreateApprovalInvalid(t *testing.T, s registry.Store) {
	for i, a := range []*registry.Approval{
		{CallerID: "a", ToolCallID: "b", ToolName: "t", ExpiresAt: time.Now()},
		{ID: "x", ToolCallID: "b", ToolName: "t", ExpiresAt: time.Now()},
		{ID: "x", CallerID: "a", ToolCallID: "b", ToolName: "t"},
		{ID: "x", CallerID: "a", ToolCallID: "b", ToolName: "t", ExpiresAt: time.Now(), Status: registry.ApprovalApproved},
	} {
		if err := s.CreateApproval(t.Context(), a); err == nil {
			t.Errorf("case %d: CreateApproval accepted %+v", i, a)
		}
	}
}

func testAudit(t *testing.T, s registry.Store) {
	ctx := t.Context()
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	entries := []*registry.AuditEntry{
		{Time: base, CallerID: "alice", ToolCallID: "c1", ToolName: "fs__read", Tier: registry.ReadOnly, Decision: registry.Allow,
			Rule: "tier-default:read_only", Status: registry.StatusOK, DurationMs: 3, ArgumentsDigest: "d1"},
		{Time: base.Add(time.Minute), CallerID: "bob", ToolCallID: "c2", ToolName: "shell__exec", Tier: registry.Privileged, Decision: registry.Deny,
			Rule: "ops/no-rm", Status: registry.StatusError, Code: registry.CodePolicyDenied, ArgumentsDigest: "d2",
			Issuer: "https://idp.example.com/realms/ops", Subject: "5f0c7a9e-bob"},
		{Time: base.Add(2 * time.Minute), CallerID: "alice", ToolCallID: "c3", ToolName: "shell__exec", Status: registry.StatusOK},
		{CallerID: "oncall", Event: "approval", ToolName: "shell__exec", Decision: registry.Allow,
			Issuer: "https://idp.example.com/realms/ops", Subject: "oncall-7"},
	}
	for _, e := range entries {
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < len(entries); i++ {
		if entries[i].ID <= entries[i-1].ID {
			t.Fatalf("audit ids %d, %d do not increase", entries[i-1].ID, entries[i].ID)
		}
	}
	if entries[3].Time.IsZero() || entries[0].Event != "call" {
		t.Errorf("defaults not applied: time %v, event %q", entries[3].Time, entries[0].Event)
	}
	all, err := s.ListAudit(ctx, registry.AuditFilter{})
	if err != nil || len(all) != 4 {
		t.Fatalf("ListAudit = %d entries, %v", len(all), err)
	}
	got, want := *all[1], *entries[1]
	if got.Time.Equal(want.Time) {
		got.Time = want.Time
	}
	if got != want {
		t.Errorf("stored entry = %+v\nwant %+v", got, want)
	}
	if a := all[3]; a.Issuer != entries[3].Issuer || a.Subject != entries[3].Subject {
		t.Errorf("stored approval entry names %q/%q, want %q/%q", a.Issuer, a.Subject, entries[3].Issuer, entries[3].Subject)
	}
	if a := all[0]; a.Issuer != "" || a.Subject != "" {
		t.Errorf("entry of a static caller names %q/%q, want neither", a.Issuer, a.Subject)
	}
	for _, tc := range []struct {
		f    registry.AuditFilter
		want []int
	}{
		{registry.AuditFilter{CallerID: "alice"}, []int{0, 2}},
		{registry.AuditFilter{ToolName: "shell__exec"}, []int{1, 2, 3}},
		{registry.AuditFilter{Since: base.Add(time.Minute)}, []int{1, 2, 3}},
		{registry.AuditFilter{AfterID: entries[1].ID}, []int{2, 3}},
		{registry.AuditFilter{Limit: 1}, []int{0}},
		{registry.AuditFilter{Newest: true}, []int{3, 2, 1, 0}},
		{registry.AuditFilter{Newest: true, Limit: 2}, []int{3, 2}},
		{registry.AuditFilter{Newest: true, AfterID: entries[2].ID}, []int{1, 0}},
		{registry.AuditFilter{Newest: true, CallerID: "alice", Since: base.Add(time.Minute)}, []int{2}},
	} {
		got, err := s.ListAudit(ctx, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs, wantIDs []int64
		for _, e := range got {
			gotIDs = append(gotIDs, e.ID)
		}
		for _, i := range tc.want {
			wantIDs = append(wantIDs, entries[i].ID)
		}
		if fmt.Sprint(gotIDs) != fmt.Sprint(wantIDs) {
			t.Errorf("ListAudit(%+v) = %v, want %v", tc.f, gotIDs, wantIDs)
		}
	}
}

func testDeleteExpired(t *testing.T, s registry.Store) {
	ctx := t.Context()
	now := time.Now()
	done := running("alice", "old-done", `{}`)
	mustBegin(t, s, done, true)
	mustFinish(t, s, done, okResult(done, `1`), true)
	run := running("alice", "still-running", `{}`)
	mustBegin(t, s, run, true)
	stale := pending("alice", "stale-pending", "appr-stale", now.Add(30*time.Minute))
	mustBegin(t, s, stale, true)
	mustCreateApproval(t, s, approvalFor(stale))
	live := pending("alice", "live-pending", "appr-live", now.Add(5*time.Hour))
	mustBegin(t, s, live, true)
	mustCreateApproval(t, s, approvalFor(live))
	if err := s.AppendAudit(ctx, &registry.AuditEntry{Time: now.Add(-2 * time.Hour), CallerID: "alice", ToolName: "fs__read"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, &registry.AuditEntry{Time: now.Add(2 * time.Hour), CallerID: "alice", ToolName: "fs__read"}); err != nil {
		t.Fatal(err)
	}

	n, err := s.DeleteExpired(ctx, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// old-done, stale-pending and its request, one audit entry.
	if n != 4 {
		t.Errorf("DeleteExpired deleted %d rows, want 4", n)
	}
	for _, r := range []*registry.CallRecord{done, stale} {
		if _, err := s.GetCall(ctx, r.CallerID, r.ToolCallID); !errors.Is(err, registry.ErrNotFound) {
			t.Errorf("%s survived retention: %v", r.ToolCallID, err)
		}
	}
	if _, err := s.GetApproval(ctx, "appr-stale"); !errors.Is(err, registry.ErrNotFound) {
		t.Errorf("appr-stale survived retention: %v", err)
	}
	if mustGet(t, s, run).State != registry.CallRunning || mustGet(t, s, live).State != registry.CallPendingApproval {
		t.Error("retention touched a running or live pending call")
	}
	if a, err := s.GetApproval(ctx, "appr-live"); err != nil || a.Status != registry.ApprovalPending {
		t.Errorf("appr-live = %+v, %v", a, err)
	}
	if left, _ := s.ListAudit(ctx, registry.AuditFilter{}); len(left) != 1 {
		t.Errorf("%d audit entries left, want 1", len(left))
	}
	// A deleted key can be used again.
	mustBegin(t, s, done, true)
}

// testRevokeSession: a revoked session reads revoked until retention
// passes the later of its untils; nothing else does.
func testRevokeSession(t *testing.T, s registry.Store) {
	ctx := t.Context()
	now := time.Now()
	revoked := func(id string) bool {
		t.Helper()
		ok, err := s.SessionRevoked(ctx, id)
		if err != nil {
			t.Fatalf("SessionRevoked(%q): %v", id, err)
		}
		return ok
	}
	if revoked("sess-a") {
		t.Fatal("a session nobody revoked reads revoked")
	}
	if err := s.RevokeSession(ctx, "sess-a", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !revoked("sess-a") {
		t.Fatal("a revoked session does not read revoked")
	}
	if revoked("sess-b") || revoked("sess-") || revoked("SESS-A") {
		t.Error("revoking one session revoked another")
	}
	// Revoked again with an earlier until: the later one stands.
	if err := s.RevokeSession(ctx, "sess-a", now.Add(-3*time.Hour)); err != nil {
		t.Fatalf("revoking a session again: %v", err)
	}
	if err := s.RevokeSession(ctx, "sess-old", now.Add(-2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	n, err := s.DeleteExpired(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || revoked("sess-old") {
		t.Errorf("DeleteExpired deleted %d rows, sess-old revoked = %v; want 1 row, the revocation past its until gone", n, revoked("sess-old"))
	}
	if !revoked("sess-a") {
		t.Error("retention forgot a revocation whose later until is still ahead")
	}
	if err := s.RevokeSession(ctx, "", now.Add(time.Hour)); err == nil {
		t.Error("RevokeSession accepted an empty id")
	}
	if err := s.RevokeSession(ctx, "sess-c", time.Time{}); err == nil {
		t.Error("RevokeSession accepted a revocation without an until")
	}
	if ok, err := s.SessionRevoked(ctx, "sess\x00a"); err != nil || ok {
		t.Errorf("SessionRevoked of an id with NUL = %v, %v; want false, nil", ok, err)
	}
}

func testInterruptOwn(t *testing.T, s registry.Store) {
	rec := running("alice", "own", `{}`)
	mustBegin(t, s, rec, true)
	n, err := s.InterruptRunning(t.Context())
	if err != nil || n != 0 {
		t.Fatalf("InterruptRunning = %d, %v; want 0 (the store's own call is alive)", n, err)
	}
	if mustGet(t, s, rec).State != registry.CallRunning {
		t.Error("InterruptRunning ended the store's own live call")
	}
}

func ids(as []*registry.Approval) []string {
	out := []string{}
	for _, a := range as {
		out = append(out, a.ID)
	}
	return out
}

// RunConcurrentWrites runs every kind of write a call makes at once, so a
// store that groups writes into shared transactions (the embedded store's
// group commit) holds several of them in one: each write must behave
// exactly as it does alone. Twenty calls begin and finish; four begins of
// one toolCallId race (one creates the record, all see it); two requests
// with one approval id race (one is stored, the other fails alone);
// audit entries get distinct ids.
func RunConcurrentWrites(t *testing.T, s registry.Store) {
	ctx := t.Context()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 20 {
		wg.Go(func() {
			<-start
			rec := running("alice", fmt.Sprintf("many-%d", i), fmt.Sprintf(`{"n":%d}`, i))
			if _, created, err := s.BeginCall(ctx, rec); err != nil || !created {
				t.Errorf("BeginCall %d: created=%v, %v", i, created, err)
				return
			}
			if _, stored, err := s.FinishCall(ctx, rec.CallerID, rec.ToolCallID, okResult(rec, fmt.Sprintf(`{"n":%d}`, i)), nil); err != nil || !stored {
				t.Errorf("FinishCall %d: stored=%v, %v", i, stored, err)
			}
		})
	}
	var created atomic.Int32
	dup := running("alice", "dup", `{"n":"dup"}`)
	for i := range 4 {
		wg.Go(func() {
			<-start
			got, c, err := s.BeginCall(ctx, dup)
			if err != nil || got.State != registry.CallRunning || !got.Matches(dup.ToolName, dup.ArgumentsDigest, dup.Context.InstanceKey) {
				t.Errorf("BeginCall of dup %d = %+v, %v; want its running record", i, got, err)
				return
			}
			if c {
				created.Add(1)
			}
		})
	}
	pend := pending("alice", "pend-dup", "appr-dup", time.Now().Add(time.Hour))
	mustBegin(t, s, pend, true)
	var approvals, refused atomic.Int32
	for range 2 {
		wg.Go(func() {
			<-start
			err := s.CreateApproval(ctx, approvalFor(pend))
			switch {
			case err == nil:
				approvals.Add(1)
			case strings.Contains(err.Error(), "already exists"):
				refused.Add(1)
			default:
				t.Errorf("CreateApproval twice: %v, want nil or already exists", err)
			}
		})
	}
	entries := make([]*registry.AuditEntry, 8)
	for i := range entries {
		entries[i] = &registry.AuditEntry{CallerID: "alice", ToolCallID: fmt.Sprintf("many-%d", i), ToolName: "fs__write", Status: registry.StatusOK}
		wg.Go(func() {
			<-start
			if err := s.AppendAudit(ctx, entries[i]); err != nil {
				t.Errorf("AppendAudit %d: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if created.Load() != 1 {
		t.Errorf("%d of 4 concurrent BeginCalls of one toolCallId created it, want 1", created.Load())
	}
	if approvals.Load() != 1 || refused.Load() != 1 {
		t.Errorf("CreateApproval of one id twice: %d stored, %d refused; want 1 and 1", approvals.Load(), refused.Load())
	}
	for i := range 20 {
		rec := mustGet(t, s, &registry.CallRecord{CallerID: "alice", ToolCallID: fmt.Sprintf("many-%d", i)})
		if rec.State != registry.CallDone || string(rec.Result.Output) != fmt.Sprintf(`{"n":%d}`, i) {
			t.Errorf("call many-%d = %s %+v, want done with its own result", i, rec.State, rec.Result)
		}
	}
	if a, err := s.GetApproval(ctx, "appr-dup"); err != nil || a.Status != registry.ApprovalPending {
		t.Errorf("the approval stored once = %+v, %v; want pending", a, err)
	}
	ids := map[int64]bool{}
	for _, e := range entries {
		ids[e.ID] = true
	}
	list, err := s.ListAudit(ctx, registry.AuditFilter{CallerID: "alice"})
	if err != nil || len(list) != 8 || len(ids) != 8 {
		t.Fatalf("audit = %d entries (%v), %d distinct ids; want 8 and 8", len(list), err, len(ids))
	}
	for _, e := range list {
		if !ids[e.ID] {
			t.Errorf("audit entry %d was not assigned to any append", e.ID)
		}
	}
}
