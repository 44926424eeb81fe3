//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runReaper is the reaper of one call: the process that stays the parent
// of the program, so that nothing the program starts can leave the call.
// It makes itself a child subreaper (PR_SET_CHILD_SUBREAPER): a process
// whose parent dies is re-parented to it, not to init, so everything the
// program starts stays its descendant, also in a session or process group
// of its own (setsid, double fork). It starts the confined child (which
// executes the program) in a process group of its own, with SIGKILL as
// its parent-death signal, and waits. When the program exits it kills
// every descendant left; on SIGTERM (the call stopped, or the service
// gone: that is the reaper's parent-death signal) it sends every
// descendant SIGTERM, and SIGKILL after the grace period. Then it exits
// with the program's status (128+n for a signal). It returns only when
// it cannot start the child.
func runReaper(cfg *childConfig, argv []string) error {
	// The child's parent-death signal follows the thread that starts it:
	// this thread stays with this goroutine until the process exits.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox reaper: prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	// Before the child exists, so no SIGTERM or SIGCHLD is missed.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM)
	child := *cfg
	child.Reaper, child.Child, child.Grace = false, "", 0
	files := []uintptr{0, 1, 2, setupFD}
	if cfg.WorkFD != 0 {
		files = append(files, uintptr(cfg.WorkFD))
		child.WorkFD = len(files) - 1
	}
	enc, err := child.encode()
	if err != nil {
		return fmt.Errorf("sandbox reaper: %w", err)
	}
	pid, err := syscall.ForkExec(cfg.Child, append([]string{cfg.Child, ChildCommand, enc, "--"}, argv...), &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		return fmt.Errorf("sandbox reaper: start %s: %w", cfg.Child, err)
	}
	// The set-up pipe and the workspace are the child's now: the service
	// reads the end of the pipe when the child executes the program.
	_ = unix.Close(setupFD)
	if cfg.WorkFD != 0 {
		_ = unix.Close(cfg.WorkFD)
	}
	// Straight to exit_group: there is nothing to flush, and a
	// race-enabled build (tests) would sleep a second in os.Exit.
	unix.Exit(reap(pid, cfg.Grace, sigs))
	return nil
}

// reap waits for the program (pid), or for SIGTERM on sigs, then stops
// every descendant and returns the exit status to pass on.
func reap(pid int, grace time.Duration, sigs <-chan os.Signal) int {
	var status unix.WaitStatus
	exited := false
	// collect reaps every child that has ended and reports whether none
	// is left: without children, this process has no descendants.
	collect := func() bool {
		for {
			var ws unix.WaitStatus
			p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			switch {
			case errors.Is(err, unix.EINTR):
			case err != nil: // ECHILD
				return true
			case p == 0:
				return false
			case p == pid:
				status, exited = ws, true
			}
		}
	}
	// settle waits for a child to end, at most d.
	settle := func(d time.Duration) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-sigs:
		case <-t.C:
		}
	}
	stopped := false
	for !exited && !stopped {
		// Orphans that end before the program are reaped as they go, so
		// their zombies do not count against RLIMIT_NPROC.
		stopped = <-sigs == unix.SIGTERM
		collect()
	}
	if stopped && !collect() {
		signalTree(unix.SIGTERM)
		for deadline := time.Now().Add(grace); !collect() && time.Now().Before(deadline); {
			settle(min(time.Until(deadline), 10*time.Millisecond))
		}
	}
	// Processes that fork while they are being killed leave orphans,
	// which come to this process and are killed on the next round.
	for deadline := time.Now().Add(reapLimit); !collect() && time.Now().Before(deadline); {
		signalTree(unix.SIGKILL)
		settle(5 * time.Millisecond)
	}
	switch {
	case !exited:
		return 128 + int(unix.SIGKILL)
	case status.Signaled():
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}

// signalTree sends sig to every descendant of this process.
func signalTree(sig unix.Signal) {
	for _, p := range descendants(hasChildrenFiles()) {
		if p.fd >= 0 {
			_ = unix.PidfdSendSignal(p.fd, sig, nil, 0)
			_ = unix.Close(p.fd)
		} else {
			_ = unix.Kill(p.pid, sig)
		}
	}
}

// proc is a process found by descendants, with a pidfd that pins it
// (-1 on a kernel without pidfds).
type proc struct{ pid, fd int }

// alive reports whether the pinned process still exists (unreaped), so
// its pid still names it.
func (p proc) alive() bool { return p.fd < 0 || unix.PidfdSendSignal(p.fd, 0, nil, 0) == nil }

// hasChildrenFiles reports whether /proc lists the children of each
// thread (CONFIG_PROC_CHILDREN, part of most distributions' kernels).
func hasChildrenFiles() bool {
	_, err := os.Stat("/proc/thread-self/children")
	return err == nil
}

// descendants walks the tree of this process's descendants from the top,
// with /proc/<pid>/task/<tid>/children (useFiles) or, where the kernel
// has no such files, the parent in every /proc/<pid>/stat. Each process
// is pinned with a pidfd and taken only if it is still the child of a
// process already taken (and still alive) after the pidfd was opened: a
// pid freed and reused by an unrelated process meanwhile is never
// signalled. The caller closes the pidfds.
func descendants(useFiles bool) []proc {
	var byParent map[int][]int
	childrenOf := func(pid int) []int {
		if useFiles {
			return childrenFiles(pid)
		}
		if byParent == nil {
			byParent = scanParents()
		}
		return byParent[pid]
	}
	var out []proc
	queue := []proc{{pid: os.Getpid(), fd: -1}}
	for len(queue) > 0 {
		parent := queue[0]
		queue = queue[1:]
		for _, pid := range childrenOf(parent.pid) {
			if p, ok := pin(pid, parent); ok {
				out = append(out, p)
				queue = append(queue, p)
			}
		}
	}
	return out
}

// pin opens a pidfd for pid and keeps it if the process is a child of
// parent. Where there is no pidfd to be had (ENOSYS before Linux 5.3,
// EPERM from a seccomp filter that does not know the call) the pid alone
// is used.
func pin(pid int, parent proc) (proc, bool) {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return proc{}, false // gone
	}
	if err != nil {
		fd = -1
	}
	p := proc{pid: pid, fd: fd}
	if ppid, ok := parentOf(pid); !ok || ppid != parent.pid || !p.alive() || !parent.alive() {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
		return proc{}, false
	}
	return p, true
}

// childrenFiles lists the children of every thread of pid.
func childrenFiles(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range bytes.Fields(b) {
			if c, err := strconv.Atoi(string(f)); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// scanParents maps each parent to its children, from every process's
// stat.
func scanParents() map[int][]int {
	out := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(pid); ok {
			out[ppid] = append(out[ppid], pid)
		}
	}
	return out
}

// parentOf reads the parent of pid from /proc/<pid>/stat: the fourth
// field, after the command name in parentheses (which may hold any
// character, so the last ")" ends it).
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:]) // state, ppid, ...
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(string(f[1]))
	return ppid, err == nil
}

// Reaped makes cmd (made by exec.Command, not yet started) run under a
// reaper of its own, started from launcher (the toolsvc-sandbox binary, or
// toolsvc itself): the program runs as it would have, unconfined, with
// cmd's environment, directory and standard streams, but nothing it
// starts can outlive it, a setsid'd daemon included. When the program
// exits, the reaper kills what it left running; on SIGTERM (which the
// reaper also gets when the process that started it dies) it stops the
// whole tree, SIGKILL following after grace. Signal the reaper, not the
// program: cmd.Process is the reaper.
//
// This is for the long-lived helpers the service starts and talks to
// (MCP servers over stdio); calls' programs go through Run. Once cmd has
// started, the Reaper's Started says why the program could not be
// executed, if it could not: a program that is not one (a bad #! line, a
// foreign binary) is found only then, and without it the server would
// just seem to close its output. Close the Reaper once cmd has ended.
func Reaped(cmd *exec.Cmd, launcher string, grace time.Duration) (*Reaper, error) {
	if cmd.Err != nil {
		return nil, cmd.Err // the program was not found: let Start say so
	}
	// The reaper starts in cmd.Dir, where a relative launcher is not.
	launcher, err := filepath.Abs(launcher)
	if err != nil {
		return nil, err
	}
	cfg := childConfig{Path: cmd.Path, NoPrivDrop: true, Reaper: true, Child: launcher, Grace: grace}
	enc, err := cfg.encode()
	if err != nil {
		return nil, err
	}
	// The reaper and the child report a failed set-up on fd 3: the child
	// closes it as it executes the program, so Started reads either the
	// failure or the end of the pipe.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Args = append([]string{launcher, ChildCommand, enc, "--"}, cmd.Args...)
	cmd.Path = launcher
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = procAttr(true)
	return &Reaper{r: r, w: w}, nil
}

// Reaper holds the set-up pipe of a program started under Reaped.
type Reaper struct {
	mu   sync.Mutex
	r, w *os.File
}

// Started waits, at most until ctx ends, for the program started under
// Reaped to be executed, and returns the reason it could not be. Call it
// once, after the command has started.
func (h *Reaper) Started(ctx context.Context) error {
	h.mu.Lock()
	r, w := h.r, h.w
	h.w = nil
	h.mu.Unlock()
	if r == nil || w == nil {
		return errors.New("sandbox: Started called twice, or after Close")
	}
	// The reaper and the child hold their own copies of the write end.
	_ = w.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = r.SetReadDeadline(d)
	}
	msg, err := io.ReadAll(io.LimitReader(r, maxReportBytes))
	if len(msg) > 0 {
		return errors.New(string(bytes.TrimSpace(msg[:min(len(msg), 4096)])))
	}
	if err != nil {
		return fmt.Errorf("sandbox: waiting for the program to start: %w", err)
	}
	return nil
}

// Close releases what the reaper was given.
func (h *Reaper) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	var errs []error
	if h.w != nil {
		errs = append(errs, h.w.Close())
		h.w = nil
	}
	if h.r != nil {
		errs = append(errs, h.r.Close())
		h.r = nil
	}
	return errors.Join(errs...)
}
