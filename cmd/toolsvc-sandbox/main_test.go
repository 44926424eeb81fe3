//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// daemonScript forks, calls setsid and forks again (argv: a marker, then
// "close" to point the grandchild's stdio at /dev/null or "keep" to keep
// the call's stdout open, then "wait" for the program to sleep after
// that); the grandchild creates "ready" and sleeps until killed.
const daemonScript = `
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        if sys.argv[2] == "close":
            fd = os.open("/dev/null", os.O_RDWR)
            for i in (0, 1, 2):
                os.dup2(fd, i)
        open("ready", "w").close()
        time.sleep(120)
    os._exit(0)
os.wait()
while not os.path.exists("ready"):
    time.sleep(0.01)
if sys.argv[3] == "wait":
    time.sleep(120)
`

// TestMain: with "service" the test binary plays toolsvc for
// TestServiceKilled (args: launcher, workspace, marker).
func TestMain(m *testing.M) {
	if len(os.Args) > 4 && os.Args[1] == "service" {
		s, err := newSandbox(os.Args[2])
		if err == nil {
			_, err = run(context.Background(), s, os.Args[3], os.Args[4], "close", "wait")
		}
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

var (
	buildOnce sync.Once
	launcher  string
	buildErr  error
)

// build builds this launcher once.
func build(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toolsvc-sandbox-bin-")
		if err != nil {
			buildErr = err
			return
		}
		launcher = filepath.Join(dir, "toolsvc-sandbox")
		if out, err := exec.Command("go", "build", "-o", launcher, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return launcher
}

func newSandbox(launcher string) (*sandbox.Sandbox, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return sandbox.New(sandbox.Options{Mode: sandbox.ModeBestEffort, SelfExe: self, Launcher: launcher, KillGrace: 200 * time.Millisecond})
}

// run runs daemonScript in ws as an exec tool's program is run.
func run(ctx context.Context, s *sandbox.Sandbox, ws, marker, stdio, end string) (sandbox.Result, error) {
	py, err := sandbox.LookPath("python3")
	if err != nil {
		return sandbox.Result{}, err
	}
	deps, err := sandbox.ExecDeps(py)
	if err != nil {
		return sandbox.Result{}, err
	}
	return s.Run(ctx, sandbox.Spec{Args: []string{py, "-c", daemonScript, marker, stdio, end}, Workspace: ws,
		AllowExec: append([]string{py}, deps...)})
}

// marked returns a fresh marker; whatever carries it is killed at the end.
func marked(t *testing.T) string {
	t.Helper()
	if _, err := sandbox.LookPath("python3"); err != nil {
		t.Skip("no python3 in", sandbox.DefaultPath)
	}
	m := fmt.Sprintf("toolsvc-launcher-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		for _, pid := range carrying(m) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return m
}

// carrying lists the processes with marker on their command line.
func carrying(marker string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(marker)) {
			out = append(out, pid)
		}
	}
	return out
}

// awaitGone waits up to 10 s for every process carrying marker to end.
func awaitGone(t *testing.T, marker string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left := carrying(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still run 10 s after the call", left)
		}
	}
}

// TestDaemonsDieWithTheCall: through the launcher, as the service runs an
// exec tool, a program's daemon (setsid, double fork) ends with the call,
// whether it closed its stdio or keeps the call's stdout open.
func TestDaemonsDieWithTheCall(t *testing.T) {
	s, err := newSandbox(build(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, stdio := range []string{"close", "keep"} {
		t.Run(stdio, func(t *testing.T) {
			marker, ws := marked(t), t.TempDir()
			res, err := run(context.Background(), s, ws, marker, stdio, "exit")
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("%v %+v, stderr %q", err, res, res.Stderr)
			}
			if _, err := os.Stat(filepath.Join(ws, "ready")); err != nil {
				t.Fatal("the daemon did not start:", err)
			}
			awaitGone(t, marker)
		})
	}
}

// TestServiceKilled: when the service is killed with SIGKILL during a
// call, the program and its daemon end too.
func TestServiceKilled(t *testing.T) {
	l := build(t)
	marker, ws := marked(t), t.TempDir()
	svc := exec.Command(os.Args[0], "service", l, ws, marker)
	var stderr strings.Builder
	svc.Stderr = &stderr
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ws, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = svc.Process.Kill()
			_ = svc.Wait()
			t.Fatalf("the program did not start: %s", stderr.String())
		}
	}
	if n := len(carrying(marker)); n < 2 {
		t.Fatalf("%d processes run, want the program and its daemon", n)
	}
	_ = svc.Process.Signal(syscall.SIGKILL)
	_ = svc.Wait()
	awaitGone(t, marker)
}
