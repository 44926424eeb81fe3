// Package sqlite is the embedded registry.Store: one SQLite file (pure Go,
// modernc.org/sqlite) in WAL mode. Every write goes through a single
// connection, so writers never contend and every conditional update runs
// alone; reads go through a small pool of read-only connections that WAL
// lets run beside the writer. The writes of calls (BeginCall, FinishCall,
// AppendAudit, CreateApproval) go through a group committer
// (store.Committer): the ones waiting share one transaction and one
// fsync, each in a savepoint of its own, and none returns before its
// commit. A lock file keeps a second process out, so calls left running
// in the file belong to a process that is gone.
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
	// CheckpointEvery is how often the WAL is checkpointed and truncated;
	// 0 means 5s. Between two, SQLite checkpoints by itself every 256
	// pages (1 MiB) and keeps at most 1 MiB of WAL after a checkpoint.
	CheckpointEvery time.Duration
	// SyncNormal sets synchronous=NORMAL instead of FULL: commits do not
	// wait for the disk (only checkpoints do), still safe against a process
	// crash, but the last commits before the machine loses power or the
	// kernel crashes can be lost, results already answered included.
	SyncNormal bool
	// CommitWindow is how long a group commit waits for more writes after
	// the first; 0 adds no wait (see store.CommitOptions.Window).
	CommitWindow time.Duration
	// CommitMaxOps and CommitMaxBytes bound one group commit; 0 means the
	// store.CommitOptions defaults.
	CommitMaxOps, CommitMaxBytes int
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
	commit *store.Committer[*sql.Tx]
	stmts  map[string]*sql.Stmt // preparedSQL on w

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
	s.w, err = sql.Open("sqlite", base+"&_pragma=journal_mode(WAL)&_pragma=synchronous("+syncMode+")&_pragma=wal_autocheckpoint(256)&_pragma=journal_size_limit(1048576)&_txlock=immediate")
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
	if err := s.prepare(ctx); err != nil {
		s.r.Close()
		s.w.Close()
		lock.Close()
		return nil, fmt.Errorf("sqlite store %s: %w", abs, err)
	}
	s.commit = store.NewCommitter(store.CommitOptions[*sql.Tx]{
		InTx: s.inTx,
		Exec: func(ctx context.Context, tx *sql.Tx, q string) error {
			_, err := s.stmt(ctx, tx, q).ExecContext(ctx)
			return err
		},
		MaxOps:   o.CommitMaxOps,
		MaxBytes: o.CommitMaxBytes,
		Window:   o.CommitWindow,
	})
	rctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		defer close(s.done)
		var wg sync.WaitGroup
		wg.Go(func() { s.checkpoints(rctx, cmp.Or(o.CheckpointEvery, 5*time.Second)) })
		s.leases.Renew(rctx, s.lease/3, s.log, s.renew)
		wg.Wait()
	}()
	return s, nil
}

// inTx runs fn in one write transaction.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// CommitStats returns how many group-commit transactions the store has
// run and how many writes they held.
func (s *Store) CommitStats() (txs, writes uint64) { return s.commit.Stats() }

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
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return err
	}
	pending, err := store.Pending(ms, applied)
	if err != nil {
		return err
	}
	for _, m := range pending {
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

func appliedVersions(ctx context.Context, db *sql.DB) ([]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
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
	approval_id, owner, created_at, updated_at, expires_at, trace_id`

// The statements of the group commit, prepared once on the writer
// connection: parsing them anew costs more than running them.
const (
	insertCallSQL = `INSERT INTO calls (` + callColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (caller_id, tool_call_id) DO NOTHING`
	selectCallSQL = `SELECT ` + callColumns + ` FROM calls WHERE caller_id = ? AND tool_call_id = ?`
	finishCallSQL = `UPDATE calls SET state = 'done', result = ?, owner = '', expires_at = 0, updated_at = ?
		WHERE caller_id = ? AND tool_call_id = ? AND (state = 'pending_approval' OR (state = 'running' AND owner = ?))`
	insertAuditSQL = `INSERT INTO audit (time, event, caller_id, tool_call_id, tool_name, tier, decision, rule,
		status, code, duration_ms, arguments_digest, issuer, subject) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`
)

var preparedSQL = []string{insertCallSQL, selectCallSQL, finishCallSQL, insertAuditSQL, `SAVEPOINT op`, `RELEASE op`, `ROLLBACK TO op`}

// prepare prepares preparedSQL on the writer connection.
func (s *Store) prepare(ctx context.Context) error {
	s.stmts = make(map[string]*sql.Stmt, len(preparedSQL))
	for _, q := range preparedSQL {
		st, err := s.w.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("preparing %q: %w", q, err)
		}
		s.stmts[q] = st
	}
	return nil
}

// stmt returns the prepared statement q bound to tx.
func (s *Store) stmt(ctx context.Context, tx *sql.Tx, q string) *sql.Stmt {
	return tx.StmtContext(ctx, s.stmts[q])
}

type scanner interface{ Scan(dest ...any) error }

func scanCall(row scanner) (*registry.CallRecord, error) {
	var (
		c                         registry.CallRecord
		args, ctxJSON, result     []byte
		created, updated, expires int64
	)
	err := row.Scan(&c.CallerID, &c.ToolCallID, &c.ToolName, &c.ArgumentsDigest, &args, &ctxJSON, &c.State, &result,
		&c.ApprovalID, &c.Owner, &created, &updated, &expires, &c.TraceID)
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
	c, result, err := store.NewCall(rec, now, s.id, s.lease)
	if err != nil {
		return nil, false, err
	}
	cctx := store.EncodeContext(c.Context)
	var existing *registry.CallRecord
	err = s.commit.Do(ctx, len(c.Arguments)+len(result)+len(cctx)+256, func(ctx context.Context, tx *sql.Tx) error {
		r, err := s.stmt(ctx, tx, insertCallSQL).ExecContext(ctx,
			c.CallerID, c.ToolCallID, c.ToolName, c.ArgumentsDigest, []byte(c.Arguments), cctx,
			string(c.State), result, c.ApprovalID, c.Owner, micro(now), micro(now), micro(c.ExpiresAt), c.TraceID)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 1 {
			return nil
		}
		existing, err = scanCall(s.stmt(ctx, tx, selectCallSQL).QueryRowContext(ctx, c.CallerID, c.ToolCallID))
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if existing != nil {
		return store.EffectiveCall(existing, now), false, nil
	}
	if c.State == registry.CallRunning {
		s.leases.Add(c.CallerID, c.ToolCallID)
	}
	return &c, true, nil
}

// FinishCall implements registry.Store.
func (s *Store) FinishCall(ctx context.Context, callerID, toolCallID string, res *registry.Result) (*registry.CallRecord, bool, error) {
	if res == nil {
		return nil, false, errors.New("sqlite store: FinishCall needs a result")
	}
	key := store.Key(callerID, toolCallID)
	result, err := store.EncodeResult(res)
	if err != nil {
		return nil, false, err
	}
	now := s.clock()
	var (
		n   int64
		rec *registry.CallRecord
	)
	err = s.commit.Do(ctx, len(result)+256, func(ctx context.Context, tx *sql.Tx) error {
		r, err := s.stmt(ctx, tx, finishCallSQL).ExecContext(ctx, result, micro(now), callerID, toolCallID, s.id)
		if err != nil {
			return err
		}
		n, _ = r.RowsAffected()
		rec, err = scanCall(s.stmt(ctx, tx, selectCallSQL).QueryRowContext(ctx, callerID, toolCallID))
		return err
	})
	if err != nil {
		return nil, false, err
	}
	// Only now is the result safe: until then the lease stays renewed, as
	// the caller holds the result and retries.
	s.leases.Remove(callerID, toolCallID)
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
			_, err := s.interrupt(ctx, rec.CallerID, rec.ToolCallID)
			return err
		},
		Now: s.now,
	})
}

// interrupt ends calls left running by another process, and calls of
// this process whose lease has lapsed and that it no longer runs (their
// result was lost): one call when toolCallID is given, else all.
func (s *Store) interrupt(ctx context.Context, callerID, toolCallID string) (int, error) {
	now := s.clock()
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	q := `SELECT caller_id, tool_call_id, tool_name FROM calls WHERE state = 'running' AND (owner <> ? OR expires_at <= ?)`
	args := []any{s.id, micro(now)}
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
		if s.leases.Has(k.caller, k.id) {
			continue // runs here, or its result waits to be recorded
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
// admits one process at a time; a call of this store is ended once its
// lease has lapsed and it no longer runs here.
func (s *Store) InterruptRunning(ctx context.Context) (int, error) {
	return s.interrupt(ctx, "", "")
}

// renew extends the leases of the calls this process runs, and only
// theirs.
func (s *Store) renew(ctx context.Context, keys []store.CallKey) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	until := micro(s.clock().Add(s.lease))
	for _, k := range keys {
		if _, err := tx.ExecContext(ctx, `UPDATE calls SET expires_at = ? WHERE state = 'running' AND owner = ? AND caller_id = ? AND tool_call_id = ?`,
			until, s.id, k.CallerID, k.ToolCallID); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// ReleaseCall implements registry.Store.
func (s *Store) ReleaseCall(callerID, toolCallID string) { s.leases.Remove(callerID, toolCallID) }

const approvalColumns = `id, caller_id, tool_call_id, tool_name, tier, rule, reason, arguments_digest, arguments, context,
	status, created_at, updated_at, expires_at, decided_at, decided_by, decision_reason, filed`

func scanApproval(row scanner) (*registry.Approval, error) {
	var (
		a                                    registry.Approval
		args, ctxJSON, filed                 []byte
		created, updated, expires, decidedAt int64
	)
	err := row.Scan(&a.ID, &a.CallerID, &a.ToolCallID, &a.ToolName, &a.Tier, &a.Rule, &a.Reason, &a.ArgumentsDigest,
		&args, &ctxJSON, &a.Status, &created, &updated, &expires, &decidedAt, &a.DecidedBy, &a.DecisionReason, &filed)
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
	if a.Filed, err = store.DecodeFiling(filed); err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt, a.DecidedAt = fromMicro(created), fromMicro(expires), fromMicro(decidedAt)
	_ = updated
	return &a, nil
}

// CreateApproval implements registry.Store.
func (s *Store) CreateApproval(ctx context.Context, a *registry.Approval) error {
	now := s.clock()
	filed, err := store.NewApproval(a, now)
	if err != nil {
		return err
	}
	v := *a // the committer reads its own copy
	args, cctx := store.Arguments(v.Arguments), store.EncodeContext(v.Context)
	err = s.commit.Do(ctx, len(args)+len(cctx)+len(filed)+256, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO approvals (`+approvalColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, 0, '', '', ?)`,
			v.ID, v.CallerID, v.ToolCallID, v.ToolName, string(v.Tier), v.Rule, v.Reason, v.ArgumentsDigest,
			args, cctx, micro(v.CreatedAt), micro(now), micro(v.ExpiresAt), filed)
		return err
	})
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
	status, err := store.DecidedStatus(v)
	if err != nil {
		return nil, false, err
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
			s.leases.Add(a.CallerID, a.ToolCallID)
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
		s.leases.Remove(a.CallerID, a.ToolCallID)
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
	store.NewAudit(e, s.clock())
	v := *e // the committer reads its own copy: a caller that gives up may retry with e
	var id int64
	err := s.commit.Do(ctx, 512, func(ctx context.Context, tx *sql.Tx) error {
		return s.stmt(ctx, tx, insertAuditSQL).QueryRowContext(ctx,
			micro(v.Time), v.Event, v.CallerID, v.ToolCallID, v.ToolName, string(v.Tier), string(v.Decision), v.Rule,
			string(v.Status), string(v.Code), v.DurationMs, v.ArgumentsDigest, v.Issuer, v.Subject).Scan(&id)
	})
	if err != nil {
		return err
	}
	e.ID = id
	return nil
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
		status, code, duration_ms, arguments_digest, issuer, subject FROM audit WHERE `+strings.Join(where, ` AND `)+` ORDER BY id LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []*registry.AuditEntry{}
	for rows.Next() {
		var e registry.AuditEntry
		var t int64
		if err := rows.Scan(&e.ID, &t, &e.Event, &e.CallerID, &e.ToolCallID, &e.ToolName, &e.Tier, &e.Decision, &e.Rule,
			&e.Status, &e.Code, &e.DurationMs, &e.ArgumentsDigest, &e.Issuer, &e.Subject); err != nil {
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

// probeHeadroom is how many bytes the readiness write needs: a volume
// with less room left fails readiness before calls fail.
const probeHeadroom = 128 << 10

// Ping implements registry.Store: it reads, and rewrites one row of
// probeHeadroom bytes, so a volume that takes no more writes (or hardly
// any) fails it.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return err
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO probe (id, at, pad) VALUES (1, ?, zeroblob(?))
		ON CONFLICT (id) DO UPDATE SET at = excluded.at, pad = excluded.pad`,
		micro(s.clock()), probeHeadroom); err != nil {
		return fmt.Errorf("write probe: %w", err)
	}
	return nil
}

// checkpoint copies the WAL into the database and truncates it, so the
// WAL stays small however the database is used (SQLite's own automatic
// checkpoint never shrinks the file).
func (s *Store) checkpoint(ctx context.Context) error {
	var busy, logPages, done int
	if err := s.w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &logPages, &done); err != nil {
		return err
	}
	if busy != 0 {
		return errors.New("checkpoint was blocked by a reader")
	}
	return nil
}

// checkpoints runs checkpoint every interval until ctx ends.
func (s *Store) checkpoints(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		if err := s.checkpoint(cctx); err != nil && ctx.Err() == nil {
			s.log.Warn("store: WAL checkpoint failed", "err", err)
		}
		cancel()
	}
}

// Close implements registry.Store: it stops renewing leases, closes the
// database and releases the file lock.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.commit.Close()
		s.stop()
		<-s.done
		errs := []error{}
		for _, st := range s.stmts {
			errs = append(errs, st.Close())
		}
		s.closeErr = errors.Join(append(errs, s.r.Close(), s.w.Close(), s.lock.Close())...)
	})
	return s.closeErr
}
