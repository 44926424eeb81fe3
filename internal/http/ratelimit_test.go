package http

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/ratelimit"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// A rate so low that its bucket refills in more seconds than a duration
// holds still gets positive header values: the longest duration, not an
// overflow into a negative one.
func TestRateLimitHeadersOfTinyRate(t *testing.T) {
	caller := &registry.Caller{ID: "x", Scopes: []registry.Scope{registry.ScopeCall}, RateLimit: &registry.RateLimit{Name: "x", PerSecond: 1e-12, Burst: 1}}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"tok": caller}
		d.RateLimiter = ratelimit.NewLocal(0, nil)
	})
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)
	num := regexp.MustCompile(`[twr]=(-?\d+)`)
	for i, want := range []int{200, 429} {
		r := e.do("POST", "/calls", body, bearerHeader("tok"), true)
		if r.status != want {
			t.Fatalf("call %d: %d, want %d", i, r.status, want)
		}
		for _, h := range []string{r.header.Get("RateLimit"), r.header.Get("RateLimit-Policy"), "r=" + r.header.Get("Retry-After")} {
			for _, m := range num.FindAllStringSubmatch(h, -1) {
				if n, err := strconv.ParseInt(m[1], 10, 64); err != nil || n < 0 || (m[0][0] != 'r' && n < 1e9) {
					t.Errorf("call %d: %q in %q, want a positive number of seconds over 1e9", i, m[0], h)
				}
			}
		}
	}
}

// Calls a tool's own bucket refuses did not run: they do not use up the
// caller's bucket, so the caller's other tools still answer.
func TestToolBucketRefusalsSpareCallerBucket(t *testing.T) {
	caller := &registry.Caller{ID: "x", Scopes: []registry.Scope{registry.ScopeCall}, RateLimit: &registry.RateLimit{
		Name: "x", PerSecond: 0.01, Burst: 3, Tools: []registry.ToolRateLimit{{Tools: []string{"json__*"}, PerSecond: 0.01, Burst: 1}},
	}}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"tok": caller}
		d.RateLimiter = ratelimit.NewLocal(0, nil)
	})
	h := bearerHeader("tok")
	jq := []byte(`{"toolName":"json__query","arguments":{"program":"1"}}`)
	text := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)
	for i, want := range []int{200, 429, 429, 429, 429} {
		if r := e.do("POST", "/calls", jq, h, true); r.status != want {
			t.Fatalf("json call %d: %d, want %d", i, r.status, want)
		}
	}
	for i, want := range []int{200, 200, 429} {
		if r := e.do("POST", "/calls", text, h, true); r.status != want {
			t.Errorf("text call %d after the refused json calls: %d %s, want %d (the caller's burst of 3 less the json call that ran)", i, r.status, r.header.Values("RateLimit"), want)
		}
	}
}

// Calls the caller's own bucket refuses did not run either: they do not
// use up a tool's bucket, so once the caller's refills the tool answers.
func TestCallerBucketRefusalsSpareToolBucket(t *testing.T) {
	caller := &registry.Caller{ID: "x", Scopes: []registry.Scope{registry.ScopeCall}, RateLimit: &registry.RateLimit{
		Name: "x", PerSecond: 0.01, Burst: 2, Tools: []registry.ToolRateLimit{{Tools: []string{"json__*"}, PerSecond: 1e-9, Burst: 3}},
	}}
	now := time.Unix(1000, 0)
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"tok": caller}
		d.RateLimiter = ratelimit.NewLocal(0, func() time.Time { return now })
	})
	h := bearerHeader("tok")
	jq := []byte(`{"toolName":"json__query","arguments":{"program":"1"}}`)
	text := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)
	for i, want := range []int{200, 200} {
		if r := e.do("POST", "/calls", text, h, true); r.status != want {
			t.Fatalf("text call %d: %d, want %d", i, r.status, want)
		}
	}
	for i := range 5 {
		r := e.do("POST", "/calls", jq, h, true)
		if r.status != 429 || !strings.Contains(r.header.Get("RateLimit"), `"caller";r=0`) {
			t.Fatalf("json call %d with the caller's bucket empty: %d %q, want 429 naming the caller's bucket", i, r.status, r.header.Values("RateLimit"))
		}
	}
	now = now.Add(200 * time.Second) // the caller's bucket is full again
	for i, want := range []int{200, 200} {
		if r := e.do("POST", "/calls", jq, h, true); r.status != want {
			t.Errorf("json call %d after the caller's bucket refilled: %d %q, want %d (the tool's bucket of 3 untouched by the refused calls)", i, r.status, r.header.Values("RateLimit"), want)
		}
	}
}

// TestOpenModeIsRateLimited: without credentials every request is the
// anonymous caller, and the service-wide rate limit (TOOLSVC_RATE_LIMIT,
// given to it as Deps.Anonymous) holds it too. It used to hold only
// callers with credentials, so an open service behind a load balancer
// admitted 245 calls/s under a limit of 5.
func TestOpenModeIsRateLimited(t *testing.T) {
	anon := registry.Anonymous()
	anon.RateLimit = &registry.RateLimit{Name: anon.ID, PerSecond: 0.01, Burst: 2}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Anonymous = anon
		d.RateLimiter = ratelimit.NewLocal(0, nil)
	})
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`)
	for i, want := range []int{200, 200, 429} {
		if r := e.do("POST", "/calls", body, jsonCT, true); r.status != want {
			t.Fatalf("call %d: %d %s, want %d", i, r.status, r.body, want)
		}
	}
}
