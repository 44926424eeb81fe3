package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestLocalBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	l := NewLocal(2, func() time.Time { return now })
	b := Bucket{Key: "a", PerSecond: 2, Burst: 3}
	for i := range 3 {
		d, err := l.Allow(t.Context(), b, 1)
		if err != nil || !d.Allowed || d.Remaining != 2-i {
			t.Fatalf("call %d: %+v %v", i, d, err)
		}
	}
	d, _ := l.Allow(t.Context(), b, 1)
	if d.Allowed || d.RetryAfter != 500*time.Millisecond || d.ResetAfter != 1500*time.Millisecond {
		t.Errorf("over the burst: %+v; want refused, retry in 500ms, full in 1.5s", d)
	}
	now = now.Add(500 * time.Millisecond)
	if d, _ := l.Allow(t.Context(), b, 1); !d.Allowed {
		t.Errorf("after the refill: %+v", d)
	}
	if d, _ := l.Allow(t.Context(), b, 4); d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("more than the burst at once: %+v", d)
	}
	// Only maxKeys buckets are kept.
	for _, k := range []string{"b", "c", "d"} {
		_, _ = l.Allow(t.Context(), Bucket{Key: k, PerSecond: 1, Burst: 1}, 1)
	}
	if len(l.buckets) != 2 || l.order.Len() != 2 {
		t.Errorf("%d buckets kept, want 2", len(l.buckets))
	}
	if _, err := l.Allow(t.Context(), Bucket{Key: "x"}, 1); err == nil {
		t.Error("a bucket without a rate was accepted")
	}
}

func redisURL(t *testing.T) string {
	u := os.Getenv("TOOLSVC_TEST_REDIS_URL")
	if u == "" {
		t.Skip("TOOLSVC_TEST_REDIS_URL is not set; skipping the Redis tests (CI sets it to redis://127.0.0.1:6379/0)")
	}
	return u
}

func prefix(t *testing.T) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "toolsvc-test:" + t.Name() + ":" + hex.EncodeToString(b[:]) + ":"
}

// TestRedisSharedAcrossInstances: two limiters with their own connections
// (two replicas) share one bucket; together they get the configured rate
// within 10 %.
func TestRedisSharedAcrossInstances(t *testing.T) {
	url, pre := redisURL(t), prefix(t)
	var lims []*Redis
	for range 2 {
		r, err := NewRedis(RedisOptions{URL: url, Prefix: pre, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		lims = append(lims, r)
	}
	b := Bucket{Key: "caller", PerSecond: 40, Burst: 5}
	const window = 2 * time.Second
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for _, l := range lims {
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(start) < window {
					d, err := l.Allow(t.Context(), b, 1)
					if err != nil {
						t.Error(err)
						return
					}
					if d.Allowed {
						allowed.Add(1)
					}
					time.Sleep(2 * time.Millisecond)
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	want := float64(b.Burst) + b.PerSecond*elapsed
	got := float64(allowed.Load())
	// Sharing promises the ceiling (two separate limits would allow twice
	// as much); a loaded machine's slow clients may take fewer.
	if got > want*1.10 || got < want/2 {
		t.Errorf("two instances together allowed %v calls in %.2fs; want at most %.0f + 10 %% (and at least half)", got, elapsed, want)
	}
	t.Logf("allowed %v of an expected %.1f (%.1f %%)", got, want, 100*(got-want)/want)
}

// ownRedis starts a redis-server of the test's own on a free port; the
// returned function kills it.
func ownRedis(t *testing.T) (string, func()) {
	url, _, kill := ownRedisProcess(t)
	return url, kill
}

// ownRedisProcess is ownRedis, with the server's process (to stop and
// continue it).
func ownRedisProcess(t *testing.T) (string, *os.Process, func()) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", fmt.Sprint(port), "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill := func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	t.Cleanup(kill)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not come up", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "redis://" + addr + "/0", cmd.Process, kill
}

func TestRedisOutage(t *testing.T) {
	url, kill := ownRedis(t)
	open, err := NewRedis(RedisOptions{URL: url, Prefix: "open:", FailOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	closed, err := NewRedis(RedisOptions{URL: url, Prefix: "closed:"})
	if err != nil {
		t.Fatal(err)
	}
	defer closed.Close()
	ctx := context.Background()
	b := Bucket{Key: "c", PerSecond: 1, Burst: 2}
	for _, l := range []*Redis{open, closed} {
		if d, err := l.Allow(ctx, b, 1); err != nil || !d.Allowed {
			t.Fatalf("with Redis up: %+v %v", d, err)
		}
		if s, ok := l.Status(ctx); !ok || s != "redis ok" {
			t.Fatalf("status with Redis up: %q %v", s, ok)
		}
	}
	kill()

	// Failing closed: refused, and not ready.
	d, err := closed.Allow(ctx, b, 1)
	if !errors.Is(err, ErrUnavailable) || d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("failing closed with Redis down: %+v %v", d, err)
	}
	if s, ok := closed.Status(ctx); ok || !strings.Contains(s, "failing closed") {
		t.Errorf("status failing closed: %q %v", s, ok)
	}
	// Failing open: the per-instance bucket decides, and the instance
	// stays ready.
	allowed := 0
	for range 5 {
		d, err := open.Allow(ctx, b, 1)
		if err != nil {
			t.Fatalf("failing open: %v", err)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("failing open allowed %d of 5 calls; want the local burst of 2", allowed)
	}
	if s, ok := open.Status(ctx); !ok || !strings.Contains(s, "failing open") {
		t.Errorf("status failing open: %q %v", s, ok)
	}
}

func TestLocalBucketOfExtremeRates(t *testing.T) {
	l := NewLocal(0, nil)
	if _, err := l.Allow(t.Context(), Bucket{Key: "nan", PerSecond: math.NaN(), Burst: 1}, 1); err == nil {
		t.Error("a bucket of NaN calls a second was accepted")
	}
	b := Bucket{Key: "tiny", PerSecond: 1e-300, Burst: 1}
	for i := range 2 {
		d, err := l.Allow(t.Context(), b, 1)
		if err != nil || d.Allowed != (i == 0) || d.ResetAfter <= 0 || (i == 1 && d.RetryAfter <= 0) {
			t.Errorf("call %d: %+v %v; want positive reset and retry times", i, d, err)
		}
	}
	if d, _ := l.Allow(t.Context(), b, 2); d.RetryAfter != math.MaxInt64 {
		t.Errorf("more than the burst: retry after %v, want the longest duration", d.RetryAfter)
	}
}

// Peek says what Allow would do and takes nothing, in both limiters.
func TestPeekTakesNothing(t *testing.T) {
	now := time.Unix(1000, 0)
	local := NewLocal(0, func() time.Time { return now })
	limiters := map[string]Limiter{"local": local}
	if u := os.Getenv("TOOLSVC_TEST_REDIS_URL"); u != "" {
		r, err := NewRedis(RedisOptions{URL: u, Prefix: prefix(t), Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		limiters["redis"] = r
	} else {
		t.Log("TOOLSVC_TEST_REDIS_URL is not set; Peek is checked on the local limiter only")
	}
	for name, l := range limiters {
		t.Run(name, func(t *testing.T) {
			b := Bucket{Key: "peek", PerSecond: 1e-6, Burst: 3}
			for range 5 {
				if d, err := l.Peek(t.Context(), b, 3); err != nil || !d.Allowed || d.Remaining != 3 {
					t.Fatalf("peek at a full bucket: %+v %v", d, err)
				}
			}
			if d, err := l.Allow(t.Context(), b, 2); err != nil || !d.Allowed {
				t.Fatalf("taking 2 of 3 after five peeks: %+v %v", d, err)
			}
			if d, err := l.Peek(t.Context(), b, 2); err != nil || d.Allowed || d.Remaining != 1 || d.RetryAfter <= 0 {
				t.Errorf("peek for 2 with 1 left: %+v %v; want refused, 1 remaining, a retry time", d, err)
			}
			if d, err := l.Peek(t.Context(), b, 1); err != nil || !d.Allowed {
				t.Errorf("peek for 1 with 1 left: %+v %v", d, err)
			}
			if d, err := l.Peek(t.Context(), b, 4); err != nil || d.Allowed {
				t.Errorf("peek for more than the burst: %+v %v", d, err)
			}
			if d, err := l.Allow(t.Context(), b, 1); err != nil || !d.Allowed {
				t.Errorf("the last token after the peeks: %+v %v", d, err)
			}
		})
	}
}
