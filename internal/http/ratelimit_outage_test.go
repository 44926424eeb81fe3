package http

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/ratelimit"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// deadRedis is a shared limiter failing closed whose Redis does not
// answer: nothing listens at its address.
func deadRedis(t *testing.T) *ratelimit.Redis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	r, err := ratelimit.NewRedis(ratelimit.RedisOptions{URL: "redis://" + addr + "/0", Prefix: "test:"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRateLimiterOutageIsNotRateLimiting: calls refused because a shared
// limiter failing closed does not answer are an outage, not callers over
// their limit. They are answered 503 with Retry-After and no RateLimit
// header (nothing is known of what remains), counted in
// toolsvc_rate_limiter_unavailable_total rather than
// toolsvc_rate_limited_total, and /mcp answers them as it answers a call
// the store did not take, not with the rate limit's error code.
func TestRateLimiterOutageIsNotRateLimiting(t *testing.T) {
	caller := &registry.Caller{ID: "x", Scopes: []registry.Scope{registry.ScopeCall}, RateLimit: &registry.RateLimit{
		Name: "lim", PerSecond: 1, Burst: 5, Tools: []registry.ToolRateLimit{{Tools: []string{"json__*"}, PerSecond: 1, Burst: 5}},
	}}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Auth = staticAuth{"tok": caller}
		d.RateLimiter = deadRedis(t)
		d.Registerer = prometheus.NewRegistry()
	})
	h := bearerHeader("tok")
	for _, c := range []struct{ path, body string }{
		{"/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`},
		{"/calls", `{"toolName":"json__query","arguments":{"program":"1"}}`}, // a tool bucket too
		{"/calls/batch", `{"calls":[{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}]}`},
	} {
		r := e.do("POST", c.path, []byte(c.body), h, true)
		var p Problem
		r.json(t, &p)
		if r.status != http.StatusServiceUnavailable || p.Code != "unavailable" || r.header.Get("Retry-After") == "" {
			t.Errorf("POST %s: %d %s, Retry-After %q; want 503 unavailable with Retry-After", c.path, r.status, r.body, r.header.Get("Retry-After"))
		}
		if v := r.header.Values("RateLimit"); len(v) > 0 {
			t.Errorf("POST %s: RateLimit %q, although the limiter said nothing of what remains", c.path, v)
		}
	}
	if n := testutil.CollectAndCount(e.srv.rate.limited); n != 0 {
		t.Errorf("toolsvc_rate_limited_total has %d series; the outage limited no caller", n)
	}
	if n := testutil.ToFloat64(e.srv.rate.unavailable.WithLabelValues("lim")); n != 3 {
		t.Errorf("toolsvc_rate_limiter_unavailable_total{caller=lim} = %v, want 3", n)
	}

	// /mcp: a tool result saying the call did not run, as for a store
	// that did not take the call; not the error -32029 of a rate limit.
	var rpc struct {
		Error  json.RawMessage `json:"error"`
		Result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	mcpCallAs(t, e, h, &rpc)
	if rpc.Error != nil || !rpc.Result.IsError || len(rpc.Result.Content) != 1 || !strings.Contains(rpc.Result.Content[0].Text, "did not run") {
		t.Errorf("MCP during the outage: error %s, result %+v; want an isError result saying the call did not run", rpc.Error, rpc.Result)
	}

	// A plan's steps are told the same.
	err := e.srv.LimitSteps(t.Context(), caller, "plan", []string{"text__transform"})
	var re *registry.Error
	if !errors.As(err, &re) || !strings.Contains(re.Message, "not answering") {
		t.Errorf("LimitSteps during the outage: %v", err)
	}
}
