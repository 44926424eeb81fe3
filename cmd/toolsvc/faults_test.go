package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// The fault-injection suite runs the real binary against PostgreSQL
// through a proxy the test cuts and blackholes, against SQLite on a
// volume that fills, and kills it with SIGKILL. After each fault and its
// recovery it checks that every acknowledged call's record is final and
// says what happened, that no answer took longer than the configured
// deadlines, and that no side effect ran twice.

func appendCall(id, line string) string {
	return fmt.Sprintf(`{"toolCallId":%q,"toolName":"fs__write","arguments":{"path":"count.txt","content":"%s\n","mode":"append"}}`, id, line)
}

// countLines returns how many times each line was appended.
func countLines(t *testing.T, path string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(readFile(t, path)), "\n") {
		if l != "" {
			out[l]++
		}
	}
	return out
}

func within(t *testing.T, what string, a answer, limit time.Duration) {
	t.Helper()
	if a.took > limit {
		t.Errorf("%s took %s, more than the configured deadline allows (%s)", what, a.took, limit)
	}
}

// postgresThroughProxy returns a proxy to the test database (skipping
// without one) and the settings of a store of its own schema behind it,
// with a store deadline of 1 s and a wait deadline of 2 s. The proxy is
// closed when the test ends.
func postgresThroughProxy(t *testing.T) (*storetest.Proxy, []string) {
	t.Helper()
	pgURL := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	if pgURL == "" {
		t.Skip("TOOLSVC_TEST_POSTGRES_URL is not set; the PostgreSQL fault suite needs a real database")
	}
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := storetest.NewProxy(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	var b [6]byte
	_, _ = rand.Read(b[:])
	return proxy, []string{"TOOLSVC_STORE_URL=" + u.String(), "TOOLSVC_STORE_SCHEMA=faults_" + hex.EncodeToString(b[:]),
		"TOOLSVC_STORE_TIMEOUT=1s", "TOOLSVC_STORE_WAIT_TIMEOUT=2s"}
}

// TestFaultPostgresProxy: a blackholed database answers 503 within the
// store deadline; a database cut after the tool ran gives an answer
// marked pending, a retry answered from memory, and a final record once
// the database is back; nothing runs twice.
func TestFaultPostgresProxy(t *testing.T) {
	proxy, store := postgresThroughProxy(t)
	ws := t.TempDir()
	p := startBinary(t, append(store, "TOOLSVC_WORKSPACE="+ws, "TOOLSVC_DATA_DIR="+t.TempDir())...)
	const deadline = 1 * time.Second
	limit := deadline + 3*time.Second // the deadline, plus a margin for a loaded machine
	count := filepath.Join(ws, "callers/anonymous/default", "count.txt")

	if a := p.send("POST", "/calls", appendCall("c1", "a")); a.status != 200 || a.res.Status != "ok" {
		t.Fatalf("before any fault: %d %s", a.status, a.body)
	}

	// Blackhole: packets are held, connections stay open.
	proxy.Pause()
	a := p.send("POST", "/calls", appendCall("c2", "b"))
	if a.status != 503 {
		t.Errorf("call with the database blackholed: %d %s, want 503", a.status, a.body)
	}
	within(t, "a call with the database blackholed", a, limit)
	g := p.send("GET", "/calls/c1", "")
	if g.status != 503 {
		t.Errorf("GET /calls/c1 with the database blackholed: %d %s, want 503", g.status, g.body)
	}
	within(t, "GET /calls/c1 with the database blackholed", g, limit)
	if r := p.send("GET", "/readyz", ""); r.status != 503 || !strings.Contains(r.body, "store") {
		t.Errorf("/readyz with the database blackholed: %d %s", r.status, r.body)
	}
	proxy.Resume()
	if a := p.send("POST", "/calls", appendCall("c2", "b")); a.status != 200 || a.res.Status != "ok" {
		t.Fatalf("retry after the blackhole: %d %s", a.status, a.body)
	}
	// Its client waited for the 503: that is the service's failure, at
	// error level, not a client that left.
	if l := linesWith(p.log(), `"path":"/calls"`); !strings.Contains(l, `"level":"ERROR","msg":"request failed"`) || strings.Contains(l, "client left") {
		t.Errorf("the 503 of a call the database did not answer is logged as\n%s\nwant an error line \"request failed\"", l)
	}

	// Cut while the tool runs: the record cannot be finished.
	shell := `{"toolCallId":"c3","toolName":"shell__exec","approval":{"granted":true},"arguments":{"command":"sleep 1.5; echo c >> count.txt"}}`
	done := make(chan answer, 1)
	go func() { done <- p.send("POST", "/calls", shell) }()
	time.Sleep(700 * time.Millisecond)
	proxy.Cut()
	a = <-done
	if a.status != 200 || a.res.Status != "ok" || !a.pending || a.header.Get("Toolsvc-Record") != "pending" {
		t.Fatalf("call whose record could not be finished: %d %v %s\n%s", a.status, a.header, a.body, p.log())
	}
	within(t, "the call cut after its run", a, 1500*time.Millisecond+limit)
	again := p.send("POST", "/calls", shell)
	if again.status != 200 || !again.pending || again.res.Status != "ok" {
		t.Fatalf("same-id retry while the record is pending: %d %s", again.status, again.body)
	}
	within(t, "a retry while the record is pending", again, limit)
	proxy.Resume()
	var final answer
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		// GET answers the held result at once (recordPending); the
		// record has landed when it answers without it.
		final = p.send("GET", "/calls/c3", "")
		if final.status == 200 && !final.pending || time.Since(start) > 30*time.Second {
			break
		}
	}
	if final.status != 200 || final.res.Status != "ok" || final.pending {
		t.Fatalf("record of c3 after the database came back: %d %s\n%s", final.status, final.body, p.log())
	}
	if r := p.send("POST", "/calls", shell); r.status != 200 || r.pending || r.res.Status != "ok" {
		t.Fatalf("retry after the record landed: %d %s", r.status, r.body)
	}
	for id, want := range map[string]string{"c1": "ok", "c2": "ok", "c3": "ok"} {
		if g := p.send("GET", "/calls/"+id, ""); g.status != 200 || g.res.Status != want {
			t.Errorf("record %s: %d %s", id, g.status, g.body)
		}
	}
	if got := countLines(t, count); got["a"] != 1 || got["b"] != 1 || got["c"] != 1 || len(got) != 3 {
		t.Fatalf("side effects %v, want a, b and c once each", got)
	}
}

// TestFaultKill9SQLite: a call running when the process is killed reads
// E_INTERRUPTED after a restart, for GET and for a retry, and does not run
// again.
func TestFaultKill9SQLite(t *testing.T) {
	ws, data := t.TempDir(), t.TempDir()
	env := []string{"TOOLSVC_WORKSPACE=" + ws, "TOOLSVC_DATA_DIR=" + data, "TOOLSVC_STORE_WAIT_TIMEOUT=2s"}
	p := startBinary(t, env...)
	if a := p.send("POST", "/calls", appendCall("k0", "a")); a.status != 200 {
		t.Fatalf("before the kill: %d %s", a.status, a.body)
	}
	call := `{"toolCallId":"k1","toolName":"shell__exec","approval":{"granted":true},"arguments":{"command":"sleep 30"}}`
	go func() {
		req, _ := http.NewRequest("POST", p.base+"/calls", strings.NewReader(call))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if g := p.send("GET", "/calls/k1", ""); g.status == 202 && g.res.Status == "running" {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("k1 never ran:\n%s", p.log())
		}
	}
	// A retry of a running call waits at most the wait deadline.
	if r := p.send("POST", "/calls", call); r.status != 202 || r.res.Status != "running" {
		t.Errorf("retry of a running call: %d %s, want 202 running", r.status, r.body)
	} else {
		within(t, "a retry of a running call", r, 2*time.Second+3*time.Second)
	}
	p.kill9()

	p = startBinary(t, env...)
	g := p.send("GET", "/calls/k1", "")
	if g.status != 200 || g.res.code() != "E_INTERRUPTED" {
		t.Fatalf("k1 after kill -9 and restart: %d %s", g.status, g.body)
	}
	if r := p.send("POST", "/calls", call); r.res.code() != "E_INTERRUPTED" {
		t.Fatalf("retry of k1: %d %s", r.status, r.body)
	}
	if g := p.send("GET", "/calls/k0", ""); g.status != 200 || g.res.Status != "ok" {
		t.Fatalf("k0 after restart: %d %s", g.status, g.body)
	}
	if got := countLines(t, filepath.Join(ws, "callers/anonymous/default", "count.txt")); got["a"] != 1 || len(got) != 1 {
		t.Fatalf("side effects %v", got)
	}
}

// TestFaultSQLiteFullVolume: on a 2 MiB volume that fills, calls answer
// 503 (never 200 with a lost record), /readyz notices failing writes, and
// once space is freed the service recovers; the WAL stays bounded.
func TestFaultSQLiteFullVolume(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 2 MiB tmpfs (needs root): %v %s", err, out)
	}
	defer exec.Command("umount", "-l", dir).Run()
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	p := startBinary(t, "TOOLSVC_WORKSPACE="+ws, "TOOLSVC_DATA_DIR="+filepath.Join(dir, "data"), "TOOLSVC_STORE_TIMEOUT=2s")
	big := strings.Repeat("x", 8000)
	acked := []string{}
	failed, refused := 0, 0
	for i := 0; i < 400 && failed < 5; i++ {
		id := fmt.Sprintf("v%d", i)
		body := fmt.Sprintf(`{"toolCallId":%q,"toolName":"fs__write","arguments":{"path":"count.txt","content":"%s %s\n","mode":"append"}}`, id, id, big)
		a := p.send("POST", "/calls", body)
		switch {
		case a.status == 200 && a.res.Status == "ok" && !a.pending:
			acked = append(acked, id)
		case a.status == 503 || (a.status == 200 && a.pending):
			failed++
			if a.status == 503 {
				refused++
			}
			if a.status == 503 && (!strings.Contains(a.body, "the call store is out of disk space; the call did not run") || a.header.Get("Retry-After") != "30") {
				t.Errorf("a call refused for want of disk space: %s (Retry-After %q), want it to say the store is out of disk space, with Retry-After 30", a.body, a.header.Get("Retry-After"))
			}
		case a.status == 200 && a.res.code() == "E_INVALID_ARGUMENTS":
			t.Fatalf("the test's call is invalid: %s", a.body)
		default:
			t.Fatalf("call %s on a filling volume: %d %s", id, a.status, a.body)
		}
	}
	if failed == 0 {
		t.Fatalf("the volume never filled (%d calls acknowledged)", len(acked))
	}
	t.Logf("%d calls acknowledged; %d failed, %d of them refused with 503", len(acked), failed, refused)
	if r := p.send("GET", "/readyz", ""); r.status != 503 || !strings.Contains(r.body, "store") {
		t.Errorf("/readyz on a full volume: %d %s", r.status, r.body)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	var ready answer
	for start := time.Now(); time.Since(start) < 30*time.Second; time.Sleep(200 * time.Millisecond) {
		if ready = p.send("GET", "/readyz", ""); ready.status == 200 {
			break
		}
	}
	if ready.status != 200 {
		t.Fatalf("/readyz after space was freed: %d %s", ready.status, ready.body)
	}
	if a := p.send("POST", "/calls", appendCall("after", "after")); a.status != 200 || a.res.Status != "ok" {
		t.Fatalf("call after space was freed: %d %s", a.status, a.body)
	}
	for _, id := range acked {
		if g := p.send("GET", "/calls/"+id, ""); g.status != 200 || g.res.Status != "ok" {
			t.Fatalf("acknowledged %s: %d %s", id, g.status, g.body)
		}
	}
	got := countLines(t, filepath.Join(ws, "callers/anonymous/default", "count.txt"))
	for l, n := range got {
		if n != 1 {
			t.Errorf("side effect %.20s… ran %d times", l, n)
		}
	}
	for _, id := range acked {
		if got[id+" "+big] != 1 {
			t.Errorf("acknowledged call %s: its side effect is not in the file once", id)
		}
	}
	if got["after"] != 1 {
		t.Errorf("the call after space was freed: its side effect is not in the file once")
	}
	if wal, err := os.Stat(filepath.Join(dir, "data", "toolsvc.db-wal")); err == nil && wal.Size() > 1<<20+64<<10 {
		t.Errorf("WAL is %d bytes, want it bounded near 1 MiB", wal.Size())
	}
}

// TestFaultPostgresBlackholedShutdown: with the database blackholed, a
// SIGTERM still ends the process soon after the shutdown timeout. A
// connection whose query was cut sends PostgreSQL a cancel request, and
// pgx waited up to 15 s for each such one when the pool closed.
func TestFaultPostgresBlackholedShutdown(t *testing.T) {
	proxy, store := postgresThroughProxy(t)
	defer proxy.Resume()
	p := startBinary(t, append(store, "TOOLSVC_SHUTDOWN_TIMEOUT=2s")...)
	if a := p.send("POST", "/calls", appendCall("s1", "a")); a.status != 200 {
		t.Fatalf("before any fault: %d %s", a.status, a.body)
	}
	proxy.Pause()
	for i := range 3 {
		if a := p.send("POST", "/calls", appendCall(fmt.Sprintf("s%d", i+2), "b")); a.status != 503 {
			t.Fatalf("a call with the database blackholed: %d %s, want 503", a.status, a.body)
		}
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	// The shutdown timeout, the store's deadline for what is held, and a
	// margin for a loaded machine; pgx's own wait was 15 s.
	const limit = 2*time.Second + 1*time.Second + 5*time.Second
	select {
	case <-p.exited:
		t.Logf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(limit):
		t.Fatalf("still running %s after SIGTERM with the database blackholed:\n%s", limit, p.log())
	}
}

// TestFaultSpillsLeaveRoomForCalls: kept outputs stop short of filling
// the embedded store's volume. A read-only call could spill until the disk
// was full, after which no call could be recorded (503), readiness failed,
// and the sweep could not delete the expired spills (a DELETE needs room
// in WAL mode), so the service stayed down until someone freed space.
func TestFaultSpillsLeaveRoomForCalls(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a 16 MiB tmpfs (needs root): %v %s", err, out)
	}
	defer exec.Command("umount", "-l", dir).Run()
	p := startBinary(t, "TOOLSVC_DATA_DIR="+filepath.Join(dir, "data"))
	notKept := 0
	for i := range 8 {
		// 3 MB of output each, cut to the output limit and kept.
		a := p.send("POST", "/calls", fmt.Sprintf(`{"toolCallId":"big%d","toolName":"json__query","arguments":{"program":"\"x\" * 3000000","input":null}}`, i))
		if a.status != 200 || a.res.Status != "ok" {
			t.Fatalf("call %d: %d %s", i, a.status, a.body)
		}
		if strings.Contains(string(a.res.Output), "the full output was not kept") {
			notKept++
		}
	}
	if notKept == 0 {
		t.Fatalf("24 MB of outputs were all kept on a 16 MiB volume")
	}
	if !strings.Contains(p.log(), "kept outputs leave") {
		t.Errorf("the log does not say why outputs were not kept:\n%s", p.log())
	}
	if r := p.send("GET", "/readyz", ""); r.status != 200 {
		t.Errorf("/readyz with the volume's reserve left: %d %s", r.status, r.body)
	}
	if a := p.send("POST", "/calls", `{"toolName":"fs__write","arguments":{"path":"after.txt","content":"x"}}`); a.status != 200 || a.res.Status != "ok" {
		t.Errorf("a call that must be recorded, after the spills: %d %s", a.status, a.body)
	}
}
