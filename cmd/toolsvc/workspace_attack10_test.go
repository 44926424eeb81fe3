package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
)

// TestStartRefusesAnUnwritableWorkspace: a workspace the service's user
// cannot write (a root-owned volume in a container running as 65532)
// started, /readyz answered 200, and every fs__list, fs__write and
// shell__exec then failed with E_TOOL "cannot open the workspace:
// workspace: callers: mkdirat callers: permission denied". The start stops
// now, as it does for such a TOOLSVC_DATA_DIR, and says what to do. An
// immutable directory (chattr +i) refuses new entries even to root.
func TestStartRefusesAnUnwritableWorkspace(t *testing.T) {
	ws := t.TempDir()
	if out, err := exec.Command("chattr", "+i", ws).CombinedOutput(); err != nil {
		t.Skipf("chattr +i is not available here (%v: %s); the test needs a directory no entry can be made in", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", ws).Run() })
	addr := freeAddr(t)
	environ := []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_LOG_FLUSH_INTERVAL=0", "TOOLSVC_WORKSPACE=" + ws, "TOOLSVC_DATA_DIR=" + t.TempDir()}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := &logtest.Buffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"toolsvc"}, environ, io.Discard, logs) }()
	var err error
	for deadline := time.Now().Add(time.Minute); err == nil; {
		select {
		case err = <-done:
			if err == nil {
				t.Fatal("run returned without an error")
			}
			continue
		case <-time.After(20 * time.Millisecond):
		}
		if resp, gerr := http.Get("http://" + addr + "/readyz"); gerr == nil {
			resp.Body.Close()
			t.Fatalf("toolsvc serves (/readyz %d) with a workspace it cannot write\n%s", resp.StatusCode, logs)
		}
		if time.Now().After(deadline) {
			t.Fatalf("run has neither returned nor served after a minute\n%s", logs)
		}
	}
	for _, want := range []string{"TOOLSVC_WORKSPACE " + ws + " cannot be written by this process (uid ", "chown -R ", "fsGroup", "or set TOOLSVC_WORKSPACE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run: %v, want it to say %q", err, want)
		}
	}
	// toolsvc validate says so too: the configuration would not start.
	err = run(context.Background(), []string{"toolsvc", "validate"}, environ, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "TOOLSVC_WORKSPACE "+ws+" cannot be written") {
		t.Errorf("toolsvc validate: %v", err)
	}
}
