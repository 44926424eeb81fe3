package store

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Leases tracks the calls this process runs, so their leases are renewed
// while it lives. A call stops being renewed when it is removed, or when
// the process dies; then its lease lapses and InterruptRunning may end it.
type Leases struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

// NewLeases returns an empty set.
func NewLeases() *Leases { return &Leases{keys: make(map[string]struct{})} }

// Add records that this process runs the call of key.
func (l *Leases) Add(key string) {
	l.mu.Lock()
	l.keys[key] = struct{}{}
	l.mu.Unlock()
}

// Remove records that the call of key no longer runs here.
func (l *Leases) Remove(key string) {
	l.mu.Lock()
	delete(l.keys, key)
	l.mu.Unlock()
}

// Len returns the number of calls this process runs.
func (l *Leases) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Renew calls renew every interval while any call runs here, until ctx
// ends. renew extends the leases of every running call this store owns (one
// statement, however many calls). Errors are logged and retried at the
// next tick: a lease is several intervals long.
func (l *Leases) Renew(ctx context.Context, every time.Duration, log *slog.Logger, renew func(ctx context.Context) error) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if l.Len() == 0 {
			continue
		}
		if err := renew(ctx); err != nil && ctx.Err() == nil {
			log.Warn("store: renewing call leases failed", "err", err)
		}
	}
}
