//go:build linux

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// daemonScript daemonises the classic way: fork, setsid, fork again, so
// the grandchild leads a session and process group of its own and is
// re-parented when the first child exits. argv: marker (so the test
// finds the grandchild), stdio ("close": the grandchild points its stdio
// at /dev/null; "keep": it keeps the call's stdout open) and end ("exit":
// the program exits at once; "wait": it sleeps, to be stopped). The
// grandchild appends to "beat" in the working directory until killed;
// "ready" says it runs.
const daemonScript = `
import os, sys, time
marker, stdio, end = sys.argv[1:4]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        if stdio == "close":
            fd = os.open("/dev/null", os.O_RDWR)
            for i in (0, 1, 2):
                os.dup2(fd, i)
        open("ready", "w").close()
        while True:
            with open("beat", "a") as f:
                f.write("x")
            time.sleep(0.1)
    os._exit(0)
os.wait()
while not os.path.exists("ready"):
    time.sleep(0.01)
print("started", flush=True)
if end == "wait":
    time.sleep(60)
`

// daemonEntry is an entry (as the shell interpreter is one) that runs
// the program in args and returns: what the program left running must not
// outlive the call either.
func daemonEntry(programs *Programs, args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := programs.Start(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// python finds python3 and what it needs to execute under Landlock.
func python(t *testing.T) (string, []string) {
	t.Helper()
	py, err := LookPath("python3")
	if err != nil {
		t.Skip("no python3 in", DefaultPath)
	}
	deps, err := ExecDeps(py)
	if err != nil {
		t.Fatal(err)
	}
	return py, append([]string{py}, deps...)
}

// marked returns a marker unique to this test and registers a clean-up
// that kills whatever still carries it, so a failing run leaves nothing.
func marked(t *testing.T) string {
	t.Helper()
	m := fmt.Sprintf("toolsvc-test-daemon-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		for _, p := range procsWithArg(t, m) {
			pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return m
}

// awaitGone polls until no process carries marker; the deadline is
// generous because the check is that they go at all, not how fast.
func awaitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := procsWithArg(t, marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for i, p := range left {
				left[i], _, _ = strings.Cut(p, " ") // "<pid>: <program>"
			}
			t.Fatalf("processes left running 10 s after the call: %q", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDaemonsDieWithTheCall: a program that leaves its process group and
// session (setsid and a double fork) is still killed when its call ends,
// whether the program exits, keeps the call's stdout open, or runs into
// the timeout, and whether it is a program or an entry's child.
func TestDaemonsDieWithTheCall(t *testing.T) {
	py, allow := python(t)
	cases := []struct {
		name, stdio, end string
		entry            bool
		timeout          time.Duration
	}{
		{name: "exits", stdio: "close", end: "exit"},
		{name: "keeps-stdout", stdio: "keep", end: "exit"},
		{name: "timeout", stdio: "close", end: "wait", timeout: 2 * time.Second},
		{name: "entry", stdio: "close", end: "exit", entry: true},
	}
	for _, mode := range []Mode{ModeBestEffort, ModeRequired} {
		for _, c := range cases {
			t.Run(string(mode)+"/"+c.name, func(t *testing.T) {
				if mode == ModeRequired {
					needLandlock(t)
				}
				s := newSandbox(t, mode, Limits{})
				marker := marked(t)
				ws := t.TempDir()
				ctx := context.Background()
				if c.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.timeout)
					defer cancel()
				}
				sp := Spec{Args: []string{py, "-c", daemonScript, marker, c.stdio, c.end}, Workspace: ws, AllowExec: allow}
				if c.entry {
					sp.Entry = "daemon"
				}
				res, err := s.Run(ctx, sp)
				if c.timeout > 0 {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("want a deadline error, got %v (%+v, stderr %q)", err, res, res.Stderr)
					}
				} else if err != nil || res.ExitCode != 0 {
					t.Fatalf("%v %+v, stderr %q", err, res, res.Stderr)
				}
				if _, err := os.Stat(filepath.Join(ws, "ready")); err != nil {
					t.Fatalf("the daemon never started (stderr %q): %v", res.Stderr, err)
				}
				awaitGone(t, marker)
			})
		}
	}
}

// sleeperScript creates "ready" and sleeps: a program without a daemon,
// for mode off, where only the program itself dies with the service.
const sleeperScript = `
import sys, time
open("ready", "w").close()
time.sleep(60)
`

// killHelper plays the service in TestServiceKilled: in mode args[0], it
// runs daemonScript (sleeperScript in mode off) in the workspace args[1]
// with marker args[2] and a long timeout.
func killHelper(args []string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	s, err := New(Options{Mode: Mode(args[0]), SelfExe: exe, KillGrace: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	py, err := LookPath("python3")
	if err != nil {
		return err
	}
	deps, err := ExecDeps(py)
	if err != nil {
		return err
	}
	argv := []string{py, "-c", daemonScript, args[2], "close", "wait"}
	if s.Mode() == ModeOff {
		argv = []string{py, "-c", sleeperScript, args[2]}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = s.Run(ctx, Spec{Args: argv, Workspace: args[1], AllowExec: append([]string{py}, deps...)})
	return err
}

// TestServiceKilled: when the service is killed with SIGKILL in the
// middle of a call, the program and what it started (a daemon in a
// session of its own included) die too, long before the call's timeout;
// in mode off, without a reaper, the program itself does.
func TestServiceKilled(t *testing.T) {
	python(t)
	for _, mode := range []Mode{ModeBestEffort, ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			marker := marked(t)
			ws := t.TempDir()
			helper := exec.Command(selfExe(t), "kill-helper", string(mode), ws, marker)
			helper.Stderr = os.Stderr
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- helper.Wait() }()
			deadline := time.Now().Add(30 * time.Second)
			for {
				if _, err := os.Stat(filepath.Join(ws, "ready")); err == nil {
					break
				}
				select {
				case err := <-exited:
					t.Fatalf("the helper ended before the program was ready: %v", err)
				case <-time.After(20 * time.Millisecond):
				}
				if time.Now().After(deadline) {
					_ = helper.Process.Kill()
					t.Fatal("the program did not start")
				}
			}
			want := 2 // the program and its daemon
			if mode == ModeOff {
				want = 1
			}
			if n := len(procsWithArg(t, marker)); n < want {
				t.Fatalf("%d processes run, want %d: %q", n, want, procsWithArg(t, marker))
			}
			if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-exited
			awaitGone(t, marker)
		})
	}
}

// TestDescendants: both ways of listing descendants (the children files
// and, for kernels without them, every process's stat) find a process's
// children and grandchildren, and nothing else.
func TestDescendants(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 33.1 & sleep 33.1 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	want := map[int]bool{cmd.Process.Pid: true}
	deadline := time.Now().Add(10 * time.Second)
	for len(want) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the sleeps did not start: %q", procsWithArg(t, "33.1"))
		}
		time.Sleep(10 * time.Millisecond)
		for _, p := range procsWithArg(t, "33.1") {
			pid, _ := strconv.Atoi(strings.SplitN(p, ":", 2)[0])
			if ppid, ok := parentOf(pid); ok && ppid == cmd.Process.Pid {
				want[pid] = true
			}
		}
	}
	defer func() {
		for pid := range want {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	for _, useFiles := range []bool{true, false} {
		if useFiles && !hasChildrenFiles() {
			continue
		}
		got := map[int]bool{}
		for _, p := range descendants(useFiles) {
			if p.fd >= 0 {
				syscall.Close(p.fd)
			}
			got[p.pid] = true
		}
		for pid := range want {
			if !got[pid] {
				t.Errorf("children files %v: %d not found in %v", useFiles, pid, got)
			}
		}
		for pid := range got {
			if !want[pid] {
				if ppid, _ := parentOf(pid); ppid != os.Getpid() {
					t.Errorf("children files %v: %d (parent %d) is no descendant", useFiles, pid, ppid)
				}
			}
		}
	}
}

// TestReapedHelper: a long-lived helper started with Reaped (an MCP
// server over stdio, say) leaves nothing running, a setsid'd daemon
// included, whether it exits or is stopped with SIGTERM, as its client
// stops it.
func TestReapedHelper(t *testing.T) {
	py, _ := python(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, end := range []string{"exit", "wait"} {
		t.Run(end, func(t *testing.T) {
			marker := marked(t)
			ws := t.TempDir()
			cmd := exec.Command(py, "-c", daemonScript, marker, "close", end)
			cmd.Dir = ws
			cmd.Env = []string{"PATH=" + DefaultPath}
			closer, err := Reaped(cmd, exe, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line := make([]byte, len("started\n"))
			if _, err := io.ReadFull(out, line); err != nil || string(line) != "started\n" {
				t.Fatalf("the helper said %q (%v)", line, err)
			}
			if end == "wait" {
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			err = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); (end == "exit") != (err == nil && code == 0) {
				t.Errorf("the helper ended with %v (exit code %d)", err, code)
			}
			awaitGone(t, marker)
		})
	}
}

// TestReapedStarted: Started says why a program under Reaped could not be
// executed (the reaper itself starts either way), and nothing for one
// that runs; a relative launcher still starts from another directory.
func TestReapedStarted(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(exe))
	rel := "./" + filepath.Base(exe)
	dir := t.TempDir()
	foreign := filepath.Join(dir, "foreign")
	if err := os.WriteFile(foreign, []byte("\x7fELF not really"), 0o755); err != nil {
		t.Fatal(err)
	}
	noInterp := filepath.Join(dir, "script")
	if err := os.WriteFile(noInterp, []byte("#!/nonexistent/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, program, want string }{
		{"runs", "/bin/true", ""},
		{"foreign binary", foreign, "exec " + foreign + ": exec format error"},
		{"missing interpreter", noInterp, "exec " + noInterp + ": no such file or directory"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(c.program)
			cmd.Dir = dir
			closer, err := Reaped(cmd, rel, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer closer.Close()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = closer.Started(ctx)
			if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && got != c.want) {
				t.Errorf("Started: %v, want %q", err, c.want)
			}
			if err := cmd.Wait(); (c.want == "") != (err == nil) {
				t.Errorf("the program ended with %v", err)
			}
		})
	}
}
