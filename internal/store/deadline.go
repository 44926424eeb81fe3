package store

import (
	"context"
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

func (t *deadlined) BeginCall(ctx context.Context, rec *registry.CallRecord) (*registry.CallRecord, bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.BeginCall(ctx, rec)
}

func (t *deadlined) FinishCall(ctx context.Context, callerID, toolCallID string, res *registry.Result, audit *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.FinishCall(ctx, callerID, toolCallID, res, audit)
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

func (t *deadlined) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.DecideApproval(ctx, id, v, by, reason, now)
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

func (t *deadlined) Ping(ctx context.Context) error {
	ctx, cancel := t.ctx(ctx)
	defer cancel()
	return t.s.Ping(ctx)
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
