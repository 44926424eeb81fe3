package sqlite_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

func open(t *testing.T, path string, o sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, o)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) registry.Store {
		return open(t, filepath.Join(t.TempDir(), "state", "toolsvc.db"), sqlite.Options{})
	})
}

// TestGroupCommit: with a commit window, the writes of concurrent calls
// share transactions, and every write still behaves as it does alone
// (the conformance suite's concurrent writes, run again through it).
func TestGroupCommit(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{CommitWindow: 50 * time.Millisecond})
	storetest.RunConcurrentWrites(t, s)
	txs, writes := s.CommitStats()
	if writes < 20 || txs*2 > writes {
		t.Errorf("%d writes in %d transactions; want them grouped (at most half as many transactions)", writes, txs)
	}
}

func TestRestart(t *testing.T) {
	storetest.RunRestart(t, func(t *testing.T) storetest.SharedOpener {
		path := filepath.Join(t.TempDir(), "toolsvc.db")
		return func(t *testing.T, o storetest.OpenOptions) registry.Store {
			return open(t, path, sqlite.Options{Lease: o.Lease, Now: o.Now})
		}
	})
}

func TestSecondOpenIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolsvc.db")
	first := open(t, path, sqlite.Options{})
	_, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second Open of a store in use: %v, want a lock error", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// Once closed, the file opens again, with its migrations already applied.
	open(t, path, sqlite.Options{})
}

// TestLockOutlivesItsFile: removing the lock file behind a running
// process does not let a second one open the store, since the database
// file itself is locked too.
func TestLockOutlivesItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolsvc.db")
	open(t, path, sqlite.Options{})
	if err := os.Remove(path + ".lock"); err != nil {
		t.Fatal(err)
	}
	second, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err == nil {
		second.Close()
		t.Fatal("a second Open succeeded once the lock file was removed")
	}
	if !strings.Contains(err.Error(), path+" is locked by another process") {
		t.Fatalf("second Open: %v, want the database named as locked", err)
	}
}

func TestFilesAreCreatedPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	open(t, filepath.Join(dir, "toolsvc.db"), sqlite.Options{})
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("data directory mode %v, want no access for group and others", perm)
	}
	if _, err := os.Stat(filepath.Join(dir, "toolsvc.db-wal")); err != nil {
		t.Errorf("no WAL file next to the database (journal_mode=WAL not in force?): %v", err)
	}
}

func BenchmarkStore(b *testing.B) {
	for _, o := range []struct {
		name string
		opts sqlite.Options
	}{{"SyncFull", sqlite.Options{}}, {"SyncNormal", sqlite.Options{SyncNormal: true}}} {
		b.Run(o.name, func(b *testing.B) {
			s, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), o.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			storetest.Benchmark(b, s)
		})
	}
}

// TestOrphanedRecordOfThisProcessExpires runs storetest.RunOrphanedLease.
func TestOrphanedRecordOfThisProcessExpires(t *testing.T) {
	storetest.RunOrphanedLease(t, open(t, filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{Lease: 300 * time.Millisecond}))
}

// TestQueriesByStateUseTheStateIndexes: the sweeps that read calls by
// state (interrupt, approval expiry, retention) search the partial index
// of that state, not the whole table: the planner uses a partial index
// only when the query names its state exactly as the index does.
func TestQueriesByStateUseTheStateIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolsvc.db")
	open(t, path, sqlite.Options{})
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for q, index := range map[string]string{
		`SELECT caller_id, tool_call_id, tool_name FROM calls WHERE state = 'running' AND (owner <> ?2 OR expires_at <= ?1) LIMIT 100`: "calls_running_expires",
		`SELECT caller_id, tool_call_id, tool_name FROM calls WHERE state = 'pending_approval' AND expires_at <= ?1 LIMIT 1000`:        "calls_pending_expires",
		`DELETE FROM calls WHERE (state = 'done' AND updated_at < ?1) OR (state = 'pending_approval' AND expires_at < ?1)`:             "calls_done_updated",
	} {
		rows, err := db.Query(`EXPLAIN QUERY PLAN `+q, 1, "owner")
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, "USING INDEX "+index) {
			t.Errorf("%s\nplan: %s\nwant it to use %s", q, p, index)
		}
	}
}

// TestDeleteExpiredInBatches: retention deletes in transactions of a few
// thousand rows, so the group commit is not held behind one of every row
// expired; across batches it still deletes all of them and nothing else.
func TestDeleteExpiredInBatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolsvc.db")
	s := open(t, path, sqlite.Options{})
	run := &registry.CallRecord{CallerID: "alice", ToolCallID: "still-running", ToolName: "fs__write", ArgumentsDigest: "d", State: registry.CallRunning}
	if _, created, err := s.BeginCall(t.Context(), run); err != nil || !created {
		t.Fatalf("BeginCall = %v, %v", created, err)
	}
	// Expired rows written straight into the file: 4,500 done calls and
	// 4,500 audit entries, more than two batches of each.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old := time.Now().Add(-48 * time.Hour).UnixMicro()
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4500)
		INSERT INTO calls (caller_id, tool_call_id, tool_name, arguments_digest, arguments, context, state, result, created_at, updated_at)
		SELECT 'alice', 'old-' || i, 'fs__write', 'd', '{}', '{}', 'done', '{}', ?1, ?1 FROM n`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4500)
		INSERT INTO audit (time, event, caller_id, tool_name) SELECT ?1, 'call', 'alice', 'fs__write' FROM n`, old); err != nil {
		t.Fatal(err)
	}
	n, err := s.DeleteExpired(t.Context(), time.Now().Add(-24*time.Hour))
	if err != nil || n != 9000 {
		t.Fatalf("DeleteExpired = %d, %v; want 9000 rows", n, err)
	}
	var calls, audit int
	if err := db.QueryRow(`SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM audit)`).Scan(&calls, &audit); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || audit != 0 {
		t.Errorf("left %d calls and %d audit entries, want the running call alone", calls, audit)
	}
}
