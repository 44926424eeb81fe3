//go:build linux

package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// applyCeiling bounds the memory the process can come to hold, with two
// kernel limits:
//
//   - RLIMIT_DATA, which since Linux 4.7 counts every private writable
//     mapping (the Go heap, goroutine and thread stacks) but not address
//     space the runtime only reserves (PROT_NONE).
//   - RLIMIT_AS at the address space in use now plus limit. RLIMIT_DATA
//     alone leaks: the kernel does not charge a MAP_FIXED mapping for the
//     pages it replaces, and the Go runtime commits heap by mapping
//     read-write over its own PROT_NONE reservation, so a fresh worker
//     could fill a 1 GB allocation under a 256 MiB RLIMIT_DATA. Every
//     reservation is charged to the address space, so the growth of the
//     heap, however it is committed, stays within limit.
//
// An allocation past either fails in the kernel and the Go runtime exits
// with "out of memory", which the parent reports.
func applyCeiling(limit int64) error {
	data := unix.Rlimit{Cur: uint64(limit), Max: uint64(limit)}
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &data); err != nil {
		return fmt.Errorf("worker: setrlimit(RLIMIT_DATA, %d): %w", limit, err)
	}
	inUse, err := addressSpace()
	if err != nil {
		return err
	}
	as := unix.Rlimit{Cur: uint64(inUse + limit), Max: uint64(inUse + limit)}
	if err := unix.Setrlimit(unix.RLIMIT_AS, &as); err != nil {
		return fmt.Errorf("worker: setrlimit(RLIMIT_AS, %d): %w", inUse+limit, err)
	}
	var core unix.Rlimit
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &core); err != nil {
		return fmt.Errorf("worker: setrlimit(RLIMIT_CORE): %w", err)
	}
	return nil
}

// addressSpace returns the process's virtual memory size in bytes (the
// first field of /proc/self/statm, in pages).
func addressSpace() (int64, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, fmt.Errorf("worker: reading the address space in use: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("worker: /proc/self/statm is empty")
	}
	pages, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("worker: /proc/self/statm: %w", err)
	}
	return pages * int64(os.Getpagesize()), nil
}
