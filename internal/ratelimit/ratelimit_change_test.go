package ratelimit

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

// TestRedisOutageChanges: a Redis that stops answering (a stopped process:
// connections are accepted, nothing is read) is reported once, on the
// decision that first found it so, and so is its return; in between,
// failing open, every decision says the per-instance bucket made it, and
// failing closed, none does.
func TestRedisOutageChanges(t *testing.T) {
	url, proc, _ := ownRedisProcess(t)
	ctx := t.Context()
	b := Bucket{Key: "c", PerSecond: 100, Burst: 100}
	for _, failOpen := range []bool{true, false} {
		r, err := NewRedis(RedisOptions{URL: url, Prefix: prefix(t), FailOpen: failOpen, Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if d, err := r.Allow(ctx, b, 1); err != nil || !d.Allowed || d.Fallback || d.Change != nil {
			t.Fatalf("with Redis up: %+v %v", d, err)
		}
		if err := proc.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		var changes []*Change
		decide := func(n int) {
			for range n {
				d, err := r.Allow(ctx, b, 1)
				if failOpen && (err != nil || !d.Fallback || !d.Allowed) {
					t.Errorf("failing open with Redis stopped: %+v %v; want allowed by the fallback", d, err)
				}
				if !failOpen && (!errors.Is(err, ErrUnavailable) || d.Fallback) {
					t.Errorf("failing closed with Redis stopped: %+v %v; want ErrUnavailable", d, err)
				}
				if d.Change != nil {
					changes = append(changes, d.Change)
				}
			}
		}
		decide(5)
		time.Sleep(downFor + 100*time.Millisecond) // Redis is tried again, and still does not answer
		decide(5)
		if len(changes) != 1 || !changes[0].Down || changes[0].Err == nil || changes[0].FailOpen != failOpen {
			t.Errorf("fail open %v: changes while Redis is stopped: %+v; want one, down", failOpen, changes)
		}
		if err := proc.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(downFor + 100*time.Millisecond)
		changes = nil
		deadline := time.Now().Add(5 * time.Second)
		for len(changes) == 0 && time.Now().Before(deadline) {
			d, err := r.Allow(ctx, b, 1)
			if d.Change != nil {
				changes = append(changes, d.Change)
			}
			if err == nil && !d.Fallback {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		for range 5 {
			if d, err := r.Allow(ctx, b, 1); err != nil || d.Fallback || d.Change != nil {
				t.Errorf("fail open %v: with Redis back: %+v %v", failOpen, d, err)
			}
		}
		if len(changes) != 1 || changes[0].Down || changes[0].DownFor < downFor {
			t.Errorf("fail open %v: changes once Redis answers again: %+v; want one, up after more than %s", failOpen, changes, downFor)
		}
	}
}
