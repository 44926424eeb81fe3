package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBinaryKeepsTwoProcsOnOneCPU: started with one CPU in its affinity
// mask (a pinned container), the service on the embedded store still
// runs with GOMAXPROCS 2, unless GOMAXPROCS says otherwise; on
// PostgreSQL it keeps Go's 1.
func TestBinaryKeepsTwoProcsOnOneCPU(t *testing.T) {
	buildBinary(t) // outside the pinned thread: the build wants every CPU
	var floor, chosen, pg *proc
	pgURL := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
	onOneCPU(t, func() {
		floor = startBinary(t)
		chosen = startBinary(t, "GOMAXPROCS=1", "GOGC=100")
		if pgURL != "" {
			pg = startBinary(t, "TOOLSVC_STORE_URL="+pgURL, "TOOLSVC_STORE_SCHEMA=procs_"+strconv.FormatInt(time.Now().UnixNano(), 36))
		}
	})
	for _, p := range []*proc{floor, chosen, pg} {
		if p == nil {
			continue
		}
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
	gogc := regexp.MustCompile(`"msg":"toolsvc listening".*"gogc":(-?\d+)`)
	if m := gogc.FindStringSubmatch(floor.log()); m == nil || m[1] != strconv.Itoa(defaultGCPercent) {
		t.Errorf("by default: %q, want gogc %d\n%s", m, defaultGCPercent, floor.log())
	}
	if m := gogc.FindStringSubmatch(chosen.log()); m == nil || m[1] != "100" {
		t.Errorf("with GOGC=100: %q, want gogc 100\n%s", m, chosen.log())
	}
	if pg == nil {
		t.Log("TOOLSVC_TEST_POSTGRES_URL is not set: the PostgreSQL case is not checked")
		return
	}
	if m := procs.FindStringSubmatch(pg.log()); m == nil || m[1] != "1" {
		t.Errorf("on PostgreSQL: %q, want gomaxprocs 1\n%s", m, pg.log())
	}
}

// TestGCPercentNow: the GOGC the listening line reports is the runtime's,
// off included (the default of 400 is checked on the binary above).
func TestGCPercentNow(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(250))
	if got := gcPercentNow(); got != 250 {
		t.Errorf("gcPercentNow with the runtime at 250 = %d, want 250", got)
	}
	debug.SetGCPercent(-1)
	if got := gcPercentNow(); got != -1 {
		t.Errorf("gcPercentNow with the collector off = %d, want -1", got)
	}
}

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{{0, 400}, {4 * mib, 400}, {8 * mib, 400}, {9 * mib, 350}, {12 * mib, 250}, {20 * mib, 150}, {31 * mib, 100}, {32 * mib, 100}, {1 << 30, 100}} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

// TestTuneGC: the tuner follows the live heap both ways, and sets GOGC
// only when the value changes.
func TestTuneGC(t *testing.T) {
	const mib = 1 << 20
	lives := []uint64{4 * mib, 4 * mib, 20 * mib, 20 * mib, 200 * mib, 8 * mib}
	var (
		i   int
		set []int
	)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tuneGC(ctx, time.Millisecond, func() uint64 {
			l := lives[min(i, len(lives)-1)]
			if i++; i == len(lives)+1 {
				cancel()
			}
			return l
		}, func(p int) int { set = append(set, p); return 0 })
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("tuneGC did not return after its context ended")
	}
	if want := []int{150, 100, 400}; fmt.Sprint(set) != fmt.Sprint(want) {
		t.Errorf("GOGC set to %v, want %v", set, want)
	}
}

func TestMinProcs(t *testing.T) {
	for _, c := range []struct {
		current int
		env     string
		want    int
		pg      bool
	}{{1, "", 2, false}, {2, "", 2, false}, {8, "", 8, false}, {1, "1", 1, false}, {4, "4", 4, false}, {1, "", 1, true}, {4, "", 4, true}} {
		if got := minProcs(c.current, c.env, !c.pg); got != c.want {
			t.Errorf("minProcs(%d, %q, embedded %v) = %d, want %d", c.current, c.env, !c.pg, got, c.want)
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
