package postgres_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// testURL returns the test database, or skips.
func testURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	if u == "" {
		t.Skip("TOOLSVC_TEST_POSTGRES_URL is not set; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL store tests")
	}
	return u
}

func open(t testing.TB, o postgres.Options) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func sharedDB(t *testing.T) storetest.SharedOpener {
	url := testURL(t)
	schema := storetest.PostgresSchema(t, url)
	return func(t *testing.T, o storetest.OpenOptions) registry.Store {
		return open(t, postgres.Options{URL: url, Schema: schema, Lease: o.Lease, MaxPoll: o.MaxPoll, Now: o.Now, MaxConns: 8})
	}
}

func TestConformance(t *testing.T) {
	url := testURL(t)
	storetest.Run(t, func(t *testing.T) registry.Store {
		return open(t, postgres.Options{URL: url, Schema: storetest.PostgresSchema(t, url)})
	})
}

// TestOrphanedRecordOfThisProcessExpires runs storetest.RunOrphanedLease.
func TestOrphanedRecordOfThisProcessExpires(t *testing.T) {
	url := testURL(t)
	storetest.RunOrphanedLease(t, open(t, postgres.Options{URL: url, Schema: storetest.PostgresSchema(t, url), Lease: 300 * time.Millisecond}))
}

func TestRestart(t *testing.T) { storetest.RunRestart(t, sharedDB) }

func TestReplicas(t *testing.T) { storetest.RunReplicas(t, sharedDB) }

// Replicas starting together apply the migrations once, under the
// advisory lock, and all come up.
func TestConcurrentStartMigratesOnce(t *testing.T) {
	url := testURL(t)
	schema := storetest.PostgresSchema(t, url)
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			s, err := postgres.Open(context.Background(), postgres.Options{URL: url, Schema: schema, MaxConns: 2})
			if err != nil {
				errs <- err
				return
			}
			errs <- s.Ping(context.Background())
			s.Close()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Open: %v", err)
		}
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var applied int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM `+pgx.Identifier{schema, "schema_migrations"}.Sanitize()).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("migrations: %v, %v", files, err)
	}
	if applied != len(files) {
		t.Errorf("schema_migrations has %d rows, want %d (each migration applied once)", applied, len(files))
	}
}

func TestRefusesBadSchemaName(t *testing.T) {
	_, err := postgres.Open(t.Context(), postgres.Options{URL: "postgres://127.0.0.1/x", Schema: "a;drop"})
	if err == nil {
		t.Fatal("Open accepted a schema name that is not an identifier")
	}
}

// A waiter on one replica is woken by the other's NOTIFY, not by polling.
func TestNotifyWakesOtherReplica(t *testing.T) {
	url := testURL(t)
	schema := storetest.PostgresSchema(t, url)
	a := open(t, postgres.Options{URL: url, Schema: schema, Lease: time.Hour})
	b := open(t, postgres.Options{URL: url, Schema: schema, Lease: time.Hour, MaxPoll: time.Hour})
	rec := &registry.CallRecord{CallerID: "alice", ToolCallID: "n1", ToolName: "fs__write", ArgumentsDigest: "d", State: registry.CallRunning}
	if _, _, err := a.BeginCall(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		r, err := b.WaitCall(ctx, "alice", "n1")
		if err == nil && r.State != registry.CallDone {
			err = context.DeadlineExceeded
		}
		got <- err
	}()
	// Open returns only once the store LISTENs, so the finish below reaches
	// b as a notification; the counter shows it did (with MaxPoll and the
	// lease an hour, polling would also be slow to find it).
	before := b.Notifications()
	if _, stored, err := a.FinishCall(t.Context(), "alice", "n1", &registry.Result{ToolCallID: "n1", ToolName: "fs__write", Status: registry.StatusOK}, nil); err != nil || !stored {
		t.Fatalf("FinishCall: stored=%v, %v", stored, err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter on the other replica: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for b.Notifications() == before {
		if time.Now().After(deadline) {
			t.Fatal("the other replica received no notification for the finished call")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGroupCommit: with a commit window, calls' writes share
// transactions and each behaves as it does alone; a write the database
// refuses (a NUL byte in a text column) fails alone, and the writes that
// shared its transaction are stored.
func TestGroupCommit(t *testing.T) {
	url := testURL(t)
	s := open(t, postgres.Options{URL: url, Schema: storetest.PostgresSchema(t, url), CommitWindow: 50 * time.Millisecond})
	storetest.RunConcurrentWrites(t, s)
	if txs, writes := s.CommitStats(); writes < 20 || txs*2 > writes {
		t.Errorf("%d writes in %d transactions; want them grouped (at most half as many transactions)", writes, txs)
	}

	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Go(func() {
			rec := &registry.CallRecord{CallerID: "bob", ToolCallID: fmt.Sprintf("g-%d", i), ToolName: "fs__write",
				ArgumentsDigest: "d", State: registry.CallRunning}
			if i == 2 {
				rec.ToolName = "fs__write\x00"
			}
			_, _, errs[i] = s.BeginCall(t.Context(), rec)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (err != nil) != (i == 2) {
			t.Errorf("BeginCall g-%d: %v; want only g-2 (a NUL byte) to fail", i, err)
		}
		_, gerr := s.GetCall(t.Context(), "bob", fmt.Sprintf("g-%d", i))
		if (gerr == nil) == (i == 2) {
			t.Errorf("GetCall g-%d: %v; want every call but g-2 stored", i, gerr)
		}
	}
}

func BenchmarkStore(b *testing.B) {
	url := testURL(b)
	s := open(b, postgres.Options{URL: url, Schema: storetest.PostgresSchema(b, url)})
	storetest.Benchmark(b, s)
}

// TestScanTime: pgx scans a timestamptz, and NULL, into store.ScanTime (a
// database/sql Scanner), as the shared scanners rely on.
func TestScanTime(t *testing.T) {
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	want := time.Date(2026, 11, 23, 22, 52, 16, 123456000, time.FixedZone("CET", 3600))
	got, null := time.Time{}, time.Now()
	if err := conn.QueryRow(ctx, `SELECT $1::timestamptz, NULL::timestamptz`, want).Scan(store.ScanTime(&got), store.ScanTime(&null)); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("timestamptz scanned as %v, want %v in UTC", got, want)
	}
	if !null.IsZero() {
		t.Errorf("NULL scanned as %v, want the zero time", null)
	}
}

// TestKeyedStatementsUseOnlyThePrimaryKey: recording a result and renewing
// leases find their records by primary key, never through the partial
// indexes of running or pending records, even on a table with no
// statistics yet (a new schema, or autovacuum off), where the planner
// once combined the key with calls_owner: every call then read all of
// that index's dead entries, and side-effecting calls slowed to a crawl
// within a minute of load.
func TestKeyedStatementsUseOnlyThePrimaryKey(t *testing.T) {
	url := testURL(t)
	schema := storetest.PostgresSchema(t, url)
	open(t, postgres.Options{URL: url, Schema: schema})
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		`SET search_path TO ` + pgx.Identifier{schema}.Sanitize(),
		// A table as a minute of load leaves it, never analyzed: every
		// record began running and was finished, so the partial index of
		// running records holds an entry for each (dead until VACUUM).
		`INSERT INTO calls (caller_id, tool_call_id, tool_name, arguments_digest, arguments, context, state, owner, created_at, updated_at, expires_at)
			SELECT 'alice', 'c' || i, 'fs__write', 'd', '{}', '{}', 'running', 'me', now(), now(), now()
			FROM generate_series(1, 100000) AS i`,
		`UPDATE calls SET state = 'done', owner = '', expires_at = NULL, result = convert_to(repeat('r', 300), 'UTF8')`,
		`PREPARE finish (bytea, timestamptz, text, text, text, text, text) AS ` + postgres.FinishCallSQL,
		`PREPARE renew (timestamptz, text, text[], text[]) AS ` + postgres.RenewSQL,
	} {
		if _, err := conn.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(t.Context(), `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			`EXPLAIN EXECUTE finish ('x', now(), 'alice', 'c1', 'me', 'chan', 'key')`,
			`EXPLAIN EXECUTE renew (now(), 'me', '{alice,bob}', '{c1,c2}')`,
		} {
			rows, err := conn.Query(t.Context(), q, pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				t.Fatal(err)
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(lines, "\n")
			if !strings.Contains(plan, "calls_pkey") || strings.Contains(plan, "calls_owner") ||
				strings.Contains(plan, "_expires") || strings.Contains(plan, "Seq Scan on calls") {
				t.Errorf("%s, %s:\n%s\nwant the record found by calls_pkey alone", mode, q, plan)
			}
		}
	}
}
