package worker

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// waitQueued waits until n calls wait in t.
func waitQueued(tb testing.TB, t *turns, n int) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for t.queued() != n {
		if time.Now().After(deadline) {
			tb.Fatalf("%d calls wait, want %d", t.queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTurnsGoToTheCallerHoldingFewest(t *testing.T) {
	tr := newTurns(2)
	ctx := context.Background()
	for range 2 {
		if err := tr.acquire(ctx, "a"); err != nil {
			t.Fatal(err)
		}
	}
	served := make(chan string, 4)
	wait := func(caller, label string, n int) {
		go func() {
			if err := tr.acquire(ctx, caller); err != nil {
				t.Error(err)
			}
			served <- label
		}()
		waitQueued(t, tr, n)
	}
	wait("a", "a1", 1)
	wait("a", "a2", 2)
	wait("a", "a3", 3)
	wait("b", "b1", 4)

	// "a" holds both slots and "b" none: the first freed goes to "b"
	// although three calls of "a" waited longer.
	var order []string
	for range 4 {
		tr.release("a")
		order = append(order, <-served)
	}
	want := []string{"b1", "a1", "a2", "a3"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("served %v, want %v", order, want)
		}
	}
}

func TestTurnsGiveBackWhatACanceledWaitWasHanded(t *testing.T) {
	tr := newTurns(1)
	if err := tr.acquire(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- tr.acquire(ctx, "b") }()
	}
	waitQueued(t, tr, 8)
	// Release and cancel at once: a slot handed to a wait that is being
	// canceled must come back, not be lost.
	released := make(chan struct{})
	go func() {
		tr.release("a")
		close(released)
	}()
	cancel()
	got := 0
	for range 8 {
		if err := <-errs; err == nil {
			got++
			tr.release("b")
		}
	}
	if got > 1 {
		t.Fatalf("%d waits got the one slot", got)
	}
	<-released
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.waiting) != 0 || tr.free != 1 || len(tr.held) != 0 || len(tr.ring) != 0 {
		t.Fatalf("after every wait ended: waiting %v, %d free, held %v, ring %v; want none, 1, none, none", tr.waiting, tr.free, tr.held, tr.ring)
	}
}

// TestPoolServesAnotherCallerBeforeTheQueue runs real workers: one caller
// keeps both workers busy with runaway programs and queues more; another
// caller's call runs as soon as one of them ends, not after the queue.
func TestPoolServesAnotherCallerBeforeTheQueue(t *testing.T) {
	p := newPoolWith(t, Options{MemoryLimit: DefaultMemoryLimit, Size: 2})
	alice, bob := &registry.Caller{ID: "alice"}, &registry.Caller{ID: "bob"}
	runaway := json.RawMessage(jq(`last(range(1e15))`, `null`))
	run := func(ctx context.Context, c *registry.Caller, args json.RawMessage) error {
		_, err := p.Call(ctx, "json__query", &registry.Request{Name: "json__query", Arguments: args, MaxOutputBytes: 16384, Caller: c})
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, cancelFirst := context.WithCancel(ctx)
	ended := make(chan error, 5)
	go func() { ended <- run(first, alice, runaway) }()
	go func() { ended <- run(ctx, alice, runaway) }()
	waitHeld(t, p.slots, "alice", 2)
	for range 3 {
		go func() { ended <- run(ctx, alice, runaway) }()
	}
	waitQueued(t, p.slots, 3)

	bobs := make(chan error, 1)
	bobCtx, bobCancel := context.WithTimeout(ctx, time.Minute)
	defer bobCancel()
	go func() { bobs <- run(bobCtx, bob, json.RawMessage(jq(`1+1`, `null`))) }()
	waitQueued(t, p.slots, 4)

	cancelFirst()
	if err := <-bobs; err != nil {
		t.Fatalf("bob's call, queued behind three of alice's: %v", err)
	}
	if n := p.slots.queued(); n != 2 {
		t.Fatalf("when bob's call ended %d of alice's calls still waited, want 2 (one took the worker bob gave back)", n)
	}
	cancel()
	for range 5 {
		<-ended
	}
}

// waitHeld waits until caller holds n slots of t.
func waitHeld(tb testing.TB, t *turns, caller string, n int) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		t.mu.Lock()
		h := t.held[caller]
		t.mu.Unlock()
		if h == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s holds %d slots, want %d", caller, h, n)
		}
		time.Sleep(time.Millisecond)
	}
}
