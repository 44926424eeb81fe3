//go:build linux

package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// applyCeiling bounds the memory the process can come to hold beyond
// what it holds now, with two kernel limits, each set to what is in use
// now plus limit:
//
//   - RLIMIT_DATA, which since Linux 4.7 counts every private writable
//     mapping (the Go heap, goroutine and thread stacks) but not address
//     space the runtime only reserves (PROT_NONE). What the process holds
//     at start counts: the runtime's own structures, and in a binary built
//     with cgo an 8 MiB stack for every thread (about 130 MiB in all for
//     toolsvc with cgo, 85 MiB without), so a limit of its own would leave
//     a small ceiling no room for the next thread or heap arena.
//   - RLIMIT_AS. RLIMIT_DATA alone leaks: the kernel does not charge a
//     MAP_FIXED mapping for the pages it replaces, and the Go runtime
//     commits heap by mapping read-write over its own PROT_NONE
//     reservation, so a fresh worker could fill a 1 GB allocation under a
//     256 MiB RLIMIT_DATA. Every reservation is charged to the address
//     space, so the growth of the heap, however it is committed, stays
//     within limit.
//
// An allocation past either fails in the kernel and the Go runtime exits
// with "out of memory", which the parent reports.
func applyCeiling(limit int64) error {
	size, data, err := inUse()
	if err != nil {
		return err
	}
	for _, l := range []struct {
		name     string
		resource int
		bytes    int64
	}{{"RLIMIT_DATA", unix.RLIMIT_DATA, data + limit}, {"RLIMIT_AS", unix.RLIMIT_AS, size + limit}, {"RLIMIT_CORE", unix.RLIMIT_CORE, 0}} {
		r := unix.Rlimit{Cur: uint64(l.bytes), Max: uint64(l.bytes)}
		if err := unix.Setrlimit(l.resource, &r); err != nil {
			return fmt.Errorf("worker: setrlimit(%s, %d): %w", l.name, l.bytes, err)
		}
	}
	return nil
}

// preferOOMKill sets the process's oom_score_adj to the most, 1000, so
// that where memory runs out (a container's cgroup holding the service,
// its workers and the shell's programs) the kernel's OOM killer kills a
// worker, whose call then fails with E_TOOL, before the service; raising
// one's own score needs no privilege. Best effort: without /proc the
// kernel chooses as it would.
func preferOOMKill() {
	if f, err := os.OpenFile("/proc/self/oom_score_adj", os.O_WRONLY, 0); err == nil {
		_, _ = f.WriteString("1000")
		_ = f.Close()
	}
}

// inUse returns the process's virtual memory size and its data (private
// writable memory and stack) in bytes: the first and sixth fields of
// /proc/self/statm, in pages.
func inUse() (size, data int64, err error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, 0, fmt.Errorf("worker: reading the memory in use: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 6 {
		return 0, 0, fmt.Errorf("worker: /proc/self/statm has %d fields, want at least 6", len(f))
	}
	var bytes [2]int64
	for i, field := range []string{f[0], f[5]} {
		pages, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("worker: /proc/self/statm: %w", err)
		}
		bytes[i] = pages * int64(os.Getpagesize())
	}
	return bytes[0], bytes[1], nil
}

// procAttr puts a worker in a process group of its own, so that a signal
// meant for the service's group (a terminal's ^C) does not kill it
// mid-call, and has the kernel kill it when the service dies: a worker
// running a runaway program would otherwise go on after a kill -9 of the
// service, until its own deadline (or for ever, for a call without one).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
