// Package sqlite is the embedded registry.Store: one SQLite file (pure Go,
// modernc.org/sqlite) in WAL mode. Every write goes through a single
// connection, so writers never contend and every conditional update runs
// alone; reads go through a small pool of read-only connections that WAL
// lets run beside the writer. A lock file keeps a second process out, so
// calls left running in the file belong to a process that is gone.
package sqlite

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Options configure the embedded store. The zero value is ready to use.
type Options struct {
	// Logger receives lease renewal failures; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Lease is how long a running call's record stays claimed without
	// renewal; 0 means 30s. The store renews its calls every Lease/3.
	Lease time.Duration
	// BusyTimeout is how long a connection waits for a lock; 0 means 5s.
	BusyTimeout time.Duration
	// Readers is the size of the read pool; 0 means 4.
	Readers int
	// SyncNormal sets synchronous=NORMAL instead of FULL: faster commits,
	// still safe against a process crash, but the last commits can be lost
	// if the machine loses power.
	SyncNormal bool
}

// Store is the embedded store. It implements registry.Store.
type Store struct {
	w, r   *sql.DB
	lock   *os.File
	id     string
	now    func() time.Time
	lease  time.Duration
	log    *slog.Logger
	hub    *store.Hub
	leases *store.Leases

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ registry.Store = (*Store)(nil)

// Open opens (creating it and its directory when missing) the store at
// path, applies pending migrations and starts renewing leases. A second
// Open of the same file, from this process or another, fails while the
// first is open. The main program should call InterruptRunning once
// after Open, and run store.RunRetention beside it.
func Open(ctx context.Context, path string, o Options) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	lock, err := os.OpenFile(abs+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	s := &Store{
		lock:   lock,
		id:     newInstanceID(),
		now:    o.Now,
		lease:  cmp.Or(o.Lease, 30*time.Second),
		log:    cmp.Or(o.Logger, slog.New(slog.DiscardHandler)),
		hub:    store.NewHub(),
		leases: store.NewLeases(),
		done:   make(chan struct{}),
	}
	if s.now == nil {
		s.now = time.Now
	}
	busy := cmp.Or(o.BusyTimeout, 5*time.Second).Milliseconds()
	syncMode := "FULL"
	if o.SyncNormal {
		syncMode = "NORMAL"
	}
	u := url.URL{Scheme: "file", Path: abs}
	base := u.String() + fmt.Sprintf("?_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)", busy)
	s.w, err = sql.Open("sqlite", base+"&_pragma=journal_mode(WAL)&_pragma=synchronous("+syncMode+")&_txlock=immediate")
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	// One writer connection, kept open: writes are serialised in process
	// and BEGIN IMMEDIATE guards the file besides.
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	if err := migrate(ctx, s.w); err != nil {
		s.w.Close()
		lock.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}
	s.r, err = sql.Open("sqlite", base+"&_pragma=query_only(1)")
	if err != nil {
		s.w.Close()
		lock.Close()
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	n := cmp.Or(o.Readers, 4)
	s.r.SetMaxOpenConns(n)
	s.r.SetMaxIdleConns(n)
	rctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		defer close(s.done)
		s.leases.Renew(rctx, s.lease/3, s.log, s.renew)
	}()
	return s, nil
}

// InstanceID returns the id this store records as the owner of the calls
// it runs; it is new at every Open.
func (s *Store) InstanceID() string { return s.id }

func newInstanceID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "sqlite-" + hex.EncodeToString(b[:])
}

func migrate(ctx context.Context, db *sql.DB) error {
	ms, err := store.ReadMigrations(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	var top int
	if err := db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&top); err != nil {
		return err
	}
	if top > len(ms) {
		return fmt.Errorf("database schema is at version %d, newer than this program knows (%d); run a newer toolsvc", top, len(ms))
	}
	for _, m := range ms[top:] {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Name, time.Now().UnixMicro()); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// micro and fromMicro convert times to the stored form: microseconds since
// the epoch, 0 for the zero time.
func micro(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicro(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

func (s *Store) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

const callColumns = `caller_id, tool_call_id, tool_name, arguments_digest, arguments, context, state, result,
	approval_id, owner, created_at, updated_at, expires_at`

type scanner interface{ Scan(dest ...any) error }

func scanCall(row scanner) (*registry.CallRecord, error) {
	var (
		c                         registry.CallRecord
		args, ctxJSON, result     []byte
		created, updated, expires int64
	)
	err := row.Scan(&c.CallerID, &c.ToolCallID, &c.ToolName, &c.ArgumentsDigest, &args, &ctxJSON, &c.State, &result,
		&c.ApprovalID, &c.Owner, &created, &updated, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, registry.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	c.Arguments = args
	if c.Context, err = store.DecodeContext(ctxJSON); err != nil {
		return nil, err
	}
	if c.Result, err = store.DecodeResult(result); err != nil {
		return nil, err
	}
	c.CreatedAt, c.UpdatedAt, c.ExpiresAt = fromMicro(created), fromMicro(updated), fromMicro(expires)
	return &c, nil
}

// BeginCall implements registry.Store.
func (s *Store) BeginCall(ctx context.Context, rec *registry.CallRecord) (*registry.CallRecord, bool, error) {
	if err := store.CheckBegin(rec); err != nil {
		return nil, false, err
	}
	now := s.clock()
	c := *rec
	c.Arguments = store.Arguments(rec.Arguments)
	c.CreatedAt, c.UpdatedAt = now, now
	if c.State == registry.CallRunning {
		c.Owner, c.ExpiresAt, c.Result = s.id, now.Add(s.lease), nil
	} else {
		c.Owner, c.ExpiresAt = "", rec.ExpiresAt.UTC().Truncate(time.Microsecond)
	}
	result, err := store.EncodeResult(c.Result)
	if err != nil {
		return nil, false, err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	r, err := tx.ExecContext(ctx, `INSERT INTO calls (`+callColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (caller_id, tool_call_id) DO NOTHING`,
		c.CallerID, c.ToolCallID, c.ToolName, c.ArgumentsDigest, []byte(c.Arguments), store.EncodeContext(c.Context),
		string(c.State), result, c.ApprovalID, c.Owner, micro(now), micro(now), micro(c.ExpiresAt))
	if err != nil {
		return nil, false, err
	}
	if n, _ := r.RowsAffected(); n == 1 {
		if err := tx.Commit(); err != nil {
			return nil, false, err
		}
		if c.State == registry.CallRunning {
			s.leases.Add(store.Key(c.CallerID, c.ToolCallID))
		}
		return &c, true, nil
	}
	existing, err := scanCall(tx.QueryRowContext(ctx, `SELECT `+callColumns+` FROM calls WHERE caller_id = ? AND tool_call_id = ?`,
		c.CallerID, c.ToolCallID))
	if err != nil {
		return nil, false, err
	}
	return store.EffectiveCall(existing, now), false, tx.Commit()
}

// FinishCall implements registry.Store.
func (s *Store) FinishCall(ctx context.Context, callerID, toolCallID string, res *registry.Result) (*registry.CallRecord, bool, error) {
	if res == nil {
		return nil, false, errors.New("sqlite store: FinishCall needs a result")
	}
	key := store.Key(callerID, toolCallID)
	defer s.leases.Remove(key)
	result, err := store.EncodeResult(res)
	if err != nil {
		return nil, false, err
	}
	now := s.clock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	r, err := tx.ExecContext(ctx, `UPDATE calls SET state = 'done', result = ?, owner = '', expires_at = 0, updated_at = ?
		WHERE caller_id = ? AND tool_call_id = ? AND (state = 'pending_approval' OR (state = 'running' AND owner = ?))`,
		result, micro(now), callerID, toolCallID, s.id)
	if err != nil {
		return nil, false, err
	}
	n, _ := r.RowsAffected()
	rec, err := scanCall(tx.QueryRowContext(ctx, `SELECT `+callColumns+` FROM calls WHERE caller_id = ? AND tool_call_id = ?`, callerID, toolCallID))
	if err != nil {
		return nil, false, err
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	if n == 1 {
		s.hub.Notify(key)
	}
	return rec, n == 1, nil
}

// GetCall implements registry.Store.
func (s *Store) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	rec, err := scanCall(s.r.QueryRowContext(ctx, `SELECT `+callColumns+` FROM calls WHERE caller_id = ? AND tool_call_id = ?`, callerID, toolCallID))
	if err != nil {
		return nil, err
	}
	return store.EffectiveCall(rec, s.clock()), nil
}

// WaitCall implements registry.Store. Waiters are woken by this store's
// own writes at once (no other process writes the file), and poll with
// backoff up to once a second besides.
func (s *Store) WaitCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	return store.Wait(ctx, store.Key(callerID, toolCallID), store.WaitOptions{
		Hub: s.hub,
		Get: func(ctx context.Context) (*registry.CallRecord, error) { return s.GetCall(ctx, callerID, toolCallID) },
		Interrupt: func(ctx context.Context, rec *registry.CallRecord) error {
			if rec.Owner == s.id {
				return nil
			}
			_, err := s.interrupt(ctx, rec.CallerID, rec.ToolCallID)
			return err
		},
		Now: s.now,
	})
}

// interrupt ends calls left running by another process: one call when
// toolCallID is given, else all.
func (s *Store) interrupt(ctx context.Context, callerID, toolCallID string) (int, error) {
	now := s.clock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	q := `SELECT caller_id, tool_call_id, tool_name FROM calls WHERE state = 'running' AND owner <> ?`
	args := []any{s.id}
	if toolCallID != "" {
		q += ` AND caller_id = ? AND tool_call_id = ?`
		args = append(args, callerID, toolCallID)
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	type key struct{ caller, id, tool string }
	var keys []key
	for rows.Next() {
		var k key
		if err := rows.Scan(&k.caller, &k.id, &k.tool); err != nil {
			rows.Close()
			return 0, err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, k := range keys {
		result, err := store.EncodeResult(registry.InterruptedResult(k.id, k.tool))
		if err != nil {
			return 0, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE calls SET state = 'done', result = ?, owner = '', expires_at = 0, updated_at = ?
			WHERE caller_id = ? AND tool_call_id = ? AND state = 'running'`, result, micro(now), k.caller, k.id); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	for _, k := range keys {
		s.hub.Notify(store.Key(k.caller, k.id))
	}
	return len(keys), nil
}

// InterruptRunning implements registry.Store: every running call not owned
// by this store was left by a process that is gone, since the file lock
// admits one process at a time.
func (s *Store) InterruptRunning(ctx context.Context) (int, error) {
	return s.interrupt(ctx, "", "")
}

func (s *Store) renew(ctx context.Context) error {
	_, err := s.w.ExecContext(ctx, `UPDATE calls SET expires_at = ? WHERE state = 'running' AND owner = ?`,
		micro(s.clock().Add(s.lease)), s.id)
	return err
}

const approvalColumns = `id, caller_id, tool_call_id, tool_name, tier, rule, reason, arguments_digest, arguments, context,
	status, created_at, updated_at, expires_at, decided_at, decided_by, decision_reason`

func scanApproval(row scanner) (*registry.Approval, error) {
	var (
		a                                    registry.Approval
		args, ctxJSON                        []byte
		created, updated, expires, decidedAt int64
	)
	err := row.Scan(&a.ID, &a.CallerID, &a.ToolCallID, &a.ToolName, &a.Tier, &a.Rule, &a.Reason, &a.ArgumentsDigest,
		&args, &ctxJSON, &a.Status, &created, &updated, &expires, &decidedAt, &a.DecidedBy, &a.DecisionReason)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, registry.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	a.Arguments = args
	if a.Context, err = store.DecodeContext(ctxJSON); err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt, a.DecidedAt = fromMicro(created), fromMicro(expires), fromMicro(decidedAt)
	_ = updated
	return &a, nil
}

// CreateApproval implements registry.Store.
func (s *Store) CreateApproval(ctx context.Context, a *registry.Approval) error {
	if err := store.CheckApproval(a); err != nil {
		return err
	}
	now := s.clock()
	if a.CreatedAt.IsZero() {
		a.CreatedAt = now
	}
	a.CreatedAt = a.CreatedAt.UTC().Truncate(time.Microsecond)
	a.ExpiresAt = a.ExpiresAt.UTC().Truncate(time.Microsecond)
	a.Status = registry.ApprovalPending
	_, err := s.w.ExecContext(ctx, `INSERT INTO approvals (`+approvalColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, 0, '', '')`,
		a.ID, a.CallerID, a.ToolCallID, a.ToolName, string(a.Tier), a.Rule, a.Reason, a.ArgumentsDigest,
		store.Arguments(a.Arguments), store.EncodeContext(a.Context), micro(a.CreatedAt), micro(now), micro(a.ExpiresAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return fmt.Errorf("sqlite store: approval %s already exists", a.ID)
	}
	return err
}

// GetApproval implements registry.Store.
func (s *Store) GetApproval(ctx context.Context, id string) (*registry.Approval, error) {
	a, err := scanApproval(s.r.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if err != nil {
		return nil, err
	}
	return store.EffectiveApproval(a, s.clock()), nil
}

// ListApprovals implements registry.Store.
func (s *Store) ListApprovals(ctx context.Context, f registry.ApprovalFilter) ([]*registry.Approval, error) {
	now := s.clock()
	var where []string
	var args []any
	switch f.Status {
	case "":
	case registry.ApprovalPending:
		where, args = append(where, `status = 'pending' AND expires_at > ?`), append(args, micro(now))
	case registry.ApprovalExpired:
		where, args = append(where, `(status = 'expired' OR (status = 'pending' AND expires_at <= ?))`), append(args, micro(now))
	default:
		where, args = append(where, `status = ?`), append(args, string(f.Status))
	}
	if f.CallerID != "" {
		where, args = append(where, `caller_id = ?`), append(args, f.CallerID)
	}
	q := `SELECT ` + approvalColumns + ` FROM approvals`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY created_at, id LIMIT ?`
	args = append(args, store.Limit(f.Limit))
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*registry.Approval{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, store.EffectiveApproval(a, now))
	}
	return out, rows.Err()
}

// DecideApproval implements registry.Store. The single writer connection
// runs the conditional update alone, so exactly one decision wins.
func (s *Store) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	var status registry.ApprovalStatus
	switch v {
	case registry.VerdictApprove:
		status = registry.ApprovalApproved
	case registry.VerdictDeny:
		status = registry.ApprovalDenied
	default:
		return nil, false, fmt.Errorf("sqlite store: unknown verdict %q (want approve or deny)", v)
	}
	now = now.UTC().Truncate(time.Microsecond)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	a, err := scanApproval(tx.QueryRowContext(ctx, `UPDATE approvals
		SET status = ?, decided_at = ?, decided_by = ?, decision_reason = ?, updated_at = ?
		WHERE id = ? AND status = 'pending' AND expires_at > ?
		RETURNING `+approvalColumns, string(status), micro(now), by, reason, micro(now), id, micro(now)))
	if errors.Is(err, registry.ErrNotFound) {
		return s.notDecided(ctx, tx, id, now)
	}
	if err != nil {
		return nil, false, err
	}
	key := store.Key(a.CallerID, a.ToolCallID)
	clock := s.clock()
	if status == registry.ApprovalApproved {
		r, err := tx.ExecContext(ctx, `UPDATE calls SET state = 'running', result = NULL, owner = ?, expires_at = ?, updated_at = ?
			WHERE caller_id = ? AND tool_call_id = ? AND state = 'pending_approval'`,
			s.id, micro(clock.Add(s.lease)), micro(clock), a.CallerID, a.ToolCallID)
		if err != nil {
			return nil, false, err
		}
		if n, _ := r.RowsAffected(); n == 1 {
			s.leases.Add(key)
		}
	} else {
		result, err := store.EncodeResult(registry.ApprovalDeniedResult(a.ToolCallID, a.ToolName, by, reason))
		if err != nil {
			return nil, false, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE calls SET state = 'done', result = ?, expires_at = 0, updated_at = ?
			WHERE caller_id = ? AND tool_call_id = ? AND state = 'pending_approval'`,
			result, micro(clock), a.CallerID, a.ToolCallID); err != nil {
			return nil, false, err
		}
	}
	if err := tx.Commit(); err != nil {
		s.leases.Remove(key)
		return nil, false, err
	}
	s.hub.Notify(key)
	return a, true, nil
}

// notDecided answers a decision that found no pending, unexpired request:
// it expires a request that is past its time, and returns the request as
// it stands.
func (s *Store) notDecided(ctx context.Context, tx *sql.Tx, id string, now time.Time) (*registry.Approval, bool, error) {
	a, err := scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalColumns+` FROM approvals WHERE id = ?`, id))
	if err != nil {
		return nil, false, err
	}
	if a.Status != registry.ApprovalPending {
		return a, false, tx.Commit()
	}
	keys, err := s.expire(ctx, tx, now, id)
	if err != nil {
		return nil, false, err
	}
	if err := tx.Commit(); err != nil {
		return nil, false, err
	}
	for _, k := range keys {
		s.hub.Notify(k)
	}
	return store.EffectiveApproval(a, now), false, nil
}

// expire moves pending requests (one, when id is given) whose expiry is at
// or before now to expired, and their pending calls to done. It returns the
// keys of the calls it changed.
func (s *Store) expire(ctx context.Context, tx *sql.Tx, now time.Time, id string) ([]string, error) {
	q := `UPDATE approvals SET status = 'expired', decided_at = expires_at, updated_at = ?
		WHERE status = 'pending' AND expires_at <= ?`
	args := []any{micro(now), micro(now)}
	if id != "" {
		q += ` AND id = ?`
		args = append(args, id)
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return nil, err
	}
	q = `SELECT caller_id, tool_call_id, tool_name FROM calls WHERE state = 'pending_approval' AND expires_at <= ?`
	args = []any{micro(now)}
	if id != "" {
		q += ` AND approval_id = ?`
		args = append(args, id)
	}
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	type call struct{ caller, id, tool string }
	var calls []call
	for rows.Next() {
		var c call
		if err := rows.Scan(&c.caller, &c.id, &c.tool); err != nil {
			rows.Close()
			return nil, err
		}
		calls = append(calls, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(calls))
	for _, c := range calls {
		result, err := store.EncodeResult(registry.ApprovalExpiredResult(c.id, c.tool))
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE calls SET state = 'done', result = ?, expires_at = 0, updated_at = ?
			WHERE caller_id = ? AND tool_call_id = ? AND state = 'pending_approval'`, result, micro(now), c.caller, c.id); err != nil {
			return nil, err
		}
		keys = append(keys, store.Key(c.caller, c.id))
	}
	return keys, nil
}

// ExpireApprovals implements registry.Store.
func (s *Store) ExpireApprovals(ctx context.Context, now time.Time) (int, error) {
	now = now.UTC().Truncate(time.Microsecond)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE status = 'pending' AND expires_at <= ?`, micro(now)).Scan(&n); err != nil {
		return 0, err
	}
	keys, err := s.expire(ctx, tx, now, "")
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	for _, k := range keys {
		s.hub.Notify(k)
	}
	return n, nil
}

// AppendAudit implements registry.Store.
func (s *Store) AppendAudit(ctx context.Context, e *registry.AuditEntry) error {
	if e.Time.IsZero() {
		e.Time = s.clock()
	}
	e.Time = e.Time.UTC().Truncate(time.Microsecond)
	if e.Event == "" {
		e.Event = "call"
	}
	return s.w.QueryRowContext(ctx, `INSERT INTO audit (time, event, caller_id, tool_call_id, tool_name, tier, decision, rule,
		status, code, duration_ms, arguments_digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		micro(e.Time), e.Event, e.CallerID, e.ToolCallID, e.ToolName, string(e.Tier), string(e.Decision), e.Rule,
		string(e.Status), string(e.Code), e.DurationMs, e.ArgumentsDigest).Scan(&e.ID)
}

// ListAudit implements registry.Store.
func (s *Store) ListAudit(ctx context.Context, f registry.AuditFilter) ([]*registry.AuditEntry, error) {
	where := []string{`id > ?`}
	args := []any{f.AfterID}
	if f.CallerID != "" {
		where, args = append(where, `caller_id = ?`), append(args, f.CallerID)
	}
	if f.ToolName != "" {
		where, args = append(where, `tool_name = ?`), append(args, f.ToolName)
	}
	if !f.Since.IsZero() {
		where, args = append(where, `time >= ?`), append(args, micro(f.Since))
	}
	args = append(args, store.Limit(f.Limit))
	rows, err := s.r.QueryContext(ctx, `SELECT id, time, event, caller_id, tool_call_id, tool_name, tier, decision, rule,
		status, code, duration_ms, arguments_digest FROM audit WHERE `+strings.Join(where, ` AND `)+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*registry.AuditEntry{}
	for rows.Next() {
		var e registry.AuditEntry
		var t int64
		if err := rows.Scan(&e.ID, &t, &e.Event, &e.CallerID, &e.ToolCallID, &e.ToolName, &e.Tier, &e.Decision, &e.Rule,
			&e.Status, &e.Code, &e.DurationMs, &e.ArgumentsDigest); err != nil {
			return nil, err
		}
		e.Time = fromMicro(t)
		out = append(out, &e)
	}
	return out, rows.Err()
}

// DeleteExpired implements registry.Store.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time) (int64, error) {
	b := micro(before)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	var total int64
	for _, q := range []string{
		`DELETE FROM calls WHERE (state = 'done' AND updated_at < ?1) OR (state = 'pending_approval' AND expires_at < ?1)`,
		`DELETE FROM approvals WHERE (status <> 'pending' AND updated_at < ?1) OR (status = 'pending' AND expires_at < ?1)`,
		`DELETE FROM audit WHERE time < ?1`,
	} {
		r, err := tx.ExecContext(ctx, q, b)
		if err != nil {
			return 0, err
		}
		n, _ := r.RowsAffected()
		total += n
	}
	return total, tx.Commit()
}

// Ping implements registry.Store.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	return s.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}

// Close implements registry.Store: it stops renewing leases, closes the
// database and releases the file lock.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.done
		s.closeErr = errors.Join(s.r.Close(), s.w.Close(), s.lock.Close())
	})
	return s.closeErr
}
