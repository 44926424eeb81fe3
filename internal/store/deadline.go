package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// WithDeadline returns s with every operation bounded by d, so that a
// database that stops answering (a cut or blackholed connection, a
// stalled disk) fails a call with 503 instead of holding it. WaitCall is
// bounded by its caller's context instead (every wait on another call's
// record has its own deadline in the executor). d <= 0 returns s.
func WithDeadline(s registry.Store, d time.Duration) registry.Store {
	if d <= 0 {
		return s
	}
	return &deadlined{s: s, d: d}
}

type deadlined struct {
	s registry.Store
	d time.Duration

	// mu guards run. See Failing.
	mu  sync.Mutex
	run failedRun
}

// failedRun is the reads (GetCall) and writes (BeginCall, FinishCall) of
// call records that failed in a row, and the newest failure.
type failedRun struct {
	reads, writes int
	at            time.Time
	err           error
}

// failingAfter is how many reads and writes of call records in a row
// must fail, and failingFor how recent the last must be, for Failing to
// report them.
const (
	failingAfter = 3
	failingFor   = 30 * time.Second
)

// Failing reports the newest error when the last failingAfter reads or
// writes of call records failed, the newest within failingFor: the store
// answers its readiness probe (which writes a row of its own) while the
// calls' records cannot be read or written, as with a corrupted database
// file, a locked or dropped table or a database that refuses the
// statements. A read counts as a write does: a durable call with a
// toolCallId reads its record before it writes one, and on a locked
// table it is the read that fails. Without reads or writes for
// failingFor it reports nothing again, so a replica taken out of
// rotation is tried once more.
// Only a store WithDeadline wrapped is watched: any other reports nothing.
func Failing(s registry.Store) error {
	t, ok := s.(*deadlined)
	if !ok {
		return nil
	}
	t.mu.Lock()
	r := t.run
	t.mu.Unlock()
	n := r.reads + r.writes
	if n < failingAfter || time.Since(r.at) > failingFor {
		return nil
	}
	what := "reads and writes"
	switch {
	case r.reads == 0:
		what = "writes"
	case r.writes == 0:
		what = "reads"
	}
	return fmt.Errorf("the last %d %s of call records failed: %w", n, what, r.err)
}

// note counts the outcome of a read (write false) or write of a call
// record. One its caller gave up on (the client left) says nothing about
// the store, nor does a record that is not there: the store answered. A
// write that succeeds ends the run; a read that succeeds ends a run of
// reads only: when writes failed too (a corrupted file, a read-only or
// full disk, a table whose writes are refused), the reads that still
// pass, such as clients polling GET /calls/{toolCallId}, do not show
// that calls can be made again.
func (t *deadlined) note(caller context.Context, err error, write bool) {
	if err != nil && caller.Err() != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err == nil || errors.Is(err, registry.ErrNotFound):
		if write || t.run.writes == 0 {
			t.run = failedRun{}
		}
	case write:
		t.run.writes++
		t.run.at, t.run.err = time.Now(), err
	default:
		t.run.reads++
		t.run.at, t.run.err = time.Now(), err
	}
}

func (t *deadlined) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, t.d)
}

// RefileApproval implements registry.ApprovalRefiler, with CreateApproval
// where s does not.
func (t *deadlined) RefileApproval(ctx context.Context, a *registry.Approval) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	if r, ok := t.s.(registry.ApprovalRefiler); ok {
		return r.RefileApproval(ctx, a)
	}
	return t.s.CreateApproval(ctx, a)
}

func (t *deadlined) BeginCall(caller context.Context, rec *registry.CallRecord) (*registry.CallRecord, bool, error) {
	ctx, cancel := t.ctx(caller)
	defer cancel()
	stored, created, err := t.s.BeginCall(ctx, rec)
	t.note(caller, err, true)
	return stored, created, err
}

func (t *deadlined) FinishCall(caller context.Context, callerID, toolCallID string, res *registry.Result, audit *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	ctx, cancel := t.ctx(caller)
	defer cancel()
	stored, ok, err := t.s.FinishCall(ctx, callerID, toolCallID, res, audit)
	t.note(caller, err, true)
	return stored, ok, err
}

// GetCall implements registry.Store. Its failures count towards Failing
// as the writes' do (see note).
func (t *deadlined) GetCall(caller context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	ctx, cancel := t.ctx(caller)
	defer cancel()
	rec, err := t.s.GetCall(ctx, callerID, toolCallID)
	t.note(caller, err, false)
	return rec, err
}

func (t *deadlined) WaitCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	return t.s.WaitCall(ctx, callerID, toolCallID)
}

func (t *deadlined) InterruptRunning(ctx context.Context) (int, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.InterruptRunning(ctx)
}

func (t *deadlined) ReleaseCall(callerID, toolCallID string) { t.s.ReleaseCall(callerID, toolCallID) }

func (t *deadlined) WithdrawCall(ctx context.Context, callerID, toolCallID, approvalID string) (bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.WithdrawCall(ctx, callerID, toolCallID, approvalID)
}

func (t *deadlined) CreateApproval(ctx context.Context, a *registry.Approval) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.CreateApproval(ctx, a)
}

// CreateApprovalWithin implements registry.PendingLimiter, with
// CreateApproval where s does not (the executor's own count then bounds
// the requests, less exactly).
func (t *deadlined) CreateApprovalWithin(ctx context.Context, a *registry.Approval, max int) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	if l, ok := t.s.(registry.PendingLimiter); ok {
		return l.CreateApprovalWithin(ctx, a, max)
	}
	return t.s.CreateApproval(ctx, a)
}

func (t *deadlined) GetApproval(ctx context.Context, id string) (*registry.Approval, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.GetApproval(ctx, id)
}

func (t *deadlined) ListApprovals(ctx context.Context, f registry.ApprovalFilter) ([]*registry.Approval, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.ListApprovals(ctx, f)
}

func (t *deadlined) CountApprovals(ctx context.Context, f registry.ApprovalFilter) (int, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.CountApprovals(ctx, f)
}

func (t *deadlined) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.DecideApproval(ctx, id, v, by, reason, now)
}

// AdoptDecision implements registry.DecisionAdopter; where s does not,
// there is nothing to adopt.
func (t *deadlined) AdoptDecision(ctx context.Context, id, by string, decidedAt time.Time) (*registry.Approval, bool, error) {
	d, ok := t.s.(registry.DecisionAdopter)
	if !ok {
		return nil, false, nil
	}
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return d.AdoptDecision(ctx, id, by, decidedAt)
}

func (t *deadlined) ExpireApprovals(ctx context.Context, now time.Time) (int, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.ExpireApprovals(ctx, now)
}

func (t *deadlined) AppendAudit(ctx context.Context, e *registry.AuditEntry) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.AppendAudit(ctx, e)
}

// QueueAudit implements registry.AuditQueuer, with AppendAudit on a
// goroutine of its own where s does not (then without the order).
func (t *deadlined) QueueAudit(ctx context.Context, e *registry.AuditEntry, done func(error)) {
	ctx, cancel := t.ctx(ctx)
	if q, ok := t.s.(registry.AuditQueuer); ok {
		q.QueueAudit(ctx, e, func(err error) {
			cancel()
			done(err)
		})
		return
	}
	go func() {
		err := t.s.AppendAudit(ctx, e)
		cancel()
		done(err)
	}()
}

func (t *deadlined) ListAudit(ctx context.Context, f registry.AuditFilter) ([]*registry.AuditEntry, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.ListAudit(ctx, f)
}

func (t *deadlined) DeleteExpired(ctx context.Context, before time.Time) (int64, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.DeleteExpired(ctx, before)
}

func (t *deadlined) RevokeSession(ctx context.Context, id string, until time.Time) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.RevokeSession(ctx, id, until)
}

func (t *deadlined) SessionRevoked(ctx context.Context, id string) (bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.SessionRevoked(ctx, id)
}

// Ping implements registry.Store. A probe that succeeds ends a run of
// call writes that failed for want of disk space: the probe writes its
// headroom (see the stores' Ping), so the space is back, and a replica
// kept out of rotation would otherwise get no call to show it until
// failingFor has passed. Other failures (a corrupted file, a locked
// table) leave the probe passing, and still count.
func (t *deadlined) Ping(ctx context.Context) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	err := t.s.Ping(ctx)
	if err == nil {
		t.mu.Lock()
		if errors.Is(t.run.err, registry.ErrStoreFull) {
			t.run = failedRun{}
		}
		t.mu.Unlock()
	}
	return err
}

func (t *deadlined) Close() error { return t.s.Close() }

// SpillsWithDeadline returns s with every operation bounded by d, like
// WithDeadline: each chunk written, the commit and every read. d <= 0
// returns s.
func SpillsWithDeadline(s registry.SpillStore, d time.Duration) registry.SpillStore {
	if d <= 0 {
		return s
	}
	return &deadlinedSpills{s: s, d: d}
}

type deadlinedSpills struct {
	s registry.SpillStore
	d time.Duration
}

func (t *deadlinedSpills) CreateSpill(ctx context.Context, info *registry.SpillInfo) (registry.SpillWriter, error) {
	cctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	w, err := t.s.CreateSpill(cctx, info)
	if err != nil {
		return nil, err
	}
	return &deadlinedSpillWriter{w: w, d: t.d}, nil
}

func (t *deadlinedSpills) ReadSpill(ctx context.Context, callerID, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.s.ReadSpill(ctx, callerID, toolCallID, stream, offset, limit)
}

func (t *deadlinedSpills) ListSpills(ctx context.Context, callerID, toolCallID string) ([]*registry.SpillInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.s.ListSpills(ctx, callerID, toolCallID)
}

func (t *deadlinedSpills) DeleteExpiredSpills(ctx context.Context, now time.Time) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.s.DeleteExpiredSpills(ctx, now)
}

func (t *deadlinedSpills) SpillBytes(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.s.SpillBytes(ctx)
}

type deadlinedSpillWriter struct {
	w registry.SpillWriter
	d time.Duration
}

func (t *deadlinedSpillWriter) WriteChunk(ctx context.Context, seq int, p []byte) error {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.w.WriteChunk(ctx, seq, p)
}

func (t *deadlinedSpillWriter) Commit(ctx context.Context, totalBytes, storedBytes int64) error {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	return t.w.Commit(ctx, totalBytes, storedBytes)
}

func (t *deadlinedSpillWriter) Abort(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, t.d)
	defer cancel()
	t.w.Abort(ctx)
}
