package http

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// stallFor is how long a stalled store's lookup holds before it fails, as
// the store's own deadline (TOOLSVC_STORE_TIMEOUT) would end it.
const stallFor = 50 * time.Millisecond

// stall holds until ctx ends or stallFor has passed, and returns the error
// a store that stopped answering gives.
func stall(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, stallFor)
	defer cancel()
	<-ctx.Done()
	return ctx.Err()
}

// stalledStore is a store whose lookups of calls and approvals stall, and
// that counts them.
type stalledStore struct {
	registry.Store
	lookups atomic.Int32
}

func (s *stalledStore) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	s.lookups.Add(1)
	return nil, stall(ctx)
}

func (s *stalledStore) GetApproval(ctx context.Context, id string) (*registry.Approval, error) {
	s.lookups.Add(1)
	return nil, stall(ctx)
}

func (s *stalledStore) DecideApproval(ctx context.Context, id string, v registry.Verdict, by, reason string, now time.Time) (*registry.Approval, bool, error) {
	s.lookups.Add(1)
	return nil, false, stall(ctx)
}

// stalledSpills is a spill store whose reads stall, and that counts them.
type stalledSpills struct {
	registry.SpillStore
	reads atomic.Int32
}

func (s *stalledSpills) ReadSpill(ctx context.Context, callerID, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	s.reads.Add(1)
	return nil, nil, stall(ctx)
}

// TestOverlongPathIDsAreNotLookedUp: an id in a path longer than any id
// the service gives or takes (a toolCallId is at most 256 characters) is
// answered 404 at once, without asking the store, which may be stalled;
// an id of 256 characters is still looked up.
func TestOverlongPathIDsAreNotLookedUp(t *testing.T) {
	sqlite := openStore(t)
	st := &stalledStore{Store: sqlite}
	spills := &stalledSpills{SpillStore: sqlite}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		o.Store = st
		o.Spill = registry.NewSpiller(registry.SpillOptions{Store: spills, Registerer: prometheus.NewRegistry()})
	})
	long := strings.Repeat("é", 257) // 257 characters, 514 bytes
	huge := strings.Repeat("a", 200_000)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/calls/" + url.PathEscape(long), ""},
		{"GET", "/calls/call_" + huge, ""},
		{"GET", "/calls/call_" + huge + "/output", ""},
		{"GET", "/approvals/apr_" + huge, ""},
		{"POST", "/approvals/apr_" + huge, `{"decision":"approve"}`},
	} {
		r := e.do(c.method, c.path, []byte(c.body), jsonCT, true)
		var p Problem
		r.json(t, &p)
		if r.status != http.StatusNotFound || len(p.Detail) > 200 {
			t.Errorf("%s %.40s…: %d %.200s, want a short 404", c.method, c.path, r.status, r.body)
		}
	}
	if n, m := st.lookups.Load(), spills.reads.Load(); n != 0 || m != 0 {
		t.Errorf("the store was asked %d times, its spills %d times, for ids no record can have", n, m)
	}

	// 256 characters is a toolCallId the service takes: looked up (and
	// answered 503 by the stalled store).
	most := url.PathEscape(strings.Repeat("é", 256))
	for _, path := range []string{"/calls/" + most, "/calls/" + most + "/output"} {
		if r := e.do("GET", path, nil, nil, true); r.status != http.StatusServiceUnavailable {
			t.Errorf("GET %.40s…: %d %s, want 503 from the stalled store", path, r.status, r.body)
		}
	}
	if n, m := st.lookups.Load(), spills.reads.Load(); n != 1 || m != 1 {
		t.Errorf("the store was asked %d times, its spills %d times, want once each", n, m)
	}
}

// TestOutputOfStalledStoreIsUnavailable: GET /calls/{id}/output answers a
// store that does not answer as GET /calls/{id} does, 503 unavailable with
// Retry-After, not 500 "internal error".
func TestOutputOfStalledStoreIsUnavailable(t *testing.T) {
	e, logs := infoEnv(t, func(d *Deps, o *registry.Options) {
		o.Spill = registry.NewSpiller(registry.SpillOptions{Store: &stalledSpills{SpillStore: openStore(t)}, Registerer: prometheus.NewRegistry()})
	})
	r := e.do("GET", "/calls/big1/output", nil, nil, true)
	var p Problem
	r.json(t, &p)
	if r.status != http.StatusServiceUnavailable || p.Code != "unavailable" || r.header.Get("Retry-After") == "" {
		t.Fatalf("output of a stalled store: %d %s, Retry-After %q; want 503 unavailable with Retry-After", r.status, r.body, r.header.Get("Retry-After"))
	}
	if strings.Contains(p.Detail, "did not run") {
		t.Errorf("detail %q speaks of a call that did not run; this request reads", p.Detail)
	}
	line := findLogLine(t, logs, func(m map[string]any) bool { return m["msg"] == "request failed" })
	if err, _ := line["error"].(string); !strings.Contains(err, context.DeadlineExceeded.Error()) {
		t.Errorf("the log's error %q does not say what the store did", err)
	}
}
