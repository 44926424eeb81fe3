package worker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// poolParentCommand makes the test binary a service with a pool whose one
// worker runs a program without end (a call without a deadline), and
// which prints the worker's pid.
const poolParentCommand = "pool-parent"

func poolParent() {
	exe, err := os.Executable()
	if err != nil {
		os.Exit(2)
	}
	p, err := New(Options{Exe: exe, Size: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	go p.Call(context.Background(), "json__query", &registry.Request{Name: "json__query", Arguments: json.RawMessage(jq(`last(range(1e15))`, `null`)), MaxOutputBytes: 16384})
	for {
		for _, pid := range children() {
			// Only the worker: the runtime forks a child of its own that
			// exits at once, to learn whether clone gives pidfds.
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmdline), "\x00"+Command+"\x00") {
				fmt.Println(pid)
				select {}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// children returns the pids of this process's children.
func children() []int {
	files, _ := filepath.Glob("/proc/self/task/*/children")
	var pids []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// cpuTicks returns the user CPU time pid has used, in clock ticks.
func cpuTicks(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 12 {
		return 0
	}
	n, _ := strconv.Atoi(f[11]) // utime, field 14 of stat
	return n
}

// A worker dies with the service: after a kill -9 of the service, a worker
// running a program without end would otherwise go on for ever.
func TestWorkersDieWithTheService(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, poolParentCommand)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = cmd.Process.Kill()
		t.Fatalf("the service printed %q (%v)", line, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	// Wait until the worker runs the program (it has had its request), so
	// that it cannot end on its own when its stdin closes.
	for start := time.Now(); cpuTicks(pid) < 20; time.Sleep(10 * time.Millisecond) {
		if !alive(pid) || time.Since(start) > 30*time.Second {
			_ = cmd.Process.Kill()
			t.Fatalf("worker %d did not run its program before the service was killed", pid)
		}
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("worker %d still runs 30 s after its service was killed", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
