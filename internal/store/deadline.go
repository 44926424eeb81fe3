package store

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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

	// failures counts the call writes (BeginCall, FinishCall) that failed
	// in a row; last is the newest failure. See Failing.
	failures atomic.Int32
	last     atomic.Pointer[writeFailure]
}

type writeFailure struct {
	at  time.Time
	err error
}

// failingAfter is how many call writes in a row must fail, and
// failingFor how recent the last must be, for Failing to report them.
const (
	failingAfter = 3
	failingFor   = 30 * time.Second
)

// Failing reports the newest error when the last failingAfter writes of
// call records failed, the newest within failingFor: the store answers
// its readiness probe (which writes a row of its own) while the calls'
// writes fail, as with a corrupted database file or a locked table.
// Without writes for failingFor it reports nothing again, so a replica
// taken out of rotation is tried once more.
// Only a store WithDeadline wrapped is watched: any other reports nothing.
func Failing(s registry.Store) error {
	t, ok := s.(*deadlined)
	if !ok || t.failures.Load() < failingAfter {
		return nil
	}
	f := t.last.Load()
	if f == nil || time.Since(f.at) > failingFor {
		return nil
	}
	return fmt.Errorf("the last %d writes of call records failed: %w", t.failures.Load(), f.err)
}

// note counts the outcome of a call write. A write its caller gave up on
// (the client left) says nothing about the store.
func (t *deadlined) note(caller context.Context, err error) {
	switch {
	case err == nil:
		t.failures.Store(0)
	case caller.Err() == nil:
		t.last.Store(&writeFailure{at: time.Now(), err: err})
		t.failures.Add(1)
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
	t.note(caller, err)
	return stored, created, err
}

func (t *deadlined) FinishCall(caller context.Context, callerID, toolCallID string, res *registry.Result, audit *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	ctx, cancel := t.ctx(caller)
	defer cancel()
	stored, ok, err := t.s.FinishCall(ctx, callerID, toolCallID, res, audit)
	t.note(caller, err)
	return stored, ok, err
}

func (t *deadlined) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.GetCall(ctx, callerID, toolCallID)
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
	if f := t.last.Load(); err == nil && f != nil && errors.Is(f.err, registry.ErrStoreFull) {
		t.failures.Store(0)
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
