package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/store"

	_ "modernc.org/sqlite"
)

// openCommitter opens a SQLite file with a table t (id primary key) and a
// child table whose foreign key is checked at commit, and a committer
// over it that waits window for writes.
func openCommitter(t *testing.T, window time.Duration) (*sql.DB, *store.Committer[*sql.Tx]) {
	t.Helper()
	return openCommitterSeeing(t, window, nil)
}

// openCommitterSeeing is openCommitter whose committer calls exec with
// every savepoint statement it runs.
func openCommitterSeeing(t *testing.T, window time.Duration, exec func(q string)) (*sql.DB, *store.Committer[*sql.Tx]) {
	t.Helper()
	return openCommitterWith(t, store.CommitOptions[*sql.Tx]{Window: window}, exec)
}

// openCommitterWith is openCommitterSeeing with the options o (its InTx
// and Exec are set here).
func openCommitterWith(t *testing.T, o store.CommitOptions[*sql.Tx], exec func(q string)) (*sql.DB, *store.Committer[*sql.Tx]) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "c.db")+"?_pragma=foreign_keys(1)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec(`CREATE TABLE t (id TEXT PRIMARY KEY);
		CREATE TABLE child (id TEXT PRIMARY KEY, parent TEXT REFERENCES t (id) DEFERRABLE INITIALLY DEFERRED)`); err != nil {
		t.Fatal(err)
	}
	o.InTx = func(ctx context.Context, fn func(tx *sql.Tx) error) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	o.Exec = func(ctx context.Context, tx *sql.Tx, q string) error {
		if exec != nil {
			exec(q)
		}
		_, err := tx.ExecContext(ctx, q)
		return err
	}
	c := store.NewCommitter(o)
	t.Cleanup(c.Close)
	return db, c
}

func insert(table, id string, extra ...any) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		if table == "child" {
			_, err := tx.ExecContext(ctx, `INSERT INTO child (id, parent) VALUES (?, ?)`, id, extra[0])
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES (?)`, id)
		return err
	}
}

func rows(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	r, err := db.Query(`SELECT id FROM ` + table + ` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := []string{}
	for r.Next() {
		var id string
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// doAll runs every write at once and returns their errors in order.
func doAll(c *store.Committer[*sql.Tx], fns ...func(ctx context.Context, tx *sql.Tx) error) []error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs[i] = c.Do(ctx, 10, fn)
		})
	}
	wg.Wait()
	return errs
}

// Writes that wait together share one transaction; one that fails (a
// duplicate key) fails alone, leaves nothing behind, and the others commit,
// each seeing what was written before it as in a transaction of its own.
func TestCommitterGroupsAndIsolatesFailures(t *testing.T) {
	db, c := openCommitter(t, 300*time.Millisecond)
	errs := doAll(c, insert("t", "a"), insert("t", "b"), insert("t", "a"), insert("t", "c"),
		func(ctx context.Context, tx *sql.Tx) error {
			// Two statements, the second failing: the first must not stay.
			if _, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES ('partial')`); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `INSERT INTO t (id) VALUES ('partial')`)
			return err
		})
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if !strings.Contains(err.Error(), "UNIQUE constraint failed") {
				t.Errorf("write failed with %v, want a UNIQUE constraint error", err)
			}
		}
	}
	if failed != 2 {
		t.Errorf("%d writes failed (%v), want 2: one of the two writes of a, the one writing partial twice", failed, errs)
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[a b c]" {
		t.Errorf("rows = %v, want [a b c] (no partial write)", got)
	}
	// The group ran once without savepoints, failed and was rolled back,
	// then once with them.
	if txs, writes := c.Stats(); txs != 2 || writes != 5 {
		t.Errorf("stats = %d transactions, %d writes; want the 5 writes in 2 transactions", txs, writes)
	}
}

// A group whose writes all succeed runs none of the savepoint statements:
// one transaction, the writes and the commit.
func TestCommitterGroupWithoutFailureRunsNoSavepoints(t *testing.T) {
	var mu sync.Mutex
	var stmts []string
	db, c := openCommitterSeeing(t, 300*time.Millisecond, func(q string) {
		mu.Lock()
		stmts = append(stmts, q)
		mu.Unlock()
	})
	for _, err := range doAll(c, insert("t", "a"), insert("t", "b"), insert("t", "c"), insert("t", "d")) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[a b c d]" {
		t.Errorf("rows = %v, want [a b c d]", got)
	}
	if txs, writes := c.Stats(); txs != 1 || writes != 4 {
		t.Errorf("stats = %d transactions, %d writes; want the 4 writes in 1 transaction", txs, writes)
	}
	if len(stmts) != 0 {
		t.Errorf("savepoint statements ran for a group that did not fail: %q", stmts)
	}
	// One write that fails makes the group run again with savepoints.
	errs := doAll(c, insert("t", "e"), insert("t", "a"), insert("t", "f"))
	if errs[0] != nil || errs[1] == nil || errs[2] != nil {
		t.Fatalf("errors = %v, want only the second (a duplicate) to fail", errs)
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[a b c d e f]" {
		t.Errorf("rows = %v, want [a b c d e f]", got)
	}
	if len(stmts) == 0 {
		t.Error("a group with a failing write ran again without savepoints")
	}
}

// A commit that fails fails every write of its transaction, and none of
// them is stored.
func TestCommitterFailedCommitFailsEveryWrite(t *testing.T) {
	db, c := openCommitter(t, 300*time.Millisecond)
	// The foreign key is checked at COMMIT: the statement succeeds, the
	// commit fails.
	errs := doAll(c, insert("t", "x"), insert("child", "orphan", "nobody"), insert("t", "y"))
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "FOREIGN KEY constraint failed") {
			t.Errorf("write %d: %v, want the commit's foreign key error", i, err)
		}
	}
	if got := rows(t, db, "t"); len(got) != 0 {
		t.Errorf("rows after a failed commit = %v, want none", got)
	}
	if got := rows(t, db, "child"); len(got) != 0 {
		t.Errorf("child rows after a failed commit = %v, want none", got)
	}
	// The committer goes on.
	if err := c.Do(t.Context(), 1, insert("t", "z")); err != nil {
		t.Fatalf("write after a failed commit: %v", err)
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[z]" {
		t.Errorf("rows = %v, want [z]", got)
	}
}

// A write whose caller's deadline passes while it waits returns the
// deadline's error and is never written; the others are.
func TestCommitterHonoursDeadlines(t *testing.T) {
	db, c := openCommitter(t, 2*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Do(context.Background(), 1, insert("t", "patient")) }()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := c.Do(ctx, 1, insert("t", "hasty"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do past its deadline = %v, want context.DeadlineExceeded", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("patient write: %v", err)
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[patient]" {
		t.Errorf("rows = %v, want [patient] (the write whose caller left is not run)", got)
	}
}

// A detached committer hands its writes a context that never ends (so the
// driver watches no context per statement), yet a transaction that
// outlives every caller waiting for it is still rolled back, between its
// writes: nothing of it commits.
func TestCommitterDetachedWritesKeepTheTransactionBounded(t *testing.T) {
	db, c := openCommitterWith(t, store.CommitOptions[*sql.Tx]{Detached: true, Window: 50 * time.Millisecond}, nil)
	var ended []bool
	slow := func(ctx context.Context, tx *sql.Tx) error {
		ended = append(ended, ctx.Done() != nil)
		time.Sleep(300 * time.Millisecond) // past both callers' deadlines
		return insert("t", "slow")(ctx, tx)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, fn := range []func(context.Context, *sql.Tx) error{slow, insert("t", "after")} {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			errs[i] = c.Do(ctx, 1, fn)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("write %d past its deadline = %v, want context.DeadlineExceeded", i, err)
		}
	}
	// The committer is free again once the rolled-back transaction is over.
	if err := c.Do(t.Context(), 1, insert("t", "later")); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ended) != "[false]" {
		t.Errorf("the slow write ran %d times, its context ending = %v; want once, never ending", len(ended), ended)
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[later]" {
		t.Errorf("rows = %v, want [later] (the transaction that outlived its callers rolled back)", got)
	}
}

// The bounds cut the queue into several transactions, and Close commits
// what is queued and refuses what comes after.
func TestCommitterBoundsAndClose(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	c := store.NewCommitter(store.CommitOptions[*sql.Tx]{
		InTx: func(ctx context.Context, fn func(tx *sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		Exec:     func(ctx context.Context, tx *sql.Tx, q string) error { _, err := tx.ExecContext(ctx, q); return err },
		MaxOps:   4,
		MaxBytes: 1000,
		Window:   300 * time.Millisecond,
	})
	fns := make([]func(ctx context.Context, tx *sql.Tx) error, 10)
	for i := range fns {
		fns[i] = insert("t", fmt.Sprint(i))
	}
	for i, err := range doAll(c, fns...) {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if txs, writes := c.Stats(); writes != 10 || txs < 3 {
		t.Errorf("stats = %d transactions, %d writes; want 10 writes in at least 3 transactions of at most 4", txs, writes)
	}
	c.Close()
	if err := c.Do(t.Context(), 1, insert("t", "late")); !errors.Is(err, store.ErrCommitterClosed) {
		t.Errorf("Do after Close = %v, want ErrCommitterClosed", err)
	}
}

// Without savepoints, a transaction that fails with an error Alone accepts
// is run again write by write: the failing write fails alone and the
// others are stored once.
func TestCommitterWithoutSavepointsRunsAlone(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE t (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	c := store.NewCommitter(store.CommitOptions[*sql.Tx]{
		InTx: func(ctx context.Context, fn func(tx *sql.Tx) error) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := fn(tx); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		Alone:  func(err error) bool { return strings.Contains(err.Error(), "UNIQUE constraint failed") },
		Window: 300 * time.Millisecond,
	})
	defer c.Close()
	errs := doAll(c, insert("t", "a"), insert("t", "b"), insert("t", "a"), insert("t", "c"))
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if failed != 1 {
		t.Errorf("%d writes failed (%v), want 1 (one of the two writes of a)", failed, errs)
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[a b c]" {
		t.Errorf("rows = %v, want [a b c]", got)
	}
	if txs, writes := c.Stats(); writes != 4 || txs != 5 {
		t.Errorf("stats = %d transactions, %d writes; want 4 writes in 1 failed transaction and 4 alone", txs, writes)
	}
}

// A writer that stops waiting once its write was taken into a transaction
// hears of the write's outcome through settle, once the transaction ends;
// one that waited to the end is answered by DoOrSettle alone.
func TestCommitterSettlesWritesWhoseCallerLeft(t *testing.T) {
	db, c := openCommitter(t, 300*time.Millisecond)
	patient := make(chan error, 1)
	go func() { patient <- c.Do(context.Background(), 1, insert("t", "patient")) }()
	time.Sleep(20 * time.Millisecond) // queued first: the transaction outlives the hasty caller

	ctx, cancel := context.WithCancel(t.Context())
	returned, settled := make(chan struct{}), make(chan error, 1)
	err := c.DoOrSettle(ctx, 1, func(wctx context.Context, tx *sql.Tx) error {
		if err := insert("t", "hasty")(wctx, tx); err != nil {
			return err
		}
		cancel()   // the caller leaves while its write is in the transaction…
		<-returned // …and hears nothing of it
		return nil
	}, func(err error) { settled <- err })
	close(returned)
	if err == nil || !strings.Contains(err.Error(), "outcome of the write unknown") {
		t.Fatalf("DoOrSettle whose caller left = %v, want the outcome unknown", err)
	}
	select {
	case err := <-settled:
		if err != nil {
			t.Errorf("settled with %v, want nil: the write committed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("settle was not called within 10s of the transaction")
	}
	if err := <-patient; err != nil {
		t.Fatal(err)
	}
	if got := rows(t, db, "t"); fmt.Sprint(got) != "[hasty patient]" {
		t.Errorf("rows = %v, want [hasty patient]", got)
	}

	if err := c.DoOrSettle(t.Context(), 1, insert("t", "waited"), func(err error) { settled <- err }); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-settled:
		t.Errorf("settle called (%v) for a write whose caller waited for its outcome", err)
	default:
	}
}
