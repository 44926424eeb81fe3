package registry

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"
)

// goid is the running goroutine's id, from its stack trace's first line.
func goid() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	f := bytes.Fields(b)
	return string(f[1])
}

func TestRunnersReuseAnIdleGoroutine(t *testing.T) {
	r := newRunners(time.Minute)
	ids := make(chan string)
	r.Go(func() { ids <- goid() })
	first := <-ids
	// The runner is idle once it waits on jobs again; retry until it is.
	for range 200 {
		r.Go(func() { ids <- goid() })
		if <-ids == first {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no call ran on the idle runner %s", first)
}

func TestRunnersRunConcurrentCallsAndExitWhenIdle(t *testing.T) {
	before := runtime.NumGoroutine()
	r := newRunners(20 * time.Millisecond)
	const n = 50
	var started, release sync.WaitGroup
	started.Add(n)
	release.Add(1)
	for range n {
		// None returns before all have started: each needs its own runner.
		r.Go(func() { started.Done(); release.Wait() })
	}
	done := make(chan struct{})
	go func() { started.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("50 blocking calls did not all start: a call waited for a busy runner")
	}
	release.Done()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 10 s after the calls ended, %d before: idle runners did not exit", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
