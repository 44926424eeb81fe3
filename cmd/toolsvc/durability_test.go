package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the "sqlite" driver, to read the audit trail

	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// TestDurableUnderKill: toolsvc is killed with SIGKILL in the middle of
// concurrent side-effecting calls (each appends its own line once) and
// restarted on the same data. Every call answered 200 ok has its record,
// with the answered result, and its line; a retry of every call sent
// answers from its record (ok or E_INTERRUPTED) or, if its record never
// committed, runs it then; and no line appears twice, so no call ran twice.
// Every acknowledged call also has exactly one audit entry, written with
// its result.
func TestDurableUnderKill(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) {
		data := t.TempDir()
		checkDurableUnderKill(t, "TOOLSVC_DATA_DIR="+data) // grouped, the default
	})
	t.Run("SQLiteOneWriteEach", func(t *testing.T) {
		data := t.TempDir()
		checkDurableUnderKill(t, "TOOLSVC_DATA_DIR="+data, "TOOLSVC_STORE_COMMIT_MAX=1")
	})
	t.Run("SQLiteGroupCommitWindow", func(t *testing.T) {
		data := t.TempDir()
		checkDurableUnderKill(t, "TOOLSVC_DATA_DIR="+data, "TOOLSVC_STORE_COMMIT_WINDOW=2ms")
	})
	t.Run("PostgreSQL", func(t *testing.T) {
		// One instance id across the restart: the calls its first life
		// left running are interrupted at start, not a lease later.
		checkDurableUnderKill(t, append(postgresEnv(t, "durable_", "the PostgreSQL durability check"),
			"TOOLSVC_DATA_DIR="+t.TempDir(), "TOOLSVC_INSTANCE_ID=durable-test")...)
	})
}

// postgresEnv returns the settings that put the binary on a fresh schema
// (prefix and random letters) of the test database, or skips what needs
// it.
func postgresEnv(t *testing.T, prefix, what string) []string {
	t.Helper()
	pgURL := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	if pgURL == "" {
		t.Skipf("TOOLSVC_TEST_POSTGRES_URL is not set; %s needs a real database", what)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return []string{"TOOLSVC_STORE_URL=" + pgURL, "TOOLSVC_STORE_SCHEMA=" + prefix + hex.EncodeToString(b[:])}
}

func checkDurableUnderKill(t *testing.T, env ...string) {
	ws := t.TempDir()
	env = append(env, "TOOLSVC_WORKSPACE="+ws, "TOOLSVC_STORE_WAIT_TIMEOUT=10s")
	const workers = 12
	p := startBinary(t, env...)
	var (
		mu    sync.Mutex
		acked = map[string]answer{} // toolCallId → the 200 ok answer
		sent  []string
		wg    sync.WaitGroup
		stop  = make(chan struct{})
	)
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				mu.Lock()
				sent = append(sent, id)
				mu.Unlock()
				a, err := p.trySend("POST", "/calls", durableCall(w, id))
				if err != nil {
					return // killed
				}
				if a.status == 200 && a.res.Status == "ok" && !a.pending {
					mu.Lock()
					acked[id] = a
					mu.Unlock()
				}
			}
		})
	}
	// Kill once enough calls are acknowledged, with the others in flight.
	for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		n := len(acked)
		mu.Unlock()
		if n >= 150 {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("only %d calls acknowledged in 20s:\n%s", n, p.log())
		}
	}
	p.kill9()
	close(stop)
	wg.Wait()
	t.Logf("%d calls sent, %d acknowledged before SIGKILL", len(sent), len(acked))

	p = startBinary(t, env...)
	lines := map[string]int{}
	for w := range workers {
		for l, n := range countLines(t, filepath.Join(ws, "callers/anonymous/default", fmt.Sprintf("dur-%d.txt", w))) {
			lines[l] += n
		}
	}
	for id, a := range acked {
		g := p.send("GET", "/calls/"+id, "")
		if g.status != 200 || g.res.Status != "ok" || string(g.res.Output) != string(a.res.Output) || g.res.DurationMs != a.res.DurationMs {
			t.Errorf("record of acknowledged %s after the kill: %d %s; want the answered result %s", id, g.status, g.body, a.body)
		}
		if lines[id] != 1 {
			t.Errorf("acknowledged %s appended its line %d times, want 1", id, lines[id])
		}
	}
	// Retry every call sent, acknowledged or not.
	sort.Strings(sent)
	for _, id := range sent {
		var w int
		fmt.Sscanf(id, "w%d-", &w)
		r := p.send("POST", "/calls", durableCall(w, id))
		switch {
		case r.status != 200:
			t.Errorf("retry of %s: %d %s", id, r.status, r.body)
		case acked[id].status == 200 && (r.res.Status != "ok" || r.res.DurationMs != acked[id].res.DurationMs):
			t.Errorf("retry of acknowledged %s = %s; want the recorded result %s", id, r.body, acked[id].body)
		case r.res.Status != "ok" && r.res.code() != "E_INTERRUPTED":
			t.Errorf("retry of %s = %s; want ok or E_INTERRUPTED", id, r.body)
		}
	}
	after := map[string]int{}
	for w := range workers {
		for l, n := range countLines(t, filepath.Join(ws, "callers/anonymous/default", fmt.Sprintf("dur-%d.txt", w))) {
			after[l] += n
		}
	}
	for l, n := range after {
		if n > 1 {
			t.Errorf("line %s appended %d times: a call ran twice", l, n)
		}
		if lines[l] > 0 && n != lines[l] {
			t.Errorf("line %s: %d before the retries, %d after", l, lines[l], n)
		}
	}
	for id := range acked {
		if after[id] != 1 {
			t.Errorf("acknowledged %s: its line appears %d times after the retries, want 1", id, after[id])
		}
	}
	audits := auditedCalls(t, env)
	for id := range acked {
		if audits[id] != 1 {
			t.Errorf("acknowledged %s has %d audit entries after the kill and the retries, want 1", id, audits[id])
		}
	}
}

// auditedCalls counts the "call" audit entries of each toolCallId in the
// store env names (read straight from the database).
func auditedCalls(t *testing.T, env []string) map[string]int {
	t.Helper()
	setting := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		setting[k] = v
	}
	const q = `SELECT tool_call_id, count(*) FROM audit WHERE event = 'call' GROUP BY tool_call_id`
	if url := setting["TOOLSVC_STORE_URL"]; url != "" {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(t.Context(), strings.Replace(q, "FROM audit", "FROM "+setting["TOOLSVC_STORE_SCHEMA"]+".audit", 1))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		return countsOf(t, rows)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(setting["TOOLSVC_DATA_DIR"], "toolsvc.db")+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	return countsOf(t, rows)
}

// countsOf reads rows of (toolCallId, count), from database/sql or pgx.
func countsOf(t *testing.T, rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		counts[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return counts
}

// durableCall appends id as a line to worker w's file.
func durableCall(w int, id string) string {
	return fmt.Sprintf(`{"toolCallId":%q,"toolName":"fs__write","arguments":{"path":"dur-%d.txt","content":"%s\n","mode":"append"}}`, id, w, id)
}

// The durability settings: the safe defaults, and a clear error naming the
// setting for a value out of range.
func TestStoreDurabilitySettings(t *testing.T) {
	cfg, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.StoreSync != "full" || cfg.StoreCommitWindow != 0 || cfg.storeCommitMax() != 128 {
		t.Errorf("defaults: sync %q, commit window %s, commit max %d; want full, 0 and 128",
			cfg.StoreSync, cfg.StoreCommitWindow, cfg.storeCommitMax())
	}
	for env, want := range map[string]string{
		"TOOLSVC_STORE_SYNC=off":           `TOOLSVC_STORE_SYNC must be full or normal, got "off"`,
		"TOOLSVC_STORE_COMMIT_WINDOW=2s":   "TOOLSVC_STORE_COMMIT_WINDOW must be between 0s and 1s, got 2s",
		"TOOLSVC_STORE_COMMIT_WINDOW=-1ms": "TOOLSVC_STORE_COMMIT_WINDOW must be between 0s and 1s, got -1ms",
		"TOOLSVC_STORE_COMMIT_MAX=-1":      "TOOLSVC_STORE_COMMIT_MAX must be between 0 (the store's default) and 10000, got -1",
		"TOOLSVC_TOOL_WORKERS=-1":          "TOOLSVC_TOOL_WORKERS must be 0 (2 per CPU) or more, got -1",
		"TOOLSVC_MAX_TIMEOUT=2562047h":     "TOOLSVC_MAX_TIMEOUT must be at most 24h0m0s, got 2562047h0m0s",
		// Every numeric setting: none means anything below zero.
		"TOOLSVC_SHELL_TIMEOUT=-5s":    "TOOLSVC_SHELL_TIMEOUT must not be negative, got -5s",
		"TOOLSVC_FS_MAX_READ_BYTES=-1": "TOOLSVC_FS_MAX_READ_BYTES must not be negative, got -1",
		"TOOLSVC_MAX_CONNECTIONS=-1":   "TOOLSVC_MAX_CONNECTIONS must not be negative, got -1",
		"TOOLSVC_SHUTDOWN_TIMEOUT=-1s": "TOOLSVC_SHUTDOWN_TIMEOUT must not be negative, got -1s",
		"TOOLSVC_RATE_LIMIT=NaN":       "TOOLSVC_RATE_LIMIT and TOOLSVC_RATE_LIMIT_BURST must be finite numbers, not negative",
		"TOOLSVC_RATE_LIMIT=+Inf":      "TOOLSVC_RATE_LIMIT and TOOLSVC_RATE_LIMIT_BURST must be finite numbers",
	} {
		if _, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), env}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", env, err, want)
		}
	}
	// A variable no setting reads is named, with the one it most likely
	// meant; the tests' own are not.
	cfg, err = loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_RATELIMIT=5", "TOOLSVC_NO_SUCH_THING=1", "TOOLSVC_TEST_POSTGRES_URL=x"})
	if got := fmt.Sprint(cfg.unknownSettings()); err != nil || got != "[TOOLSVC_NO_SUCH_THING TOOLSVC_RATELIMIT (did you mean TOOLSVC_RATE_LIMIT?)]" {
		t.Errorf("unknown settings %s (%v)", got, err)
	}
	// A variable a resource asks for by name (a notifier's secretFrom) is
	// not a setting, and not unknown.
	cfg.lookupEnv("TOOLSVC_NO_SUCH_THING")
	if got := fmt.Sprint(cfg.unknownSettings()); got != "[TOOLSVC_RATELIMIT (did you mean TOOLSVC_RATE_LIMIT?)]" {
		t.Errorf("unknown settings once a resource asked for one: %s", got)
	}
	cfg, err = loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_STORE_SYNC=normal", "TOOLSVC_STORE_COMMIT_WINDOW=2ms"})
	if err != nil || cfg.StoreSync != "normal" || cfg.StoreCommitWindow != 2*time.Millisecond {
		t.Errorf("normal, 2ms: %+v, %v", cfg.StoreSync, err)
	}
}

// TestStoreStartStoppedOrTimedOut: a start that gives up on a store that
// will not open says why: stopped (the context ended), or
// TOOLSVC_STORE_START_TIMEOUT passed.
func TestStoreStartStoppedOrTimedOut(t *testing.T) {
	data := t.TempDir()
	held, err := sqlite.Open(context.Background(), filepath.Join(data, "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + data, "TOOLSVC_STORE_START_TIMEOUT=300ms"})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if _, err := openStoreRetrying(context.Background(), cfg, log); err == nil || !strings.Contains(err.Error(), "not open after 300ms (TOOLSVC_STORE_START_TIMEOUT)") {
		t.Errorf("timed out: %v", err)
	}
	cfg.StoreStartTimeout = time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := openStoreRetrying(ctx, cfg, log); err == nil || !strings.Contains(err.Error(), "stopped after") || strings.Contains(err.Error(), "START_TIMEOUT") {
		t.Errorf("stopped: %v", err)
	}
}

// TestStoreStartGivesUpOnAnUnwritableDataDir: a data directory the process
// cannot write (a volume owned by another user, a read-only mount) does not
// become writable by waiting; the service retried it for the whole
// TOOLSVC_STORE_START_TIMEOUT, then said only "permission denied". An
// immutable directory (chattr +i) refuses new files even to root.
func TestStoreStartGivesUpOnAnUnwritableDataDir(t *testing.T) {
	data := t.TempDir()
	if out, err := exec.Command("chattr", "+i", data).CombinedOutput(); err != nil {
		t.Skipf("chattr +i is not available here (%v: %s); the test needs a directory no file can be made in", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", data).Run() })
	cfg, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + data, "TOOLSVC_STORE_START_TIMEOUT=2s"})
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	_, err = openStoreRetrying(t.Context(), cfg, slog.New(slog.NewJSONHandler(&logged, nil)))
	if err == nil || !strings.Contains(err.Error(), "TOOLSVC_DATA_DIR "+data+" cannot be written by this process (uid ") || !strings.Contains(err.Error(), "make the directory writable") {
		t.Errorf("open: %v", err)
	}
	if strings.Contains(logged.String(), "retrying") {
		t.Errorf("an unwritable data directory was retried:\n%s", logged.String())
	}
}
