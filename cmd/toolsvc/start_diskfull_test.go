package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// smallVolume mounts a tmpfs of size (such as "4m") and returns it, or
// skips the test where that needs a privilege it has not.
func smallVolume(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs (needs root): %v %s", size, err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

// fillVolume writes a file on dir's volume until it leaves only leave
// bytes free (a multiple of the page size).
func fillVolume(t *testing.T, dir string, leave int64) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := int64(st.Bavail)*int64(st.Bsize) - leave
	buf := make([]byte, 1<<20)
	for n > 0 {
		w, err := f.Write(buf[:min(n, int64(len(buf)))])
		n -= int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Statfs(dir, &st); err != nil || int64(st.Bavail)*int64(st.Bsize) != leave {
		t.Fatalf("the volume has %d bytes free (%v), want %d", int64(st.Bavail)*int64(st.Bsize), err, leave)
	}
}

// stop stops the binary with SIGTERM and waits for it.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("the binary did not stop within 30s:\n%s", p.log())
	}
}

// TestStartOnFullVolume: the service starts on a data volume something
// else filled while it was stopped. SQLite needs room for its
// shared-memory file and WAL before it can read anything; the service
// failed every attempt with "creating schema_migrations: disk I/O error
// (4874)" for TOOLSVC_STORE_START_TIMEOUT and exited, and the sweep that
// frees the space of expired outputs and records never ran. The reserve
// file the service keeps on the volume is deleted at such a start.
func TestStartOnFullVolume(t *testing.T) {
	data := filepath.Join(smallVolume(t, "4m"), "data")
	p := startBinary(t, "TOOLSVC_DATA_DIR="+data)
	if a := p.send("POST", "/calls", `{"toolCallId":"before","toolName":"fs__write","arguments":{"path":"a.txt","content":"x"}}`); a.status != 200 || a.res.Status != "ok" {
		t.Fatalf("call: %d %s", a.status, a.body)
	}
	p.stop()
	fillVolume(t, filepath.Dir(data), 0)
	p = startBinary(t, "TOOLSVC_DATA_DIR="+data, "TOOLSVC_STORE_START_TIMEOUT=3s", "TOOLSVC_WORKSPACE="+p.ws)
	if !strings.Contains(p.log(), "its reserve file is deleted") {
		t.Errorf("the log does not say the reserve file was used:\n%s", p.log())
	}
	if r := p.send("GET", "/readyz", ""); r.status != 200 {
		t.Errorf("/readyz on a full volume once the reserve is used: %d %s", r.status, r.body)
	}
	if g := p.send("GET", "/calls/before", ""); g.status != 200 || g.res.Status != "ok" {
		t.Errorf("the call recorded before: %d %s", g.status, g.body)
	}
	if a := p.send("POST", "/calls", `{"toolCallId":"after","toolName":"fs__write","arguments":{"path":"b.txt","content":"x"}}`); a.status != 200 || a.res.Status != "ok" {
		t.Errorf("a call on the full volume once the reserve is used: %d %s", a.status, a.body)
	}
}

// runningRecord leaves in the store at data a record of a call that is
// running, as a process that was stopped while a result was held in
// memory does.
func runningRecord(t *testing.T, data, id string) {
	t.Helper()
	// A lease that has lapsed by the time the service starts.
	st, err := sqlite.Open(t.Context(), filepath.Join(data, "toolsvc.db"), sqlite.Options{Lease: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.BeginCall(t.Context(), &registry.CallRecord{CallerID: "anonymous", ToolCallID: id, ToolName: "fs__write",
		ArgumentsDigest: "d", State: registry.CallRunning}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
}

// TestStartWithRunningCallsOnFullVolume: a start that cannot end the calls
// an earlier process left running, for want of disk space, goes on. The
// service exited with "store: the call store is out of disk space", so
// the sweeps that free space never ran; now it warns and serves, and once
// there is room a read ends the record as E_INTERRUPTED.
func TestStartWithRunningCallsOnFullVolume(t *testing.T) {
	vol := smallVolume(t, "4m")
	data := filepath.Join(vol, "data")
	runningRecord(t, data, "held")
	// Room for SQLite's shared-memory file, none for its WAL.
	fillVolume(t, vol, 32<<10)
	p := startBinary(t, "TOOLSVC_DATA_DIR="+data, "TOOLSVC_STORE_START_TIMEOUT=3s")
	if !strings.Contains(p.log(), "calls left running by an earlier process are ended later") {
		t.Errorf("the log does not say the running calls were left:\n%s", p.log())
	}
	if r := p.send("GET", "/readyz", ""); r.status != 503 || !strings.Contains(r.body, "disk is full") {
		t.Errorf("/readyz on a full volume: %d %s", r.status, r.body)
	}
	if err := os.Remove(filepath.Join(vol, "filler")); err != nil {
		t.Fatal(err)
	}
	if g := p.send("GET", "/calls/held", ""); g.status != 200 || g.res.code() != "E_INTERRUPTED" {
		t.Errorf("the call left running, read once there is room: %d %s", g.status, g.body)
	}
}

// TestStoreStartNamesAFullVolume: a start that cannot open the embedded
// store on a full volume says so, and names the directory; SQLite's own
// error says only "disk I/O error (4874)".
func TestStoreStartNamesAFullVolume(t *testing.T) {
	data := filepath.Join(smallVolume(t, "2m"), "data")
	st, err := sqlite.Open(t.Context(), filepath.Join(data, "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	fillVolume(t, filepath.Dir(data), 0)
	cfg, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + data, "TOOLSVC_STORE_START_TIMEOUT=1s"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = openStoreRetrying(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "the data volume of TOOLSVC_DATA_DIR "+data+" is out of disk space (0 bytes free of ") {
		t.Errorf("open on a full volume: %v", err)
	}
}
