package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// schemaTestURL returns the test database, or skips.
func schemaTestURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	if u == "" {
		t.Skip("TOOLSVC_TEST_POSTGRES_URL is not set; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL store tests")
	}
	return u
}

// freshSchema opens a store on a new schema, and returns it with a
// connection of the test's own working in that schema.
func freshSchema(t *testing.T, url string) (string, *Store, *pgx.Conn) {
	t.Helper()
	schema := storetest.PostgresSchema(t, url)
	s, err := Open(t.Context(), Options{URL: url, Schema: schema, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), `SET search_path = `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return schema, s, conn
}

// TestSchemaTablesAreWhatTheMigrationsMake: the tables and columns that
// the start and the probe check are every one the migrations make, so a
// migration that adds one cannot leave it unchecked.
func TestSchemaTablesAreWhatTheMigrationsMake(t *testing.T) {
	url := schemaTestURL(t)
	schema, _, conn := freshSchema(t, url)
	rows, err := conn.Query(t.Context(), `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = $1 AND table_name <> 'schema_migrations'`, schema)
	if err != nil {
		t.Fatal(err)
	}
	made := map[string][]string{}
	for rows.Next() {
		var table, column string
		if err := rows.Scan(&table, &column); err != nil {
			t.Fatal(err)
		}
		made[table] = append(made[table], column)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	storetest.CheckTables(t, made, schemaTables)
}

// TestStartRefusesAnIncompleteSchema: a schema missing a table or a
// column the store uses fails the start, naming it. Before, the service
// started ready and the statements on it failed once calls came: with
// the audit table dropped, a side-effecting call ran, answered 200 with
// recordPending, and its result could never be recorded.
func TestStartRefusesAnIncompleteSchema(t *testing.T) {
	url := schemaTestURL(t)
	schema, s, conn := freshSchema(t, url)
	s.Close()
	// What the start checks, each change in a transaction rolled back.
	tests := []struct {
		ddl, want string
	}{
		{`DROP TABLE audit`, `table audit is not as the migrations made it`},
		{`ALTER TABLE calls DROP COLUMN trace_id`, `table calls is not as the migrations made it`},
		{`ALTER TABLE revoked_sessions RENAME TO revoked`, `table revoked_sessions is not as`},
		{`DROP TABLE spill_chunks`, `table spill_chunks is not as`},
		{`ALTER TABLE probe RENAME COLUMN at TO written`, `table probe is not as`},
	}
	for _, tt := range tests {
		tx, err := conn.Begin(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(t.Context(), tt.ddl); err != nil {
			t.Fatal(err)
		}
		err = checkSchema(t.Context(), tx)
		if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, registry.ErrStoreBroken) {
			t.Errorf("after %s: %v; want %q and ErrStoreBroken", tt.ddl, err, tt.want)
		}
		if err := tx.Rollback(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	// And the start itself.
	if _, err := conn.Exec(t.Context(), `DROP TABLE audit`); err != nil {
		t.Fatal(err)
	}
	again, err := Open(t.Context(), Options{URL: url, Schema: schema, MaxConns: 2})
	if err == nil {
		again.Close()
		t.Fatal("the store opened on a schema without its audit table")
	}
	if !strings.Contains(err.Error(), "table audit is not as the migrations made it") || !errors.Is(err, registry.ErrStoreBroken) {
		t.Errorf("Open: %v; want the audit table named, and ErrStoreBroken", err)
	}
}

// TestRefusedStatementsNeedAnOperator: a statement PostgreSQL refuses in
// a way only an operator cures (a missing table, column or privilege, a
// read-only database) is registry.ErrStoreBroken, which the answer and
// the log treat as such; a cancelled statement (statement_timeout), a
// lock not taken in time or a connection the server ended may pass when
// retried, and are not.
func TestRefusedStatementsNeedAnOperator(t *testing.T) {
	tests := []struct {
		code         string
		broken, full bool
	}{
		{"42P01", true, false},  // undefined_table
		{"42703", true, false},  // undefined_column
		{"42501", true, false},  // insufficient_privilege
		{"25006", true, false},  // read_only_sql_transaction
		{"3F000", true, false},  // invalid_schema_name
		{"28P01", true, false},  // invalid_password
		{"XX001", true, false},  // data_corrupted
		{"53100", false, true},  // disk_full
		{"57014", false, false}, // query_canceled: statement_timeout
		{"55P03", false, false}, // lock_not_available: lock_timeout
		{"57P01", false, false}, // admin_shutdown: pg_terminate_backend
		{"53300", false, false}, // too_many_connections
		{"40P01", false, false}, // deadlock_detected
		{"23505", false, false}, // unique_violation
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			pe := &pgconn.PgError{Code: tt.code, Message: "m"}
			err := classify(pe)
			if errors.Is(err, registry.ErrStoreBroken) != tt.broken || errors.Is(err, registry.ErrStoreFull) != tt.full {
				t.Errorf("classify(%s) = %v: broken %v, full %v; want %v, %v", tt.code, err,
					errors.Is(err, registry.ErrStoreBroken), errors.Is(err, registry.ErrStoreFull), tt.broken, tt.full)
			}
			var got *pgconn.PgError
			if !errors.As(err, &got) || got != pe {
				t.Errorf("classify(%s) = %v hides the database's error", tt.code, err)
			}
			if again := classify(err); again != err {
				t.Errorf("classify of its own result wrapped it again: %v", again)
			}
		})
	}
	if classify(nil) != nil {
		t.Error("no error became one")
	}
	if plain := errors.New("x"); classify(plain) != plain {
		t.Error("an error not of the database was changed")
	}
}

// TestMissingTableAtRunTime: a table dropped or renamed while the
// service runs makes the reads and writes of calls ErrStoreBroken (the
// answer says an operator must act, not to retry shortly), and the
// probe fails. Before, they read as a store that did not answer, and
// with the audit table gone the probe passed while every result failed.
func TestMissingTableAtRunTime(t *testing.T) {
	url := schemaTestURL(t)
	rec := func(id string) *registry.CallRecord {
		return &registry.CallRecord{CallerID: "alice", ToolCallID: id, ToolName: "fs__write", ArgumentsDigest: "d",
			Arguments: json.RawMessage(`{}`), State: registry.CallRunning}
	}
	_, s, conn := freshSchema(t, url)
	if _, _, err := s.BeginCall(t.Context(), rec("a")); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(t.Context()); err != nil {
		t.Fatalf("probe before: %v", err)
	}
	// Each step changes the schema further, then runs what now fails.
	steps := []struct {
		ddl string
		ops map[string]func(ctx context.Context) error
	}{
		{`DROP TABLE audit`, map[string]func(ctx context.Context) error{
			"FinishCall": func(ctx context.Context) error {
				_, _, err := s.FinishCall(ctx, "alice", "a", &registry.Result{ToolCallID: "a", ToolName: "fs__write", Status: registry.StatusOK,
					Output: json.RawMessage(`{}`)}, &registry.AuditEntry{Event: "call", CallerID: "alice", ToolCallID: "a", ToolName: "fs__write"})
				return err
			},
			"Ping": s.Ping,
		}},
		{`ALTER TABLE approvals DROP COLUMN decided_by`, map[string]func(ctx context.Context) error{
			"ListApprovals": func(ctx context.Context) error {
				_, err := s.ListApprovals(ctx, registry.ApprovalFilter{})
				return err
			},
		}},
		{`DROP TABLE approvals`, map[string]func(ctx context.Context) error{
			"CreateApproval": func(ctx context.Context) error {
				return s.CreateApproval(ctx, &registry.Approval{ID: "ap1", CallerID: "alice", ToolCallID: "p", ToolName: "fs__write",
					ArgumentsDigest: "d", Arguments: json.RawMessage(`{}`), ExpiresAt: time.Now().Add(time.Hour)})
			},
		}},
		{`ALTER TABLE calls RENAME TO calls_x`, map[string]func(ctx context.Context) error{
			"GetCall": func(ctx context.Context) error {
				_, err := s.GetCall(ctx, "alice", "a")
				return err
			},
			"BeginCall": func(ctx context.Context) error {
				_, _, err := s.BeginCall(ctx, rec("b"))
				return err
			},
		}},
	}
	for _, st := range steps {
		if _, err := conn.Exec(t.Context(), st.ddl); err != nil {
			t.Fatal(err)
		}
		for name, op := range st.ops {
			if err := op(t.Context()); !errors.Is(err, registry.ErrStoreBroken) {
				t.Errorf("%s after %s: %v; want ErrStoreBroken", name, st.ddl, err)
			}
		}
	}
}

// TestLockedCallsTableFailsReadiness: with the calls table locked, the
// reads of durable calls (which read their record before writing one)
// fail, and after three store.Failing reports them, so /readyz fails.
// The statements are cancelled by statement_timeout, which is not a
// failure that needs an operator. Before, only writes counted, and the
// reads failed first: /readyz answered ready while every call with a
// toolCallId answered 503.
func TestLockedCallsTableFailsReadiness(t *testing.T) {
	url := schemaTestURL(t)
	schema, s, conn := freshSchema(t, url)
	if _, _, err := s.BeginCall(t.Context(), &registry.CallRecord{CallerID: "alice", ToolCallID: "a", ToolName: "fs__write",
		ArgumentsDigest: "d", Arguments: json.RawMessage(`{}`), State: registry.CallRunning}); err != nil {
		t.Fatal(err)
	}
	// A store whose statements give up after 500 ms, so that the test
	// need not wait for the store's deadline (and a busy machine's probe,
	// once the lock is gone, still fits).
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	timed, err := Open(t.Context(), Options{URL: url + sep + "statement_timeout=500", Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer timed.Close()
	st := store.WithDeadline(timed, 10*time.Second)
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), `LOCK TABLE calls IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		_, err := st.GetCall(t.Context(), "alice", "a")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57014" || errors.Is(err, registry.ErrStoreBroken) {
			t.Fatalf("read %d on a locked table: %v; want statement_timeout (57014), not ErrStoreBroken", i, err)
		}
	}
	if err := store.Failing(st); err == nil || !strings.Contains(err.Error(), "the last 3 reads of call records failed") {
		t.Errorf("Failing after three reads failed on a locked calls table: %v", err)
	}
	if err := st.Ping(t.Context()); err == nil || !strings.Contains(err.Error(), "reading the tables toolsvc uses") {
		t.Errorf("probe with the calls table locked: %v; want it to fail reading the tables", err)
	}
	tx.Rollback(t.Context())
	if _, err := st.GetCall(t.Context(), "alice", "a"); err != nil {
		t.Fatal(err)
	}
	if err := store.Failing(st); err != nil {
		t.Errorf("Failing after a read passed again: %v", err)
	}
	if err := st.Ping(t.Context()); err != nil {
		t.Errorf("probe after the lock: %v", err)
	}
}
