package worker

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestHeapGaugeReadsHeldHeap checks the gauge against runtime.MemStats
// while 64 MiB are live.
func TestHeapGaugeReadsHeldHeap(t *testing.T) {
	live := make([]byte, 64<<20)
	for i := range live {
		live[i] = byte(i)
	}
	g := newHeapGauge()
	got := g.held()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	want := m.HeapSys - m.HeapReleased
	runtime.KeepAlive(live)
	if got < 64<<20 {
		t.Fatalf("held %d bytes with 64 MiB live", got)
	}
	if diff := int64(got) - int64(want); diff > 8<<20 || diff < -8<<20 {
		t.Errorf("held %d bytes, MemStats HeapSys-HeapReleased %d", got, want)
	}
}

// TestIdleWorkerGivesBackItsHeap: a call that needed a large heap leaves
// its worker small once it has answered.
func TestIdleWorkerGivesBackItsHeap(t *testing.T) {
	p := newPoolWith(t, Options{MemoryLimit: 2 << 30, Size: 1})
	out, err := call(t, p, context.Background(), "json__query", jq(`[range(3000000)] | length`, `null`))
	if err != nil || !strings.Contains(fmt.Sprintf("%s", out), `"results":[3000000]`) {
		t.Fatalf("%s %v", out, err)
	}
	p.mu.Lock()
	if len(p.idle) != 1 {
		p.mu.Unlock()
		t.Fatalf("%d idle workers, want 1", len(p.idle))
	}
	pid := p.idle[0].cmd.Process.Pid
	p.mu.Unlock()
	// The worker gives its heap back after it has answered: wait for it.
	// What it gave back is measured against its peak, not as a size, as
	// a race build keeps the detector's shadow of the heap resident.
	const gone = 80 << 20
	var rss, hwm int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		rss, hwm = procMemory(t, pid)
		if rss <= hwm-gone || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("worker RSS %d MiB, peak %d MiB", rss>>20, hwm>>20)
	if hwm < gone+64<<20 {
		t.Fatalf("the call peaked at %d MiB; it should need more than %d MiB", hwm>>20, (gone+64<<20)>>20)
	}
	if rss > hwm-gone {
		t.Errorf("an idle worker holds %d MiB after a call that needed %d MiB: it gave back less than %d MiB", rss>>20, hwm>>20, gone>>20)
	}
}

// procMemory reads a process's resident and peak resident memory.
func procMemory(t *testing.T, pid int) (rss, hwm int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = n << 10
		case "VmHWM:":
			hwm = n << 10
		}
	}
	return rss, hwm
}
