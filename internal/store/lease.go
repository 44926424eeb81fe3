package store

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// CallKey names one call record.
type CallKey struct{ CallerID, ToolCallID string }

// Leases tracks the calls this process runs, so their leases, and only
// theirs, are renewed while it lives. A call stops being renewed when it
// is removed (its result is recorded, or will never be through this
// store), or when the process dies; then its lease lapses and
// InterruptRunning may end it.
type Leases struct {
	mu   sync.Mutex
	keys map[CallKey]struct{}
}

// NewLeases returns an empty set.
func NewLeases() *Leases { return &Leases{keys: make(map[CallKey]struct{})} }

// Add records that this process runs the call of key.
func (l *Leases) Add(callerID, toolCallID string) {
	l.mu.Lock()
	l.keys[CallKey{callerID, toolCallID}] = struct{}{}
	l.mu.Unlock()
}

// Claim records that this process runs the call of key unless it does
// already, and reports whether it did not: of two that claim one call,
// one gets it.
func (l *Leases) Claim(callerID, toolCallID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := CallKey{callerID, toolCallID}
	if _, ok := l.keys[k]; ok {
		return false
	}
	l.keys[k] = struct{}{}
	return true
}

// Remove records that the call of key no longer runs here.
func (l *Leases) Remove(callerID, toolCallID string) {
	l.mu.Lock()
	delete(l.keys, CallKey{callerID, toolCallID})
	l.mu.Unlock()
}

// Has reports whether this process runs the call.
func (l *Leases) Has(callerID, toolCallID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.keys[CallKey{callerID, toolCallID}]
	return ok
}

// Keys returns the calls this process runs.
func (l *Leases) Keys() []CallKey {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]CallKey, 0, len(l.keys))
	for k := range l.keys {
		out = append(out, k)
	}
	return out
}

// Len returns the number of calls this process runs.
func (l *Leases) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Renew calls renew with the calls that run here every interval while
// any does, until ctx ends; each renewal has the interval as its
// deadline. Errors are logged and retried at the next tick: a lease is
// several intervals long.
func (l *Leases) Renew(ctx context.Context, every time.Duration, log *slog.Logger, renew func(ctx context.Context, keys []CallKey) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keys := l.Keys()
		if len(keys) == 0 {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := renew(rctx, keys)
		cancel()
		if err != nil && ctx.Err() == nil {
			log.Warn("store: renewing call leases failed", "err", err)
		}
	}
}
