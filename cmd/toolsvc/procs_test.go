package main

import (
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBinaryKeepsTwoProcsOnOneCPU: started with one CPU in its affinity
// mask (a pinned container), the service still runs with GOMAXPROCS 2,
// unless GOMAXPROCS says otherwise.
func TestBinaryKeepsTwoProcsOnOneCPU(t *testing.T) {
	buildBinary(t) // outside the pinned thread: the build wants every CPU
	var floor, chosen *proc
	onOneCPU(t, func() {
		floor = startBinary(t)
		chosen = startBinary(t, "GOMAXPROCS=1")
	})
	for _, p := range []*proc{floor, chosen} {
		status, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid()) + "/status")
		if err != nil {
			t.Fatal(err)
		}
		if m := regexp.MustCompile(`(?m)^Cpus_allowed_list:\s*(\S+)$`).FindSubmatch(status); m == nil || strings.ContainsAny(string(m[1]), ",-") {
			t.Fatalf("the binary may run on more than one CPU (%q): the test set-up did not pin it", m)
		}
	}
	procs := regexp.MustCompile(`"msg":"toolsvc listening".*"gomaxprocs":(\d+)`)
	if m := procs.FindStringSubmatch(floor.log()); m == nil || m[1] != "2" {
		t.Errorf("on one CPU: %q, want gomaxprocs 2\n%s", m, floor.log())
	}
	if m := procs.FindStringSubmatch(chosen.log()); m == nil || m[1] != "1" {
		t.Errorf("with GOMAXPROCS=1: %q, want gomaxprocs 1\n%s", m, chosen.log())
	}
}

func TestMinProcs(t *testing.T) {
	for _, c := range []struct {
		current int
		env     string
		want    int
	}{{1, "", 2}, {2, "", 2}, {8, "", 8}, {1, "1", 1}, {4, "4", 4}} {
		if got := minProcs(c.current, c.env); got != c.want {
			t.Errorf("minProcs(%d, %q) = %d, want %d", c.current, c.env, got, c.want)
		}
	}
}

// onOneCPU runs fn on an OS thread whose affinity is one CPU, so the
// processes it starts inherit that mask. The thread is discarded after.
func onOneCPU(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			t.Error(err)
			return
		}
		first := -1
		for i := 0; i < 1024 && first < 0; i++ {
			if set.IsSet(i) {
				first = i
			}
		}
		var one unix.CPUSet
		one.Set(first)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
	if t.Failed() {
		t.FailNow()
	}
}
