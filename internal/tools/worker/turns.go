package worker

import (
	"context"
	"slices"
	"sync"
)

// turns hands out a fixed number of slots. When calls wait for one, a
// freed slot goes to the caller that holds the fewest slots (the one
// waiting longest among equals), to its oldest waiting call. So a caller
// that queues fifty runaway programs (a batch, a plan, many connections)
// makes another caller wait for one slot to come free, not for its fifty
// to run, and callers that keep the pool busy share it evenly.
type turns struct {
	mu   sync.Mutex
	free int
	// held counts the slots each caller holds; waiting holds each
	// caller's waiting calls, oldest first; ring holds the callers with
	// calls waiting, in the order ties between them are broken.
	held    map[string]int
	waiting map[string][]chan struct{}
	ring    []string
}

func newTurns(n int) *turns {
	return &turns{free: n, held: make(map[string]int), waiting: make(map[string][]chan struct{})}
}

// acquire takes a slot for a call of caller, waiting its turn until ctx
// ends. Each slot taken must be given back with release(caller).
func (t *turns) acquire(ctx context.Context, caller string) error {
	t.mu.Lock()
	if t.free > 0 {
		t.free--
		t.held[caller]++
		t.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	q, ok := t.waiting[caller]
	if !ok {
		t.ring = append(t.ring, caller)
	}
	t.waiting[caller] = append(q, ready)
	t.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	left := t.leave(caller, ready)
	t.mu.Unlock()
	if !left {
		// The slot was handed over as ctx ended: hand it on.
		t.release(caller)
	}
	return ctx.Err()
}

// leave takes ready out of caller's queue; false means it was no longer
// there, because a slot was handed to it.
func (t *turns) leave(caller string, ready chan struct{}) bool {
	q := t.waiting[caller]
	i := slices.Index(q, ready)
	if i < 0 {
		return false
	}
	if q = slices.Delete(q, i, i+1); len(q) > 0 {
		t.waiting[caller] = q
		return true
	}
	delete(t.waiting, caller)
	t.ring = slices.DeleteFunc(t.ring, func(c string) bool { return c == caller })
	return true
}

// release gives back a slot caller held, to the next call in turn if any
// wait.
func (t *turns) release(caller string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.held[caller]--; t.held[caller] <= 0 {
		delete(t.held, caller)
	}
	if len(t.ring) == 0 {
		t.free++
		return
	}
	next := 0
	for i, c := range t.ring {
		if t.held[c] < t.held[t.ring[next]] {
			next = i
		}
	}
	c := t.ring[next]
	q := t.waiting[c]
	ready := q[0]
	t.ring = slices.Delete(t.ring, next, next+1)
	if q = q[1:]; len(q) > 0 {
		t.waiting[c] = q
		t.ring = append(t.ring, c)
	} else {
		delete(t.waiting, c)
	}
	t.held[c]++
	close(ready)
}

// queued returns how many calls wait, for tests.
func (t *turns) queued() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, q := range t.waiting {
		n += len(q)
	}
	return n
}
