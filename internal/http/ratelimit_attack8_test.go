package http

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/ratelimit"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestRateLimiterFallbackIsHeard: failing open, a shared limiter that does
// not answer leaves each replica limiting on its own (N replicas admit N
// times a limit). That is logged once, as a warning, when it starts, and
// once when Redis answers again, not with every call; and each request the
// fallback decided is counted in toolsvc_rate_limiter_fallback_total.
func TestRateLimiterFallbackIsHeard(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dead, err := ratelimit.NewRedis(ratelimit.RedisOptions{URL: "redis://" + addr + "/0", Prefix: "test:", FailOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	caller := &registry.Caller{ID: "x", Scopes: []registry.Scope{registry.ScopeCall}, RateLimit: &registry.RateLimit{
		Name: "lim", PerSecond: 100, Burst: 100, Tools: []registry.ToolRateLimit{{Tools: []string{"json__*"}, PerSecond: 100, Burst: 100}},
	}}
	e, logs := infoEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"tok": caller}
		d.RateLimiter = dead
		d.Registerer = prometheus.NewRegistry()
	})
	h := bearerHeader("tok")
	for _, c := range []struct{ path, body string }{
		{"/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`},
		{"/calls", `{"toolName":"json__query","arguments":{"program":"1"}}`}, // a tool bucket too: a peek and two takes
		{"/calls/batch", `{"calls":[{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}},{"toolName":"text__transform","arguments":{"operation":"upper","text":"y"}}]}`},
		{"/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`},
	} {
		if r := e.do("POST", c.path, []byte(c.body), h, true); r.status != 200 {
			t.Errorf("POST %s failing open: %d %s", c.path, r.status, r.body)
		}
	}
	if n := testutil.ToFloat64(e.srv.rate.fallback.WithLabelValues("lim")); n != 4 {
		t.Errorf("toolsvc_rate_limiter_fallback_total{caller=lim} = %v, want 4 (one per request)", n)
	}
	warned := 0
	for _, m := range logLines(t, logs) {
		if msg, _ := m["msg"].(string); strings.Contains(msg, "rate limiter") {
			if m["level"] != "WARN" || !strings.Contains(msg, "not answering") || !strings.Contains(msg, "N times") || m["error"] == nil {
				t.Errorf("log line %v", m)
			}
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d log lines of the outage; want one:\n%s", warned, logs)
	}

	// Redis answers again: said once.
	e, logs = infoEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"tok": caller}
		d.RateLimiter = &changing{Limiter: ratelimit.NewLocal(0, nil), next: &ratelimit.Change{DownFor: 3e9}}
		d.Registerer = prometheus.NewRegistry()
	})
	for range 3 {
		if r := e.do("POST", "/calls", []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`), h, true); r.status != 200 {
			t.Errorf("with Redis back: %d %s", r.status, r.body)
		}
	}
	lines := 0
	for _, m := range logLines(t, logs) {
		if msg, _ := m["msg"].(string); strings.Contains(msg, "rate limiter") {
			if m["level"] != "INFO" || !strings.Contains(msg, "answers again") || m["downFor"] != "3s" {
				t.Errorf("log line %v", m)
			}
			lines++
		}
	}
	if lines != 1 {
		t.Errorf("%d log lines of the recovery; want one:\n%s", lines, logs)
	}
	if n := testutil.CollectAndCount(e.srv.rate.fallback); n != 0 {
		t.Errorf("toolsvc_rate_limiter_fallback_total has %d series; Redis answered every call", n)
	}
}

// changing is a limiter whose next decision carries a change.
type changing struct {
	ratelimit.Limiter
	mu   sync.Mutex
	next *ratelimit.Change
}

func (c *changing) Allow(ctx context.Context, b ratelimit.Bucket, n int) (ratelimit.Decision, error) {
	d, err := c.Limiter.Allow(ctx, b, n)
	c.mu.Lock()
	d.Change, c.next = c.next, nil
	c.mu.Unlock()
	return d, err
}
