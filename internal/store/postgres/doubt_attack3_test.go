package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
)

// TestBeginCallWhoseAnswerWasLostIsWithdrawn: a running record whose
// insert commits after BeginCall gave up on it (the database answered
// after the deadline) belongs to a call that answered 503 and never ran.
// It is withdrawn while its lease lasts, so a retry runs the call, instead
// of waiting on a record nobody renews and then reading E_INTERRUPTED.
func TestBeginCallWhoseAnswerWasLostIsWithdrawn(t *testing.T) {
	url := testURL(t)
	schema := newSchema(t, url)
	const lease = 15 * time.Second
	s := open(t, postgres.Options{URL: url, Schema: schema, Lease: lease})

	ctx := t.Context()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SET search_path = `+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// The insert of "slow" takes a second, whether or not the client cancels
	// it (as one whose answer was lost on the way), and says when it
	// committed.
	if _, err := conn.Exec(ctx, `CREATE TABLE fired (at timestamptz);
		CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			BEGIN PERFORM pg_sleep(1); EXCEPTION WHEN query_canceled THEN NULL; END;
			INSERT INTO fired VALUES (now()); RETURN NEW;
		END $$;
		CREATE TRIGGER slow AFTER INSERT ON calls FOR EACH ROW
			WHEN (NEW.tool_call_id = 'slow') EXECUTE FUNCTION slow_insert()`); err != nil {
		t.Fatal(err)
	}

	rec := func() *registry.CallRecord {
		return &registry.CallRecord{CallerID: "c", ToolCallID: "slow", ToolName: "fs__write",
			ArgumentsDigest: "d", State: registry.CallRunning}
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, _, err = s.BeginCall(short, rec())
	cancel()
	if err == nil {
		t.Fatal("BeginCall with a 200ms deadline over a 1s insert succeeded")
	}

	// The insert commits all the same.
	for n := 0; ; time.Sleep(50 * time.Millisecond) {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM fired`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
	}
	// Then it is withdrawn, before its lease lapses.
	for {
		var state string
		var expires time.Time
		err := conn.QueryRow(ctx, `SELECT state, expires_at FROM calls WHERE caller_id = 'c' AND tool_call_id = 'slow'`).Scan(&state, &expires)
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
	if _, err := s.GetCall(ctx, "c", "slow"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("GetCall after the withdrawal: %v, want ErrNotFound", err)
	}
	// A retry runs the call.
	if _, created, err := s.BeginCall(ctx, rec()); err != nil || !created {
		t.Fatalf("retry: created %v, %v; want a new record", created, err)
	}
}
