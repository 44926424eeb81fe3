package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// TestBeginCallWhoseAnswerWasLostIsWithdrawn: a running record whose
// insert commits after BeginCall gave up on it (the database answered
// after the deadline) belongs to a call that answered 503 and never ran.
// It is withdrawn while its lease lasts, so a retry runs the call, instead
// of waiting on a record nobody renews and then reading E_INTERRUPTED.
func TestBeginCallWhoseAnswerWasLostIsWithdrawn(t *testing.T) {
	url := testURL(t)
	schema := storetest.PostgresSchema(t, url)
	const lease = 15 * time.Second
	s := open(t, postgres.Options{URL: url, Schema: schema, Lease: lease})

	ctx := t.Context()
	conn := schemaConn(t, url, schema)
	// The insert of a "slow…" record takes a second, whether or not the
	// client cancels it (as one whose answer was lost on the way), and
	// says that it committed.
	if _, err := conn.Exec(ctx, `CREATE TABLE fired (id text);
		CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			BEGIN PERFORM pg_sleep(1); EXCEPTION WHEN query_canceled THEN NULL; END;
			INSERT INTO fired VALUES (NEW.tool_call_id); RETURN NEW;
		END $$;
		CREATE TRIGGER slow AFTER INSERT ON calls FOR EACH ROW
			WHEN (NEW.tool_call_id LIKE 'slow%') EXECUTE FUNCTION slow_insert()`); err != nil {
		t.Fatal(err)
	}

	rec := func(id string) *registry.CallRecord {
		return &registry.CallRecord{CallerID: "c", ToolCallID: id, ToolName: "fs__write",
			ArgumentsDigest: "d", State: registry.CallRunning}
	}
	// Whether the insert commits after BeginCall gave up depends on how
	// the cancellation reaches the database: a cancel request is caught
	// above, a closed connection or a transaction not yet sent whole rolls
	// it back (and then no record is left either). Attempts are made until
	// one commits late, each waited for at most 10 s.
	id := ""
	for attempt := 1; id == ""; attempt++ {
		if attempt > 5 {
			t.Fatal("in 5 attempts, no insert committed after BeginCall gave up on it: the case under test did not arise")
		}
		try := fmt.Sprintf("slow-%d", attempt)
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		_, _, err := s.BeginCall(short, rec(try))
		cancel()
		if err == nil {
			t.Fatal("BeginCall with a 200ms deadline over a 1s insert succeeded")
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM fired WHERE id = $1`, try).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				id = try
				break
			}
		}
	}
	// Then it is withdrawn, before its lease lapses.
	for {
		var state string
		var expires time.Time
		err := conn.QueryRow(ctx, `SELECT state, expires_at FROM calls WHERE caller_id = 'c' AND tool_call_id = $1`, id).Scan(&state, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if state != string(registry.CallRunning) || !time.Now().Before(expires) {
			t.Fatalf("the record of a call that answered 503 and did not run was left to lapse (state %s, lease until %s): a retry waits on it, then reads E_INTERRUPTED", state, expires.Format(time.RFC3339Nano))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := s.GetCall(ctx, "c", id); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetCall after the withdrawal: %v, want ErrNotFound", err)
	}
	// A retry runs the call.
	if _, created, err := s.BeginCall(ctx, rec(id)); err != nil || !created {
		t.Fatalf("retry: created %v, %v; want a new record", created, err)
	}
}

// schemaConn is a connection of its own to the test database, working in
// schema, closed when the test ends: for what a test does to the database
// behind the store's back (triggers that slow a commit).
func schemaConn(t *testing.T, url, schema string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), `SET search_path = `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return conn
}
