// Command toolsvc serves tool calls for LLM gateways over HTTP/JSON.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"
	"time"
)

func main() {
	ctx := context.Background()
	if serves(os.Args) {
		// The first signal drains; a second one ends the process at once,
		// as the default action does (the store keeps what was
		// acknowledged, and a call it recorded as running reads
		// E_INTERRUPTED after). The other commands keep the default
		// action: the shell interpreter and the tool workers, this binary
		// re-executed, must die at the SIGTERM that stops their call, not
		// run the rest of a command line until the SIGKILL after it.
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
		defer stop()
		context.AfterFunc(ctx, stop)
		// A reader of stdout or stderr that goes away (the pipe closed)
		// must cost log lines, not the service: Go ends the process with
		// SIGPIPE at a write to a broken pipe on fd 1 or 2 unless SIGPIPE
		// is notified, and then the write fails with EPIPE and the log
		// counts the lines (toolsvc_log_lines_dropped_total). Notified,
		// not ignored: an ignored signal stays ignored in the programs
		// the tools run, which then no longer stop at a closed pipe.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	}
	// Only a change is set: setting GOMAXPROCS stops the runtime from
	// following later changes of the CPU limit.
	embedded := os.Getenv("TOOLSVC_STORE_URL") == ""
	if n := minProcs(runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS"), embedded); serves(os.Args) && n != runtime.GOMAXPROCS(0) {
		runtime.GOMAXPROCS(n)
	}
	if os.Getenv("GOGC") == "" && serves(os.Args) { // a GOGC set is the runtime's already
		debug.SetGCPercent(defaultGCPercent)
		go tuneGC(ctx, 100*time.Millisecond, liveHeap, debug.SetGCPercent)
	}
	if err := run(ctx, os.Args, os.Environ(), os.Stdout, os.Stderr); err != nil {
		// A stderr nobody reads (a full pipe) would block this write, and
		// the exit after it, for good.
		written := make(chan struct{})
		go func() {
			fmt.Fprintln(os.Stderr, "toolsvc:", err)
			close(written)
		}()
		select {
		case <-written:
		case <-time.After(time.Second):
		}
		os.Exit(1)
	}
}

// serves reports whether args run the service (the default command).
func serves(args []string) bool { return len(args) < 2 || args[1] == "serve" }

// minProcs returns the GOMAXPROCS the service runs with: at least 2 on
// the embedded store, unless the GOMAXPROCS environment variable (env)
// chose a value.
//
// Go derives its default from the CPUs the process may run on, and one
// CPU in the affinity mask (a pinned container, taskset) gives 1, with no
// floor of 2 as a cgroup CPU limit gets. With one P, every fsync of the
// embedded store (a system call that keeps its P until the runtime's
// monitor takes it back) stalls the whole process, and goroutines whose
// connections became readable wait behind the ones the store wakes:
// under 32 connections of fs__write on one CPU, 1 P gave 604 calls/s with
// p99 1.43 s and timeouts, 2 Ps 1,036 calls/s with p99 76 ms.
//
// PostgreSQL is reached over the network, which never holds a P while it
// waits; there a second P on one CPU only cost (0.8 times the calls a
// second, read-only and side-effecting alike), so it is left to Go.
func minProcs(current int, env string, embedded bool) int {
	if env != "" || !embedded {
		return current
	}
	return max(current, 2)
}

// defaultGCPercent is the GOGC the service runs with when the GOGC
// environment variable is unset and the live heap is small.
//
// The live heap of a serving process is small (about 4 MiB under read-only
// load), so at Go's default of 100 the collector runs about 27 times a
// second. At 400 it ran 54 times instead of 215 in 8 s of fs__stat load,
// its share of the CPU fell from 9 % to 3 %, and the server's CPU per call
// was 0.93× (0.79× in a quieter earlier sitting), for a peak RSS of about
// 73 MB instead of 53 MB (BENCHMARKS.md). A large live heap (large
// outputs in flight, a large catalog) would grow four times over before a
// collection, so tuneGC lowers GOGC as the live heap grows: see
// gcPercentFor. GOMEMLIMIT, when set, still bounds the heap.
const defaultGCPercent = 400

// maxGCHeadroom bounds how far the heap may grow past the live heap
// before a collection when GOGC is unset, until Go's own 100 % allows
// more. Read-only load keeps the live heap near 4 MiB, so it still runs
// at 400.
const maxGCHeadroom = 32 << 20

// gcPercentFor is the GOGC for a live heap of live bytes when GOGC is
// unset: 400 while that leaves at most maxGCHeadroom of growth (a live
// heap up to 8 MiB), then what leaves maxGCHeadroom, in steps of 25, and
// Go's 100 from a live heap of 32 MiB. Under the soak's mix of large
// outputs a fixed 400 let RSS grow by 272 MiB at peak, Go's 100 by 88,
// this by 72 (with 64 MiB of headroom: 104).
func gcPercentFor(live uint64) int {
	if live == 0 {
		return defaultGCPercent
	}
	p := min(uint64(defaultGCPercent), maxGCHeadroom*100/live)
	return max(100, int(p)/25*25)
}

// tuneGC sets GOGC (through set) to gcPercentFor the live heap, read
// every interval, until ctx ends.
func tuneGC(ctx context.Context, every time.Duration, live func() uint64, set func(int) int) {
	t := time.NewTicker(every)
	defer t.Stop()
	current := defaultGCPercent
	for {
		if p := gcPercentFor(live()); p != current {
			set(p)
			current = p
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// liveHeap is the heap the last collection found live, in bytes.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// gcPercentNow returns the runtime's current GOGC, or -1 when the
// collector is off.
func gcPercentNow() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 100
	}
	// The runtime stores the percentage as an int32, -1 for off, and
	// reports it converted to uint64.
	return int(int32(s[0].Value.Uint64()))
}
