// Package postgres is the registry.Store that several replicas share: a
// PostgreSQL database reached through a pgx connection pool. Races between
// replicas are settled by the database: BeginCall is an INSERT … ON
// CONFLICT DO NOTHING, every state change is an UPDATE conditional on the
// state it leaves, and approvals move with UPDATE … WHERE status =
// 'pending' RETURNING. The writes of calls (BeginCall, FinishCall,
// AppendAudit) go through a group committer (store.Committer): the ones
// waiting are sent in one round trip and run as one transaction. Waiters in
// other replicas are woken with LISTEN/NOTIFY, and poll with backoff
// besides. Calls left running by a replica that died are found by their lease: the owning store renews the
// leases of its running calls while its process lives.
package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Options configure the PostgreSQL store.
type Options struct {
	// URL is the connection string (postgres://… or key=value), required.
	URL string
	// Schema, when set, is created if missing and used as the search_path
	// of every connection, so several deployments (or test runs) can share
	// a database.
	Schema string
	// MaxConns bounds the pool; 0 keeps the URL's pool_max_conns, or
	// pgx's default (the larger of 4 and the number of CPUs).
	MaxConns int32
	// ConnectTimeout bounds the making of each new connection, the pool's
	// and the notification listener's, when the URL sets no
	// connect_timeout; 0 means 5s. The main program passes
	// TOOLSVC_STORE_TIMEOUT. Without it, the pool made its connections
	// with pgx's own bound, 2 minutes, apart from the caller's deadline:
	// a few started while the database did not answer filled the pool,
	// and the service answered 503 for up to 2 minutes after the
	// database was back; the listener's reconnection had no bound at all.
	ConnectTimeout time.Duration
	// InstanceID names this replica as the owner of the calls it runs; ""
	// picks a random one at every Open. Set it to a name that is stable
	// across restarts (a StatefulSet pod name) only if no two live replicas
	// can share it: then InterruptRunning also ends, at once, the calls an
	// earlier life of this replica left running.
	InstanceID string
	// Lease is how long a running call stays claimed without renewal; 0
	// means 30s. The store renews its calls every Lease/3, and every
	// second after a renewal failed. A call whose replica died is
	// interrupted once its lease has lapsed; replicas' clocks must agree
	// to well within a lease. The notification listener's connection is
	// checked every Lease/3 too.
	Lease time.Duration
	// MaxPoll is the longest pause between two reads of a waited call
	// besides notifications; 0 means 2s.
	MaxPoll time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Logger receives listener and lease renewal failures; nil discards.
	Logger *slog.Logger
	// CommitWindow, CommitMaxOps and CommitMaxBytes configure the group
	// commit of calls' writes (see store.CommitOptions); zero values are
	// its defaults.
	CommitWindow                 time.Duration
	CommitMaxOps, CommitMaxBytes int
}

// Store is the PostgreSQL store. It implements registry.Store.
type Store struct {
	pool    *pgxpool.Pool
	connCfg *pgx.ConnConfig
	// dial bounds the making of a connection, and the listener's LISTEN
	// and checks.
	dial    time.Duration
	channel string
	id      string
	opened  time.Time
	now     func() time.Time
	lease   time.Duration
	maxPoll time.Duration
	log     *slog.Logger
	hub     *store.Hub
	leases  *store.Leases
	// renewNow asks for a renewal of the leases at once.
	renewNow chan struct{}
	commit   *store.Committer[*pgx.Batch]
	// doubts are running records whose insert may have committed although
	// BeginCall failed; see withdrawDoubts.
	doubts chan doubt
	sql    *store.SQL
	store.Spills

	notifications atomic.Uint64

	stop      context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

var _ registry.Store = (*Store)(nil)

// plainIdentifier reports whether s is a PostgreSQL identifier that needs
// no quoting: a letter or _, then letters, digits or _, at most 63 bytes.
func plainIdentifier(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Open connects, applies pending migrations under an advisory lock (so
// replicas starting together do not race), and starts the notification
// listener and lease renewal. The main program should call
// InterruptRunning after Open, and run store.RunRetention beside it.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.URL == "" {
		return nil, errors.New("postgres store: no URL")
	}
	cfg, err := pgxpool.ParseConfig(o.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if o.Schema != "" {
		if !plainIdentifier(o.Schema) {
			return nil, fmt.Errorf("postgres store: schema %q must be a plain identifier (letters, digits, _; at most 63)", o.Schema)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = o.Schema
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = cmp.Or(o.ConnectTimeout, defaultConnectTimeout)
	}
	s := &Store{
		connCfg:  cfg.ConnConfig.Copy(),
		dial:     cfg.ConnConfig.ConnectTimeout,
		id:       o.InstanceID,
		now:      o.Now,
		lease:    cmp.Or(o.Lease, 30*time.Second),
		maxPoll:  cmp.Or(o.MaxPoll, 2*time.Second),
		log:      cmp.Or(o.Logger, slog.New(slog.DiscardHandler)),
		hub:      store.NewHub(),
		leases:   store.NewLeases(),
		doubts:   make(chan doubt, maxDoubts),
		renewNow: make(chan struct{}, 1),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.id == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		s.id = "pg-" + hex.EncodeToString(b[:])
	}
	s.opened = s.clock()
	s.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	if err := s.migrate(ctx, o.Schema); err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("postgres store: %w", err)
	}
	var schema *string
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil || schema == nil {
		s.pool.Close()
		return nil, fmt.Errorf("postgres store: no current schema (check search_path): %v", err)
	}
	sum := sha256.Sum256([]byte(*schema))
	s.channel = "toolsvc_calls_" + hex.EncodeToString(sum[:8])
	// The first LISTEN happens before Open returns, so notifications reach
	// this store from the moment it is in use.
	conn, err := s.subscribe(ctx)
	if err != nil {
		s.pool.Close()
		return nil, fmt.Errorf("postgres store: listening for notifications: %w", err)
	}
	s.sql = &store.SQL{
		Dialect: store.Dialect{
			Time:     pgTime,
			Announce: s.announce,
			// Its lease has lapsed, or this replica (under a stable
			// InstanceID) started it in an earlier life.
			Lapsed: `(expires_at <= $1 OR (owner = $2 AND updated_at < $3))`,
			// Not a call this process runs, or holds the result of, however
			// late its lease: after an outage of the database longer than
			// the lease, this replica's own waiters, retries and sweep
			// ended calls it was still running, and their answers then
			// said E_INTERRUPTED. The renewal catches up once the database
			// answers; until then only other replicas may end them.
			KeepLeased: true,
			ForUpdate:  " FOR UPDATE",
		},
		Read:  runner{s.pool},
		Write: runner{s.pool},
		InTx: func(ctx context.Context, fn func(tx store.Tx) error) error {
			return classify(pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return fn(runner{tx}) }))
		},
		Hub:    s.hub,
		Leases: s.leases,
		ID:     s.id,
		Opened: s.opened,
		Lease:  s.lease,
		Now:    s.now,
	}
	s.Spills = s.sql.Spills()
	s.commit = store.NewCommitter(store.CommitOptions[*pgx.Batch]{
		InTx: s.inTx,
		// No savepoints: the writes of a transaction are sent in one
		// round trip. When the database refuses one, nothing of the
		// transaction was committed, and each write runs again alone.
		Alone: func(err error) bool {
			var pe *pgconn.PgError
			return errors.As(err, &pe)
		},
		MaxOps:   o.CommitMaxOps,
		MaxBytes: o.CommitMaxBytes,
		Window:   o.CommitWindow,
	})
	bg, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		s.listen(bg, conn)
	}()
	go func() {
		defer s.wg.Done()
		s.withdrawDoubts(bg)
	}()
	go func() {
		defer s.wg.Done()
		s.renewLeases(bg)
	}()
	return s, nil
}

// defaultConnectTimeout is Options.ConnectTimeout's default, the default
// of TOOLSVC_STORE_TIMEOUT.
const defaultConnectTimeout = 5 * time.Second

// inTx is the group commit's transaction: fn queues the statements of
// the writes, and they are sent in one round trip, which PostgreSQL runs
// as one implicit transaction (committed at the batch's Sync, or rolled
// back whole when a statement fails); their callbacks run as the results
// arrive. Close returns nil only once the commit is acknowledged.
func (s *Store) inTx(ctx context.Context, fn func(b *pgx.Batch) error) error {
	b := &pgx.Batch{}
	if err := fn(b); err != nil {
		return err
	}
	return classify(s.pool.SendBatch(ctx, b).Close())
}

// full marks err as registry.ErrStoreFull when PostgreSQL ran out of disk
// space (SQLSTATE 53100, disk_full).
func full(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "53100" && !errors.Is(err, registry.ErrStoreFull) {
		return fmt.Errorf("%w: %w", registry.ErrStoreFull, err)
	}
	return err
}

// classify is full(err), and marks err as registry.ErrStoreBroken when
// PostgreSQL refuses the statement in a way only an operator can cure
// (refused): retrying shortly does not help, the answer says so with a
// longer Retry-After, and the log has a warning per call, not an error.
func classify(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || errors.Is(err, registry.ErrStoreFull) || errors.Is(err, registry.ErrStoreBroken) {
		return err
	}
	if why := refused(pe.Code); why != "" {
		return fmt.Errorf("%w (%s): %w", registry.ErrStoreBroken, why, err)
	}
	return full(err)
}

// refused says why a statement that failed with SQLSTATE code cannot
// succeed until an operator acts, or returns "" when a retry may: a
// table, column or privilege the program needs is missing (class 42: a
// table dropped or renamed, a role without the grants), the database
// takes no writes (a standby, default_transaction_read_only), the login,
// the database or the schema is gone (class 28, 3D000, 3F000), or the
// database reports corruption or an I/O error of its own. Not among
// them: a statement cancelled (57014: statement_timeout, which a slow
// statement under load also reaches, or pg_cancel_backend), a lock not
// taken in time (55P03, lock_timeout), a connection ended by the server
// (class 57P), too many connections or a deadlock (53300, 40P01): the
// next attempt may pass, and readiness reports them once they repeat
// (store.Failing).
func refused(code string) string {
	switch {
	case strings.HasPrefix(code, "42"):
		return "the database refuses toolsvc's statements: a table, column or privilege they need is missing"
	case code == "25006":
		return "the database takes no writes (read-only)"
	case strings.HasPrefix(code, "28"), code == "3D000", code == "3F000":
		return "the database refuses toolsvc's login, or its database or schema is gone"
	case code == "XX001", code == "XX002", code == "58030":
		return "the database reports corrupted data or an I/O error"
	}
	return ""
}

// runner runs the shared statements (store.Tx) on the pool or a
// transaction.
type runner struct {
	q interface {
		Exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error)
		Query(ctx context.Context, q string, args ...any) (pgx.Rows, error)
		QueryRow(ctx context.Context, q string, args ...any) pgx.Row
	}
}

func (c runner) Exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, q, args...)
	return tag.RowsAffected(), classify(err)
}

func (c runner) QueryRow(ctx context.Context, q string, args ...any) store.Row {
	return row{c.q.QueryRow(ctx, q, args...)}
}

func (c runner) Query(ctx context.Context, q string, args ...any) (store.Rows, error) {
	r, err := c.q.Query(ctx, q, args...)
	if err != nil {
		return nil, classify(err)
	}
	return rows{r}, nil
}

// row and rows classify the errors of reads as runner.Exec does those of
// writes.
type (
	row  struct{ pgx.Row }
	rows struct{ pgx.Rows }
)

func (r row) Scan(dest ...any) error  { return classify(r.Row.Scan(dest...)) }
func (r rows) Scan(dest ...any) error { return classify(r.Rows.Scan(dest...)) }
func (r rows) Err() error             { return classify(r.Rows.Err()) }

// announce notifies the store's channel of keys at tx's commit
// (store.Dialect.Announce).
func (s *Store) announce(ctx context.Context, tx store.Tx, keys []string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, k) FROM unnest($2::text[]) AS k`, s.channel, keys)
	return err
}

// CommitStats returns how many group-commit transactions the store has
// run and how many writes they held.
func (s *Store) CommitStats() (txs, writes uint64) { return s.commit.Stats() }

// InstanceID returns the id this store records as the owner of the calls
// it runs.
func (s *Store) InstanceID() string { return s.id }

func lockKey(schema string) int64 {
	sum := sha256.Sum256([]byte("toolsvc.migrate\x00" + schema))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// migrate applies pending migrations on one connection holding a
// session-level advisory lock, each migration in its own transaction.
func (s *Store) migrate(ctx context.Context, schema string) error {
	ms, err := store.ReadMigrations(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	key := lockKey(schema)
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		conn.Release()
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	defer func() {
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, key); err != nil {
			// Closing the session is what frees a session lock for sure.
			_ = conn.Hijack().Close(context.Background())
			return
		}
		conn.Release()
	}()
	if schema != "" {
		if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
			return fmt.Errorf("creating schema %s: %w", schema, err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return err
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return err
	}
	pending, err := store.Pending(ms, applied)
	if err != nil {
		return err
	}
	for _, m := range pending {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return checkSchema(ctx, conn)
}

// schemaTables are the tables the store uses, each with every column it
// reads or writes; a test holds them to what the migrations make.
var schemaTables = store.Tables(`instance, at`)

// checkSchema reads no row of every table and column the store uses, so
// that a schema missing one (dropped or renamed by hand after its
// migration, or not readable by the role) fails the start, naming it.
// Before, the service started ready, and the statements on the missing
// table failed for good once calls came: a side-effecting call ran and
// its result could never be recorded when the audit table was gone.
func checkSchema(ctx context.Context, q interface {
	Exec(ctx context.Context, q string, args ...any) (pgconn.CommandTag, error)
}) error {
	for _, t := range schemaTables {
		if _, err := q.Exec(ctx, `SELECT `+t.Columns+` FROM `+t.Name+` LIMIT 0`); err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || !strings.HasPrefix(pe.Code, "42") {
				return fmt.Errorf("checking table %s: %w", t.Name, err)
			}
			return fmt.Errorf("%w: table %s is not as the migrations made it (%w); it was dropped, renamed or changed by hand, "+
				"or the role lacks the privilege to read it: restore it (from a backup, or with the migration that made it) "+
				"or grant the privilege, or use a new TOOLSVC_STORE_SCHEMA, which toolsvc migrates afresh",
				registry.ErrStoreBroken, t.Name, err)
		}
	}
	return nil
}

// probeSQL writes this instance's probe row ($1, at $2) in a statement
// that reads no row of every table and column the store uses, as
// checkSchema does: the probe fails while one is missing, or locked
// (ACCESS EXCLUSIVE) beyond the probe's deadline. Without it, a table
// dropped while the service ran failed every statement on it for good
// while /readyz answered ready: with the audit table gone each call's
// running record was written, which ended the run of failed writes that
// store.Failing counts, and its result could not be.
var probeSQL = func() string {
	b := []byte(`INSERT INTO probe (instance, at) SELECT $1::text, $2::timestamptz WHERE NOT EXISTS (SELECT 1 FROM `)
	for i, t := range schemaTables {
		if i > 0 {
			b = append(b, ` CROSS JOIN `...)
		}
		b = fmt.Appendf(b, `(SELECT %s FROM %s LIMIT 0) AS %s`, t.Columns, t.Name, t.Name)
	}
	return string(append(b, `) ON CONFLICT (instance) DO UPDATE SET at = excluded.at`...))
}()

// listen keeps one connection LISTENing on the store's channel and wakes
// local waiters for every notification; after each (re)connection it wakes
// them all, since notifications sent meanwhile are lost. A lost connection
// may mean the database is gone a while: the leases are renewed at once,
// which retries every second until it answers again (renewLeases).
func (s *Store) listen(ctx context.Context, conn *pgx.Conn) {
	backoff := 100 * time.Millisecond
	for {
		err := s.receive(ctx, conn)
		conn.Close(context.Background())
		select {
		case s.renewNow <- struct{}{}:
		default:
		}
		for {
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("store: notification listener lost its connection; reconnecting", "err", err, "retryIn", backoff.String())
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			if conn, err = s.subscribe(ctx); err == nil {
				break
			}
		}
		backoff = 100 * time.Millisecond
		// Notifications sent while no connection listened are lost.
		s.hub.NotifyAll()
	}
}

// subscribe opens a connection outside the pool and LISTENs on it. The
// connection's making is bounded by its ConnectTimeout, and the LISTEN as
// long: a database that accepted the connection and never answered held
// the listener's reconnection for good, and notifications from other
// replicas stopped.
func (s *Store) subscribe(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, s.connCfg.Copy())
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, s.dial)
	defer cancel()
	if _, err := conn.Exec(lctx, `LISTEN `+s.channel); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// receive wakes local waiters for every notification until the connection
// fails or ctx ends. A connection quiet for a third of a lease is pinged:
// one the database no longer answers on (a partition, a proxy that holds
// it open) reports nothing by itself, and notifications would stop.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, s.lease/3)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			pctx, cancel := context.WithTimeout(ctx, s.dial)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return fmt.Errorf("no answer to a ping within %s: %w", s.dial, err)
			}
			continue
		}
		s.notifications.Add(1)
		s.hub.Notify(n.Payload)
	}
}

// Notifications returns how many notifications this store has received
// from the database (its own included), for tests and metrics.
func (s *Store) Notifications() uint64 { return s.notifications.Load() }

func (s *Store) clock() time.Time { return store.Micro(s.now()) }

// pgTime is the stored form of a time (store.Dialect.Time): NULL for the
// zero time.
func pgTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return store.Micro(t)
}

// BeginCall implements registry.Store with INSERT … ON CONFLICT DO
// NOTHING, in a group commit with other calls' writes: of concurrent
// inserts on one key exactly one succeeds, and the others wait for it to
// commit and then read its record.
func (s *Store) BeginCall(ctx context.Context, rec *registry.CallRecord) (*registry.CallRecord, bool, error) {
	if err := store.CheckBegin(rec); err != nil {
		return nil, false, err
	}
	for attempt := 0; ; attempt++ {
		now := s.clock()
		c, result, err := store.NewCall(rec, now, s.id, s.lease)
		if err != nil {
			return nil, false, err
		}
		cctx := store.EncodeContext(c.Context)
		var (
			created  bool
			existing *registry.CallRecord
			sent     atomic.Bool // the insert was queued into a batch
		)
		// One statement: the insert, or the record in its way when an
		// earlier statement (of this transaction too) wrote it. A record
		// committed by another transaction after this statement began is
		// not in its snapshot: then it is read after the commit.
		err = s.commit.DoOrSettle(ctx, len(c.Arguments)+len(result)+len(cctx)+256, func(ctx context.Context, b *pgx.Batch) error {
			created, existing = false, nil
			sent.Store(true)
			b.Queue(`WITH ins AS (
					INSERT INTO calls (`+store.CallColumns+`)
					VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13)
					ON CONFLICT (caller_id, tool_call_id) DO NOTHING RETURNING 1)
				SELECT true, `+nullColumns+` FROM ins
				UNION ALL SELECT false, `+store.CallColumns+` FROM calls
					WHERE caller_id = $1 AND tool_call_id = $2 AND NOT EXISTS (SELECT 1 FROM ins)`,
				c.CallerID, c.ToolCallID, c.ToolName, c.ArgumentsDigest, []byte(c.Arguments), cctx,
				string(c.State), result, c.ApprovalID, c.Owner, now, pgTime(c.ExpiresAt), c.TraceID).QueryRow(func(row pgx.Row) error {
				var err error
				created, existing, err = scanBegin(row)
				return err
			})
			return nil
		}, func(err error) {
			if err == nil && created && c.State == registry.CallRunning {
				s.forget(c.CallerID, c.ToolCallID)
			}
		})
		if err != nil {
			var pe *pgconn.PgError
			if c.State == registry.CallRunning && sent.Load() && !errors.As(err, &pe) {
				// The batch was sent and its answer lost (a deadline, a
				// cut connection): the record may have committed, and
				// would hold every retry of a call that did not run
				// until its lease lapsed, then read E_INTERRUPTED.
				s.doubt(doubt{callerID: c.CallerID, toolCallID: c.ToolCallID, createdAt: now, until: c.ExpiresAt})
			}
			return nil, false, err
		}
		if created {
			if c.State == registry.CallRunning {
				s.leases.Add(c.CallerID, c.ToolCallID)
			}
			return &c, true, nil
		}
		if existing == nil {
			existing, err = s.sql.Call(ctx, s.sql.Read, c.CallerID, c.ToolCallID)
		}
		if errors.Is(err, registry.ErrNotFound) && attempt < 3 {
			continue // deleted by retention between the two statements
		}
		if err != nil {
			return nil, false, err
		}
		return store.EffectiveCall(existing, now), false, nil
	}
}

// nullColumns fills the columns of store.CallColumns in the row that says the
// insert took place (its record is the one BeginCall inserted).
const nullColumns = `NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL`

// scanBegin reads BeginCall's row: created, or the record in the way, or
// neither (no row: the record is not in the statement's snapshot).
func scanBegin(row pgx.Row) (bool, *registry.CallRecord, error) {
	var (
		created                                                                   bool
		c                                                                         registry.CallRecord
		callerID, toolCallID, toolName, digest, state, approvalID, owner, traceID *string
		args, ctxJSON, result                                                     []byte
	)
	err := row.Scan(&created, &callerID, &toolCallID, &toolName, &digest, &args, &ctxJSON, &state, &result,
		&approvalID, &owner, store.ScanTime(&c.CreatedAt), store.ScanTime(&c.UpdatedAt), store.ScanTime(&c.ExpiresAt), &traceID)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, nil
	}
	if err != nil || created {
		return created, nil, err
	}
	c.CallerID, c.ToolCallID, c.ToolName, c.ArgumentsDigest = *callerID, *toolCallID, *toolName, *digest
	c.State, c.ApprovalID, c.Owner, c.TraceID = registry.CallState(*state), *approvalID, *owner, *traceID
	if err := store.DecodeCall(&c, args, ctxJSON, result); err != nil {
		return false, nil, err
	}
	return false, &c, nil
}

// FinishCall implements registry.Store, in a group commit with other
// calls' writes; the update and its notification are one statement.
func (s *Store) FinishCall(ctx context.Context, callerID, toolCallID string, res *registry.Result, audit *registry.AuditEntry) (*registry.CallRecord, bool, error) {
	if res == nil {
		return nil, false, errors.New("postgres store: FinishCall needs a result")
	}
	key := store.Key(callerID, toolCallID)
	now := s.clock()
	w, err := store.NewFinish(res, audit, now)
	if err != nil {
		return nil, false, err
	}
	var (
		stored bool
		id     int64
	)
	err = s.commit.Do(ctx, w.Size, func(ctx context.Context, b *pgx.Batch) error {
		stored, id = false, 0 // a write may run again alone after its group failed
		b.Queue(finishCallSQL,
			w.Result, now, callerID, toolCallID, s.id, s.channel, key).QueryRow(func(row pgx.Row) error {
			var n int
			err := row.Scan(&n)
			stored = n == 1
			return err
		})
		if w.Audit != nil {
			// Only beside a record: FinishCall of an unknown call writes
			// nothing (ErrNotFound below). Nor when the record holds this
			// very result from an earlier commit (another updated_at than
			// this statement's): that is this write again, after an attempt
			// that committed without its caller learning so, and its audit
			// entry is there too.
			b.Queue(insertAuditSQL+` SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14
				WHERE EXISTS (SELECT 1 FROM calls WHERE caller_id = $3 AND tool_call_id = $4
					AND NOT (state = 'done' AND result = $15 AND updated_at <> $16)) RETURNING id`,
				append(auditArgs(w.Audit), w.Result, now)...).QueryRow(func(row pgx.Row) error {
				if err := row.Scan(&id); !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	if audit != nil {
		audit.ID = id
	}
	if stored {
		// Only now is the result safe: until then the lease stays renewed,
		// as the caller holds the result and retries.
		s.leases.Remove(callerID, toolCallID)
		s.hub.Notify(key)
		return nil, true, nil
	}
	rec, err := s.sql.Call(ctx, s.sql.Read, callerID, toolCallID)
	if err != nil {
		return nil, false, err
	}
	s.leases.Remove(callerID, toolCallID)
	return rec, false, nil
}

// GetCall implements registry.Store.
func (s *Store) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	return s.sql.GetCall(ctx, callerID, toolCallID)
}

// WaitCall implements registry.Store. Waiters wake on NOTIFY from any
// replica, on this store's own writes, when the call's lease would lapse,
// and otherwise poll with backoff up to Options.MaxPoll.
func (s *Store) WaitCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	return store.Wait(ctx, store.Key(callerID, toolCallID), store.WaitOptions{
		Hub: s.hub,
		Get: func(ctx context.Context) (*registry.CallRecord, error) { return s.GetCall(ctx, callerID, toolCallID) },
		Interrupt: func(ctx context.Context, rec *registry.CallRecord) error {
			_, err := s.sql.Interrupt(ctx, rec.CallerID, rec.ToolCallID)
			return err
		},
		Now:     s.now,
		MaxPoll: s.maxPoll,
	})
}

// InterruptRunning implements registry.Store: it ends running calls whose
// lease has lapsed (their replica stopped renewing it), and those an
// earlier life of this replica left behind.
func (s *Store) InterruptRunning(ctx context.Context) (int, error) {
	return s.sql.Interrupt(ctx, "", "")
}

// forget deletes the running record of a call that will not run: its
// BeginCall committed after the caller stopped waiting for it (the client
// left, or the store's deadline passed), so the call was answered as not
// run. Left in place, the record would hold every retry of the call until
// its lease lapsed, and then read E_INTERRUPTED, though the call never ran.
// The record is this replica's own and was never leased: nothing runs it.
func (s *Store) forget(callerID, toolCallID string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.lease)
	defer cancel()
	key := store.Key(callerID, toolCallID)
	err := s.commit.Do(ctx, 256, func(ctx context.Context, b *pgx.Batch) error {
		b.Queue(`WITH d AS (
				DELETE FROM calls WHERE caller_id = $1 AND tool_call_id = $2
					AND CASE state WHEN 'running' THEN owner = $3 ELSE false END
				RETURNING 1)
			SELECT count(*) FROM d CROSS JOIN LATERAL (SELECT pg_notify($4, $5)) AS n`,
			callerID, toolCallID, s.id, s.channel, key)
		return nil
	})
	if err != nil {
		s.log.Warn("store: the running record of a call that did not run could not be removed; it reads E_INTERRUPTED once its lease lapses",
			"toolCallId", toolCallID, "error", err)
	}
}

// doubt is the running record of one BeginCall that failed after its
// insert was sent: it may have committed or not. createdAt tells it from
// a record a later attempt of the same call wrote; until is its lease.
type doubt struct {
	callerID, toolCallID string
	createdAt, until     time.Time
}

// maxDoubts bounds the records waiting to be handed to withdrawDoubts
// and, apart, those it holds; beyond them a doubtful record is left to
// lapse (E_INTERRUPTED), as before.
const maxDoubts = 4096

// doubt hands d to withdrawDoubts, or logs that it cannot.
func (s *Store) doubt(d doubt) {
	select {
	case s.doubts <- d:
	default:
		s.log.Warn("store: too many call records of unknown outcome to withdraw; this one reads E_INTERRUPTED once its lease lapses",
			"toolCallId", d.toolCallID, "held", maxDoubts)
	}
}

// withdrawDoubts deletes the running records of the BeginCalls that
// failed after their insert was sent (the database answered too late,
// or the connection was cut): such a call answered 503 and did not run,
// so a retry must run it, not wait on a record nobody renews and then
// read E_INTERRUPTED. A record goes only while it is the one that attempt
// wrote (its created_at), still running under this instance and within
// its lease. It is tried at once, and again every lease/3 while its lease
// lasts, since the insert may commit after the first try.
func (s *Store) withdrawDoubts(ctx context.Context) {
	every := s.lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	var pending []doubt
	for {
		in := s.doubts
		if len(pending) >= maxDoubts {
			in = nil // full: what comes waits in the channel, or is left
		}
		select {
		case <-ctx.Done():
			return
		case d := <-in:
			pending = append(pending, d)
			for more := true; more && len(pending) < maxDoubts; {
				select {
				case d := <-s.doubts:
					pending = append(pending, d)
				default:
					more = false
				}
			}
		case <-t.C:
		}
		now := s.clock()
		pending = slices.DeleteFunc(pending, func(d doubt) bool { return !now.Before(d.until) })
		if len(pending) == 0 {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, every)
		gone, err := s.withdraw(dctx, pending, now)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("store: withdrawing the records of calls that did not run failed; retrying", "records", len(pending), "err", err)
			}
			continue
		}
		pending = slices.DeleteFunc(pending, func(d doubt) bool {
			_, ok := gone[store.Key(d.callerID, d.toolCallID)]
			return ok
		})
	}
}

// withdraw deletes the records of ds that are still the ones their
// attempts wrote, and returns the keys of those it deleted.
func (s *Store) withdraw(ctx context.Context, ds []doubt, now time.Time) (map[string]struct{}, error) {
	callers, ids, keys := make([]string, len(ds)), make([]string, len(ds)), make([]string, len(ds))
	created := make([]time.Time, len(ds))
	for i, d := range ds {
		callers[i], ids[i], created[i], keys[i] = d.callerID, d.toolCallID, d.createdAt, store.Key(d.callerID, d.toolCallID)
	}
	rows, err := s.pool.Query(ctx, withdrawDoubtsSQL, callers, ids, created, keys, s.id, now, s.channel)
	if err != nil {
		return nil, err
	}
	gone := make(map[string]struct{})
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return nil, err
		}
		gone[k] = struct{}{}
	}
	return gone, rows.Err()
}

// The statements on records named by key test their state and owner
// inside a CASE, which no index can serve, so that PostgreSQL finds the
// records by the primary key alone. Written as plain conditions, they let
// the planner combine the key with the partial indexes on running and
// pending records (calls_owner, calls_pending_expires), as it did while
// the table had no statistics yet (a new schema, or autovacuum off): every
// call then read all of calls_owner, whose one key (this instance) gains
// an entry per call and loses the dead ones only to VACUUM, since bitmap
// scans never mark them dead. Side-effecting calls fell from ~5,500 to
// ~300 a second within a minute of load.
const (
	// withdrawDoubtsSQL deletes the running records of the keys ($1, $2)
	// that this instance ($5) wrote at the times in $3 and whose lease has
	// not lapsed at $6, notifying the waiters of each ($4 on $7).
	withdrawDoubtsSQL = `WITH d AS (
		DELETE FROM calls USING unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[]) AS k(caller_id, tool_call_id, created_at, key)
		WHERE calls.caller_id = k.caller_id AND calls.tool_call_id = k.tool_call_id
			AND CASE calls.state WHEN 'running' THEN calls.owner = $5 AND calls.created_at = k.created_at AND calls.expires_at > $6 ELSE false END
		RETURNING k.key)
	SELECT key FROM d CROSS JOIN LATERAL (SELECT pg_notify($7, key)) AS n`

	// renewSQL extends the leases of the running records of the keys in
	// $3 and $4 that this instance ($2) owns.
	renewSQL = `UPDATE calls SET expires_at = $1
		FROM unnest($3::text[], $4::text[]) AS k(caller_id, tool_call_id)
		WHERE calls.caller_id = k.caller_id AND calls.tool_call_id = k.tool_call_id
			AND CASE calls.state WHEN 'running' THEN calls.owner = $2 ELSE false END`
)

// finishCallSQL records a result over a running record this instance
// owns, or a pending one, keeping its arguments as a done record does
// (store.KeptArguments), and notifies the waiters of the key.
var finishCallSQL = `WITH u AS (
		UPDATE calls SET state = 'done', result = $1, owner = '', expires_at = NULL, updated_at = $2, ` + store.KeptArguments + `
		WHERE caller_id = $3 AND tool_call_id = $4
			AND CASE state WHEN 'pending_approval' THEN true WHEN 'running' THEN owner = $5 ELSE false END
		RETURNING 1)
	SELECT count(*) FROM u CROSS JOIN LATERAL (SELECT pg_notify($6, $7)) AS n`

// renewLeases renews the leases of the calls this process runs every
// third of a lease, and at once when asked (renewNow). After a failed
// renewal it tries again every second, not a third of a lease later: the
// leases of a replica that lost the database for longer than a lease have
// lapsed, and other replicas end such records as E_INTERRUPTED (their
// waiters, retries and sweeps) until this one renews them, so it does so
// as soon as the database answers again.
func (s *Store) renewLeases(ctx context.Context) {
	every := s.lease / 3
	retry := min(time.Second, every)
	t := time.NewTimer(every)
	defer t.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.renewNow:
		}
		next := every
		if keys := s.leases.Keys(); len(keys) > 0 {
			rctx, cancel := context.WithTimeout(ctx, every)
			err := s.renew(rctx, keys)
			cancel()
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				if failed == 0 {
					s.log.Warn("store: renewing call leases failed; retrying every second until the database answers",
						"calls", len(keys), "err", err)
				}
				failed++
				next = retry
			case failed > 0:
				s.log.Info("store: call leases renewed again", "calls", len(keys), "failedAttempts", failed)
				failed = 0
			}
		}
		t.Reset(next)
	}
}

// renew extends the leases of the calls this process runs, and only
// theirs: a record whose result was lost lapses and is interrupted.
func (s *Store) renew(ctx context.Context, keys []store.CallKey) error {
	callers, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		callers[i], ids[i] = k.CallerID, k.ToolCallID
	}
	_, err := s.pool.Exec(ctx, renewSQL, s.clock().Add(s.lease), s.id, callers, ids)
	return err
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
	_, err = s.pool.Exec(ctx, store.InsertApprovalSQL, s.sql.InsertApprovalArgs(a, filed, now)...)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return fmt.Errorf("postgres store: approval %s already exists", a.ID)
	}
	return classify(err)
}

// CreateApprovalWithin implements registry.PendingLimiter: the count and
// the insert run in one transaction under a transaction-level advisory
// lock on the caller (and the store's schema), which every replica's
// filing of that caller's requests takes, so that they count one after
// another. Each count sees the requests committed before it, as READ
// COMMITTED takes a snapshot per statement.
func (s *Store) CreateApprovalWithin(ctx context.Context, a *registry.Approval, max int) error {
	now := s.clock()
	filed, err := store.NewApproval(a, now)
	if err != nil {
		return err
	}
	err = s.sql.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, pendingLockKey(s.channel, a.CallerID)); err != nil {
			return err
		}
		return s.sql.InsertApprovalWithin(ctx, tx, a.CallerID, s.sql.InsertApprovalArgs(a, filed, now), now, max)
	})
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" {
		return fmt.Errorf("postgres store: approval %s already exists", a.ID)
	}
	return err
}

// pendingLockKey is the advisory lock that serializes the filings of
// caller's approval requests in the schema whose notification channel is
// channel (advisory locks are the database's, not a schema's).
func pendingLockKey(channel, caller string) int64 {
	sum := sha256.Sum256([]byte("toolsvc.pending\x00" + channel + "\x00" + caller))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// RefileApproval implements registry.ApprovalRefiler.
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

// DecideApproval implements registry.Store. The UPDATE … WHERE status =
// 'pending' takes the row lock; a racing decision waits for it, then finds
// the row no longer pending, so exactly one wins across replicas. The call
// record moves, and is announced, in the same transaction.
func (s *Store) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	return s.sql.DecideApproval(ctx, id, v, by, reason, now)
}

// AdoptDecision implements registry.DecisionAdopter: a decision whose
// answer was lost (a deadline, a cut connection) may have committed.
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
	err := s.commit.Do(ctx, 512, func(ctx context.Context, b *pgx.Batch) error {
		b.Queue(insertAuditSQL+` VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id`,
			auditArgs(&v)...).QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
		return nil
	})
	if err != nil {
		return err
	}
	e.ID = id
	return nil
}

// QueueAudit implements registry.AuditQueuer.
func (s *Store) QueueAudit(ctx context.Context, e *registry.AuditEntry, done func(error)) {
	store.NewAudit(e, s.clock())
	v := *e // the committer reads its own copy, as in AppendAudit
	var id int64
	s.commit.Queue(ctx, 512, func(ctx context.Context, b *pgx.Batch) error {
		b.Queue(insertAuditSQL+` VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id`,
			auditArgs(&v)...).QueryRow(func(row pgx.Row) error { return row.Scan(&id) })
		return nil
	}, func(err error) {
		if err == nil {
			e.ID = id
		}
		done(err)
	})
}

const insertAuditSQL = `INSERT INTO audit (time, event, caller_id, tool_call_id, tool_name, tier, decision, rule,
	status, code, duration_ms, arguments_digest, issuer, subject)`

// auditArgs are the values of insertAuditSQL's columns, in order.
func auditArgs(v *registry.AuditEntry) []any {
	return []any{v.Time, v.Event, v.CallerID, v.ToolCallID, v.ToolName, string(v.Tier), string(v.Decision), v.Rule,
		string(v.Status), string(v.Code), v.DurationMs, v.ArgumentsDigest, v.Issuer, v.Subject}
}

// ListAudit implements registry.Store.
func (s *Store) ListAudit(ctx context.Context, f registry.AuditFilter) ([]*registry.AuditEntry, error) {
	return s.sql.ListAudit(ctx, f)
}

// DeleteExpired implements registry.Store.
func (s *Store) DeleteExpired(ctx context.Context, before time.Time) (int64, error) {
	before = store.Micro(before)
	var total int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Probe rows of other instances (a random id at every start)
		// not written for an hour: instances long gone. A live one
		// writes its row again at its next readiness check.
		if _, err := tx.Exec(ctx, `DELETE FROM probe WHERE instance <> $1 AND at < greatest($2::timestamptz, $3::timestamptz)`,
			s.id, before, s.clock().Add(-probeKeep)); err != nil {
			return err
		}
		for _, q := range []string{
			`DELETE FROM calls WHERE (state = 'done' AND updated_at < $1) OR (state = 'pending_approval' AND expires_at < $1)`,
			`DELETE FROM approvals WHERE (status <> 'pending' AND updated_at < $1) OR (status = 'pending' AND expires_at < $1)`,
			`DELETE FROM audit WHERE time < $1`,
			`DELETE FROM revoked_sessions WHERE expires_at < $1`,
		} {
			tag, err := tx.Exec(ctx, q, before)
			if err != nil {
				return err
			}
			total += tag.RowsAffected()
		}
		return nil
	})
	return total, classify(err)
}

// probeKeep is how long DeleteExpired keeps the probe row of an instance
// that no longer writes it, or the retention when that is shorter.
const probeKeep = time.Hour

// RevokeSession implements registry.Store. Every replica reads the row
// it writes.
func (s *Store) RevokeSession(ctx context.Context, id string, until time.Time) error {
	return s.sql.RevokeSession(ctx, id, until)
}

// SessionRevoked implements registry.Store.
func (s *Store) SessionRevoked(ctx context.Context, id string) (bool, error) {
	return s.sql.SessionRevoked(ctx, id)
}

// Ping implements registry.Store: it writes this instance's probe row,
// reading no row of every table the store uses (probeSQL).
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, probeSQL, s.id, s.clock()); err != nil {
		return fmt.Errorf("write probe (reading the tables toolsvc uses): %w", classify(err))
	}
	return nil
}

// Close implements registry.Store: it stops the listener and lease
// renewal and closes the pool.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.commit.Close()
		s.stop()
		s.wg.Wait()
		// A connection whose query was cut sends PostgreSQL a cancel
		// request, and pgx waits up to 15 s for each such one while the
		// pool closes: a database that does not answer would hold the
		// end of the process that long. What was to be written has been
		// by now, or is held and logged, so stop waiting after a moment.
		closed := make(chan struct{})
		go func() {
			s.pool.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(closeWait):
			s.log.Warn("store: PostgreSQL connections still closing; not waiting for them", "after", closeWait)
		}
	})
	return nil
}

// closeWait bounds how long Close waits for the pool's connections.
const closeWait = 2 * time.Second
