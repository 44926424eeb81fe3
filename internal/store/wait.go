package store

import (
	"context"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// WaitOptions tell Wait how to read and wake on one call record.
type WaitOptions struct {
	// Hub wakes the wait when the record changes in this process (or,
	// through the store's notification channel, in another).
	Hub *Hub
	// Get reads the record; its error ends the wait.
	Get func(ctx context.Context) (*registry.CallRecord, error)
	// Interrupt ends a running call whose lease has lapsed; nil never
	// does. It should notify the hub when it changes the record.
	Interrupt func(ctx context.Context, rec *registry.CallRecord) error
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// MaxPoll is the longest pause between two reads when no notification
	// comes; 0 means one second. Pauses start at 20ms and double, and a
	// call is read again when its lease would lapse or its approval expire.
	MaxPoll time.Duration
}

// Wait implements registry.Store.WaitCall on top of a read function, a hub
// and polling with backoff: it returns the record once it is done, or the
// latest record read and ctx's error when ctx ends first.
func Wait(ctx context.Context, key string, o WaitOptions) (*registry.CallRecord, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	maxPoll := o.MaxPoll
	if maxPoll <= 0 {
		maxPoll = time.Second
	}
	delay := 20 * time.Millisecond
	var last *registry.CallRecord
	for {
		// Subscribe before reading, so a change committed between the read
		// and the wait still wakes us.
		ch, cancel := o.Hub.Subscribe(key)
		rec, err := o.Get(ctx)
		if err != nil {
			cancel()
			if ctx.Err() != nil && last != nil {
				return last, ctx.Err()
			}
			return nil, err
		}
		last = rec
		if rec.State == registry.CallDone {
			cancel()
			return rec, nil
		}
		if o.Interrupt != nil && LeaseLapsed(rec, now()) {
			if err := o.Interrupt(ctx, rec); err != nil {
				cancel()
				if ctx.Err() != nil {
					return last, ctx.Err()
				}
				return nil, err
			}
		}
		pause := delay
		if until := rec.ExpiresAt.Sub(now()); !rec.ExpiresAt.IsZero() && until > 0 {
			// Look again when the lease would lapse or the approval
			// expire, however long the backoff has grown.
			pause = min(pause, until+10*time.Millisecond)
		}
		timer := time.NewTimer(pause)
		select {
		case <-ch:
		case <-timer.C:
			delay = min(2*delay, maxPoll)
		case <-ctx.Done():
			timer.Stop()
			cancel()
			return last, ctx.Err()
		}
		timer.Stop()
		cancel()
	}
}
