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

	"modernc.org/sqlite" // registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"
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
	lock   locks
	id     string
	now    func() time.Time
	lease  time.Duration
	log    *slog.Logger
	hub    *store.Hub
	leases *store.Leases
	commit *store.Committer[*sql.Tx]
	stmts  map[string]*sql.Stmt // preparedSQL on w
	sql    *store.SQL
	store.Spills
	// dir is the directory of the database file, whose volume spills
	// leave room on (spillRoom).
	dir string

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
	lock, err := lockStore(abs)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	s := &Store{
		dir:    filepath.Dir(abs),
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
	s.sql = &store.SQL{
		Dialect: store.Dialect{
			Time: func(t time.Time) any { return micro(t) },
			// Every running call not owned by this store was left by a
			// process that is gone, since the file lock admits one process
			// at a time. ($3 goes unused: the driver binds parameters by
			// number and lets extra ones be.)
			Lapsed:     `(owner <> $2 OR expires_at <= $1)`,
			KeepLeased: true,
		},
		Read:  reader{runner{s.r}, s},
		Write: runner{s.w},
		InTx: func(ctx context.Context, fn func(tx store.Tx) error) error {
			return s.inTx(ctx, func(tx *sql.Tx) error { return fn(runner{tx}) })
		},
		Hub:    s.hub,
		Leases: s.leases,
		ID:     s.id,
		Lease:  s.lease,
		Now:    s.now,
	}
	s.Spills = s.sql.Spills()
	s.commit = store.NewCommitter(store.CommitOptions[*sql.Tx]{
		InTx: s.inTx,
		Exec: func(ctx context.Context, tx *sql.Tx, q string) error {
			_, err := s.stmt(ctx, tx, q).ExecContext(ctx)
			return err
		},
		Detached: true,
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

// classify marks err as registry.ErrStoreFull when SQLite ran out of disk
// space, and as registry.ErrStoreBroken when its files cannot be written
// until an operator acts: an I/O error (a failing disk, a file made
// immutable), a read-only, corrupted or foreign file. Retrying shortly
// cures neither; a busy or locked database is not marked.
func classify(err error) error {
	var se *sqlite.Error
	if !errors.As(err, &se) || errors.Is(err, registry.ErrStoreFull) || errors.Is(err, registry.ErrStoreBroken) {
		return err
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL:
		return fmt.Errorf("%w: %w", registry.ErrStoreFull, err)
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CANTOPEN:
		return broken{err}
	}
	return err
}

// broken is an error of a store that cannot take writes until an operator
// acts: errors.Is finds registry.ErrStoreBroken in it, and it reads as
// the error it wraps.
type broken struct{ err error }

func (b broken) Error() string   { return b.err.Error() }
func (b broken) Unwrap() []error { return []error{b.err, registry.ErrStoreBroken} }

// inTx runs fn in one write transaction.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	return classify(s.runTx(ctx, fn))
}

func (s *Store) runTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return s.movedOr(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return s.movedOr(err)
	}
	if err := s.moved(); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// moved reports that the database file at the store's path is no longer
// the one this store writes, or that its WAL is gone: deleted or replaced
// while the service ran. SQLite keeps writing to the open files, so
// without this check every write would succeed and be lost at the next
// start. Write transactions and the readiness probe fail instead.
func (s *Store) moved() error {
	db := s.lock[1] // the database file, open since Open (lockStore)
	held, err := db.Stat()
	if err == nil {
		var now os.FileInfo
		if now, err = os.Stat(db.Name()); err == nil && !os.SameFile(held, now) {
			err = fmt.Errorf("%s is another file now", db.Name())
		}
	}
	if err == nil {
		_, err = os.Stat(db.Name() + "-wal")
	}
	if err != nil {
		return broken{fmt.Errorf("sqlite store: the database file was deleted or replaced while the service ran (%w); nothing written now would survive a restart, so writes are refused: restart the service (it opens the file at %s, or creates it anew)", err, db.Name())}
	}
	return nil
}

// movedOr is the error of a write that failed: the file's deletion or
// replacement when that is what happened (the statements then fail in
// other ways first, such as "no such table" once the WAL that held the
// tables is gone), else err.
func (s *Store) movedOr(err error) error {
	if merr := s.moved(); merr != nil {
		return merr
	}
	return err
}

// failed marks the error of a statement that failed outside inTx as
// inTx marks a transaction's: a read's, or a group commit's write's (whose
// own error reaches its caller without passing there).
func (s *Store) failed(err error) error {
	if err == nil {
		return nil
	}
	return classify(s.movedOr(err))
}

// runner runs the shared statements (store.Tx) on the database or a
// transaction.
type runner struct {
	q interface {
		ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
		QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
		QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
	}
}

func (c runner) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	r, err := c.q.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, classify(err)
	}
	return r.RowsAffected()
}

func (c runner) QueryRow(ctx context.Context, q string, args ...any) store.Row {
	return c.q.QueryRowContext(ctx, q, args...)
}

func (c runner) Query(ctx context.Context, q string, args ...any) (store.Rows, error) {
	r, err := c.q.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows{r}, nil
}

type rows struct{ *sql.Rows }

// reader is runner on the read pool. When the file was deleted or
// replaced, a reader that opens the path afresh finds another database,
// often an empty one ("no such table"); its errors then say what
// happened, as the writes' do.
type reader struct {
	runner
	s *Store
}

func (r reader) QueryRow(ctx context.Context, q string, args ...any) store.Row {
	return readRow{r.runner.QueryRow(ctx, q, args...), r.s}
}

func (r reader) Query(ctx context.Context, q string, args ...any) (store.Rows, error) {
	rs, err := r.runner.Query(ctx, q, args...)
	if err != nil {
		return nil, r.s.failed(err)
	}
	return rs, nil
}

type readRow struct {
	store.Row
	s *Store
}

func (r readRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if err == nil || errors.Is(err, sql.ErrNoRows) {
		return err
	}
	return r.s.failed(err)
}

func (r rows) Close() { _ = r.Rows.Close() }

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
	return checkSchema(ctx, db)
}

// schemaTables are the tables the store uses, each with every column it
// reads or writes; a test holds them to what the migrations make.
var schemaTables = store.Tables(`id, at, pad`)

// checkSchema reads no row of every table and column the store uses, so
// that a database file missing one (dropped or renamed by hand, with the
// sqlite3 shell, after its migration) fails the start, naming it, rather
// than every statement on it once calls come.
func checkSchema(ctx context.Context, db interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}) error {
	for _, t := range schemaTables {
		if _, err := db.ExecContext(ctx, `SELECT `+t.Columns+` FROM `+t.Name+` LIMIT 0`); err != nil {
			var se *sqlite.Error
			if !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_ERROR {
				return fmt.Errorf("checking table %s: %w", t.Name, classify(err))
			}
			return fmt.Errorf("%w: table %s is not as the migrations made it (%w); it was dropped, renamed or changed by hand: "+
				"restore the database file from a backup, or move it away and let toolsvc create a new one",
				registry.ErrStoreBroken, t.Name, err)
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

// micro is the stored form of a time (store.Dialect.Time): microseconds
// since the epoch, 0 for the zero time.
func micro(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func (s *Store) clock() time.Time { return store.Micro(s.now()) }

// The statements of the group commit, prepared once on the writer
// connection: parsing them anew costs more than running them.
const (
	insertCallSQL = `INSERT INTO calls (` + store.CallColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (caller_id, tool_call_id) DO NOTHING`
	insertAuditSQL = `INSERT INTO audit (time, event, caller_id, tool_call_id, tool_name, tier, decision, rule,
		status, code, duration_ms, arguments_digest, issuer, subject) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// finishCallSQL ends a call, keeping its arguments as a done record does
// (store.KeptArguments).
var finishCallSQL = `UPDATE calls SET state = 'done', result = ?, owner = '', expires_at = 0, updated_at = ?, ` + store.KeptArguments + `
	WHERE caller_id = ? AND tool_call_id = ? AND (state = 'pending_approval' OR (state = 'running' AND owner = ?))`

var preparedSQL = []string{insertCallSQL, store.SelectCallSQL, finishCallSQL, insertAuditSQL, `SAVEPOINT op`, `RELEASE op`, `ROLLBACK TO op`}

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
	var (
		existing *registry.CallRecord
		created  bool
	)
	err = s.commit.DoOrSettle(ctx, len(c.Arguments)+len(result)+len(cctx)+256, func(ctx context.Context, tx *sql.Tx) error {
		existing, created = nil, false // set afresh when the write runs again
		r, err := s.stmt(ctx, tx, insertCallSQL).ExecContext(ctx,
			c.CallerID, c.ToolCallID, c.ToolName, c.ArgumentsDigest, []byte(c.Arguments), cctx,
			string(c.State), result, c.ApprovalID, c.Owner, micro(now), micro(now), micro(c.ExpiresAt), c.TraceID)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 1 {
			created = true
			return nil
		}
		existing, err = store.ScanCall(s.stmt(ctx, tx, store.SelectCallSQL).QueryRowContext(ctx, c.CallerID, c.ToolCallID))
		return err
	}, func(err error) {
		if err == nil && created && c.State == registry.CallRunning {
			s.forget(c.CallerID, c.ToolCallID)
		}
	})
	if err != nil {
		return nil, false, s.failed(err)
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
func (s *Store) FinishCall(ctx context.Context, callerID, toolCallID string, res *registry.Result, audit *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	if res == nil {
		return nil, false, errors.New("sqlite store: FinishCall needs a result")
	}
	key := store.Key(callerID, toolCallID)
	now := s.clock()
	w, err := store.NewFinish(res, audit, now)
	if err != nil {
		return nil, false, err
	}
	var (
		n, id int64
		rec   *registry.CallRecord
	)
	err = s.commit.Do(ctx, w.Size, func(ctx context.Context, tx *sql.Tx) error {
		n, id, rec = 0, 0, nil // set afresh when the write runs again
		r, err := s.stmt(ctx, tx, finishCallSQL).ExecContext(ctx, w.Result, micro(now), callerID, toolCallID, s.id)
		if err != nil {
			return err
		}
		if n, err = r.RowsAffected(); err != nil {
			return err
		}
		if n == 0 {
			if rec, err = store.ScanCall(s.stmt(ctx, tx, store.SelectCallSQL).QueryRowContext(ctx, callerID, toolCallID)); err != nil {
				return err
			}
			if w.Audit != nil {
				// The very result already stored is this write again, after
				// an earlier attempt committed without its caller learning
				// so: its audit entry is there too.
				var repeat bool
				if err := tx.QueryRowContext(ctx, `SELECT count(*) > 0 FROM calls WHERE caller_id = ? AND tool_call_id = ? AND state = 'done' AND result = ?`,
					callerID, toolCallID, w.Result).Scan(&repeat); err != nil || repeat {
					return err
				}
			}
		}
		if w.Audit != nil {
			id, err = s.insertAudit(ctx, tx, w.Audit)
		}
		return err
	})
	if err != nil {
		return nil, false, s.failed(err)
	}
	if audit != nil {
		audit.ID = id
	}
	// Only now is the result safe: until then the lease stays renewed, as
	// the caller holds the result and retries.
	s.leases.Remove(callerID, toolCallID)
	if n == 1 {
		s.hub.Notify(key)
	}
	return rec, n == 1, nil
}

// forget deletes the running record of a call that will not run: its
// BeginCall committed after the caller stopped waiting for it (the client
// left, or the store's deadline passed), so the call was answered as not
// run. Left in place, the record would hold every retry of the call until
// its lease lapsed, and then read E_INTERRUPTED, though the call never ran.
// The record is this process's own and was never leased: nothing runs it.
func (s *Store) forget(callerID, toolCallID string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.lease)
	defer cancel()
	err := s.commit.Do(ctx, 256, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM calls WHERE caller_id = ? AND tool_call_id = ? AND state = 'running' AND owner = ?`,
			callerID, toolCallID, s.id)
		return err
	})
	if err != nil {
		s.log.Warn("store: the running record of a call that did not run could not be removed; it reads E_INTERRUPTED once its lease lapses",
			"toolCallId", toolCallID, "error", err)
		return
	}
	s.hub.Notify(store.Key(callerID, toolCallID))
}

// GetCall implements registry.Store.
func (s *Store) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	return s.sql.GetCall(ctx, callerID, toolCallID)
}

// WaitCall implements registry.Store. Waiters are woken by this store's
// own writes at once (no other process writes the file), and poll with
// backoff up to once a second besides.
func (s *Store) WaitCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	return store.Wait(ctx, store.Key(callerID, toolCallID), store.WaitOptions{
		Hub: s.hub,
		Get: func(ctx context.Context) (*registry.CallRecord, error) { return s.GetCall(ctx, callerID, toolCallID) },
		Interrupt: func(ctx context.Context, rec *registry.CallRecord) error {
			_, err := s.sql.Interrupt(ctx, rec.CallerID, rec.ToolCallID)
			return err
		},
		Now: s.now,
	})
}

// InterruptRunning implements registry.Store: every running call not owned
// by this store was left by a process that is gone, since the file lock
// admits one process at a time; a call of this store is ended once its
// lease has lapsed and it no longer runs here.
func (s *Store) InterruptRunning(ctx context.Context) (int, error) {
	return s.sql.Interrupt(ctx, "", "")
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

// WithdrawCall implements registry.Store.
func (s *Store) WithdrawCall(ctx context.Context, callerID, toolCallID, approvalID string) (bool, error) {
	return s.sql.WithdrawCall(ctx, callerID, toolCallID, approvalID)
}

// CreateApproval implements registry.Store.
func (s *Store) CreateApproval(ctx context.Context, a *registry.Approval) error {
	now := s.clock()
	filed, err := store.NewApproval(a, now)
	if err != nil {
		return err
	}
	args := s.sql.InsertApprovalArgs(a, filed, now) // the committer reads its own copy
	err = s.commit.Do(ctx, len(a.Arguments)+len(filed)+512, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, store.InsertApprovalSQL, args...)
		return err
	})
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return fmt.Errorf("sqlite store: approval %s already exists", a.ID)
	}
	return s.failed(err)
}

// CreateApprovalWithin implements registry.PendingLimiter. Writes run one
// at a time on the one write connection, and a group commit's writes see
// those before them in its transaction, so the count and the insert of
// one filing see every other filing.
func (s *Store) CreateApprovalWithin(ctx context.Context, a *registry.Approval, max int) error {
	now := s.clock()
	filed, err := store.NewApproval(a, now)
	if err != nil {
		return err
	}
	args, caller := s.sql.InsertApprovalArgs(a, filed, now), a.CallerID // the committer reads its own copy
	err = s.commit.Do(ctx, len(a.Arguments)+len(filed)+512, func(ctx context.Context, tx *sql.Tx) error {
		return s.sql.InsertApprovalWithin(ctx, runner{tx}, caller, args, now, max)
	})
	if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
		return fmt.Errorf("sqlite store: approval %s already exists", a.ID)
	}
	return s.failed(err)
}

// RefileApproval implements registry.ApprovalRefiler. SQLite runs one
// write transaction at a time, so it needs no row lock.
func (s *Store) RefileApproval(ctx context.Context, a *registry.Approval) error {
	return s.sql.RefileApproval(ctx, a)
}

// GetApproval implements registry.Store.
func (s *Store) GetApproval(ctx context.Context, id string) (*registry.Approval, error) {
	return s.sql.GetApproval(ctx, id)
}

// ListApprovals implements registry.Store.
func (s *Store) ListApprovals(ctx context.Context, f registry.ApprovalFilter) ([]*registry.Approval, error) {
	return s.sql.ListApprovals(ctx, f)
}

// CountApprovals implements registry.Store.
func (s *Store) CountApprovals(ctx context.Context, f registry.ApprovalFilter) (int, error) {
	return s.sql.CountApprovals(ctx, f)
}

// DecideApproval implements registry.Store. The single writer connection
// runs the conditional update alone, so exactly one decision wins.
func (s *Store) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	return s.sql.DecideApproval(ctx, id, v, by, reason, now)
}

// AdoptDecision implements registry.DecisionAdopter.
func (s *Store) AdoptDecision(ctx context.Context, id, by string, decidedAt time.Time) (*registry.Approval, bool, error) {
	return s.sql.AdoptDecision(ctx, id, by, decidedAt)
}

// ExpireApprovals implements registry.Store.
func (s *Store) ExpireApprovals(ctx context.Context, now time.Time) (int, error) {
	return s.sql.ExpireApprovals(ctx, now)
}

// AppendAudit implements registry.Store.
func (s *Store) AppendAudit(ctx context.Context, e *registry.AuditEntry) error {
	store.NewAudit(e, s.clock())
	v := *e // the committer reads its own copy: a caller that gives up may retry with e
	var id int64
	err := s.commit.Do(ctx, 512, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		id, err = s.insertAudit(ctx, tx, &v)
		return err
	})
	if err != nil {
		return s.failed(err)
	}
	e.ID = id
	return nil
}

// QueueAudit implements registry.AuditQueuer.
func (s *Store) QueueAudit(ctx context.Context, e *registry.AuditEntry, done func(error)) {
	store.NewAudit(e, s.clock())
	v := *e // the committer reads its own copy, as in AppendAudit
	var id int64
	s.commit.Queue(ctx, 512, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		id, err = s.insertAudit(ctx, tx, &v)
		return err
	}, func(err error) {
		if err == nil {
			e.ID = id
		}
		done(s.failed(err))
	})
}

// insertAudit appends v in tx and returns its id.
func (s *Store) insertAudit(ctx context.Context, tx *sql.Tx, v *registry.AuditEntry) (int64, error) {
	r, err := s.stmt(ctx, tx, insertAuditSQL).ExecContext(ctx,
		micro(v.Time), v.Event, v.CallerID, v.ToolCallID, v.ToolName, string(v.Tier), string(v.Decision), v.Rule,
		string(v.Status), string(v.Code), v.DurationMs, v.ArgumentsDigest, v.Issuer, v.Subject)
	if err != nil {
		return 0, err
	}
	return r.LastInsertId()
}

// ListAudit implements registry.Store.
func (s *Store) ListAudit(ctx context.Context, f registry.AuditFilter) ([]*registry.AuditEntry, error) {
	return s.sql.ListAudit(ctx, f)
}

// expireBatch is how many rows DeleteExpired deletes in one transaction.
// The group commit waits for the write connection while one runs: under
// load, a sweep of everything expired at once (400,000 rows) held calls for
// 1.3 s, where batches let their commits in between.
const expireBatch = 2000

// DeleteExpired implements registry.Store, in transactions of at most
// expireBatch rows each.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time) (int64, error) {
	b := micro(before)
	var total int64
	for _, q := range []string{
		`DELETE FROM calls WHERE (caller_id, tool_call_id) IN (SELECT caller_id, tool_call_id FROM calls
			WHERE (state = 'done' AND updated_at < ?1) OR (state = 'pending_approval' AND expires_at < ?1) LIMIT ?2)`,
		`DELETE FROM approvals WHERE id IN (SELECT id FROM approvals
			WHERE (status <> 'pending' AND updated_at < ?1) OR (status = 'pending' AND expires_at < ?1) LIMIT ?2)`,
		`DELETE FROM audit WHERE id IN (SELECT id FROM audit WHERE time < ?1 LIMIT ?2)`,
		`DELETE FROM revoked_sessions WHERE id IN (SELECT id FROM revoked_sessions WHERE expires_at < ?1 LIMIT ?2)`,
	} {
		for {
			r, err := s.w.ExecContext(ctx, q, b, expireBatch)
			if err != nil {
				return total, err
			}
			n, _ := r.RowsAffected()
			total += n
			if n < expireBatch {
				break
			}
		}
	}
	return total, nil
}

// RevokeSession implements registry.Store.
func (s *Store) RevokeSession(ctx context.Context, id string, until time.Time) error {
	return s.sql.RevokeSession(ctx, id, until)
}

// SessionRevoked implements registry.Store.
func (s *Store) SessionRevoked(ctx context.Context, id string) (bool, error) {
	return s.sql.SessionRevoked(ctx, id)
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
	if err := s.moved(); err != nil {
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

// locks are the files whose flock keeps a second process out of a store.
type locks []*os.File

// lockStore locks the store's lock file and its database file, so that
// removing the lock file behind a running process does not let a second
// one in. SQLite's own locks are fcntl locks, which flock leaves alone.
// But closing any descriptor of the database drops the process's fcntl
// locks on it, so the one taken here must stay open until SQLite's
// connections are closed: Close closes it last.
func lockStore(db string) (locks, error) {
	var l locks
	for _, name := range []string{db + ".lock", db} {
		f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o600)
		if err == nil {
			l = append(l, f)
			err = lockFile(f)
		}
		if err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

// Close releases the locks.
func (l locks) Close() error {
	var errs []error
	for _, f := range l {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
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
