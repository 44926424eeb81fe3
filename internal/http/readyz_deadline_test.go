package http

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/ratelimit"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// ctxLimiter is a limiter whose Redis is fine, reporting as Redis.Status
// does: a ping on an expired context fails.
type ctxLimiter struct{ *ratelimit.Local }

func (ctxLimiter) Status(ctx context.Context) (string, bool) {
	if err := ctx.Err(); err != nil {
		return "redis unreachable (" + err.Error() + "); failing closed: calls are refused", false
	}
	return "redis ok", true
}

// TestReadyzChecksHaveTheirOwnDeadline: a store check that takes all of
// its deadline does not leave the rate limiter's check an expired
// context (which reported a healthy Redis as unreachable); the checks
// run at once, so /readyz still answers within one deadline.
func TestReadyzChecksHaveTheirOwnDeadline(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.RateLimiter = ctxLimiter{ratelimit.NewLocal(0, nil)}
		d.Ready = map[string]Check{
			"store": func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, // stalled
			"other": func(ctx context.Context) error { return ctx.Err() },
		}
	})
	start := time.Now()
	r := e.do("GET", "/readyz", nil, nil, true)
	took := time.Since(start)
	var got readiness
	r.json(t, &got)
	if r.status != http.StatusServiceUnavailable || got.Checks["store"] != context.DeadlineExceeded.Error() {
		t.Errorf("stalled store: %d %s", r.status, r.body)
	}
	if got.Checks["rateLimit"] != "redis ok" || got.Checks["other"] != "ok" {
		t.Errorf("checks after a stalled store: %v; want rateLimit \"redis ok\" and other \"ok\"", got.Checks)
	}
	if took > readyCheckTimeout+time.Second {
		t.Errorf("/readyz took %s; its checks run at once, each within %s", took, readyCheckTimeout)
	}
}
