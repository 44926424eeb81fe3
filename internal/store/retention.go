package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// RetentionOptions configure RunRetention.
type RetentionOptions struct {
	// Every is the pause between two sweeps; 0 means one minute.
	Every time.Duration
	// TTL is how long done calls, decided requests and audit entries are
	// kept; 0 means 24 hours.
	TTL time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// Logger receives errors and what each sweep changed; nil discards.
	Logger *slog.Logger
	// Observer hears of the approval requests a sweep expired; nil is none.
	Observer registry.ApprovalObserver
}

// Sweep is one pass of the retention loop: expire approval requests that
// nobody decided in time, interrupt running calls whose process is gone,
// and delete what is older than ttl.
func Sweep(ctx context.Context, s registry.Store, now time.Time, ttl time.Duration) (expired, interrupted int, deleted int64, err error) {
	var errs []error
	expired, err = s.ExpireApprovals(ctx, now)
	errs = append(errs, err)
	interrupted, err = s.InterruptRunning(ctx)
	errs = append(errs, err)
	deleted, err = s.DeleteExpired(ctx, now.Add(-ttl))
	errs = append(errs, err)
	return expired, interrupted, deleted, errors.Join(errs...)
}

// RunRetention sweeps s at once and then every o.Every until ctx ends. The
// main program runs it in a goroutine beside the store; with several
// replicas each may run it, as every step is safe to race.
func RunRetention(ctx context.Context, s registry.Store, o RetentionOptions) {
	if o.Every <= 0 {
		o.Every = time.Minute
	}
	if o.TTL <= 0 {
		o.TTL = 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(o.Every)
	defer t.Stop()
	last := o.Now().Add(-o.Every)
	for {
		now := o.Now()
		expired, interrupted, deleted, err := Sweep(ctx, s, now, o.TTL)
		if expired > 0 {
			announceExpired(ctx, s, o.Observer, last, now)
		}
		last = now
		if err != nil && ctx.Err() == nil {
			log.Warn("store: retention sweep failed", "err", err)
		}
		if expired+interrupted > 0 || deleted > 0 {
			log.Info("store: retention sweep", "approvalsExpired", expired, "callsInterrupted", interrupted, "rowsDeleted", deleted)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
