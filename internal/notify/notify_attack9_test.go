package notify_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/notify"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestRetryAfterIsHonoured: a receiver that answers 429 with Retry-After
// in seconds, then 503 with Retry-After as an HTTP date, is asked again no
// sooner than it said, although the backoff is a millisecond.
func TestRetryAfterIsHonoured(t *testing.T) {
	now := time.Now().Truncate(time.Second) // the dispatcher's clock: HTTP dates have whole seconds
	var mu sync.Mutex
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		n := len(times)
		mu.Unlock()
		switch n {
		case 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case 2:
			w.Header().Set("Retry-After", now.Add(time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	metrics := prometheus.NewRegistry()
	d := notify.New(notify.Options{Registerer: metrics, Backoff: time.Millisecond, Now: func() time.Time { return now }})
	defer d.Close()
	d.Load([]*notify.Target{target(t, "busy", notify.Spec{Type: "webhook", URL: srv.URL, MaxAttempts: 5})})
	d.ObserveApproval(registry.ApprovalEvent{Kind: registry.EventApprovalRequested, Approval: registry.Approval{ID: "apr_1"}})
	deadline := time.Now().Add(15 * time.Second)
	for testutil.ToFloat64(metricVec(t, metrics, "toolsvc_notifications_total", "busy", "delivered")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the delivery did not arrive within 15s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 3 {
		t.Fatalf("attempts = %d; want 3", len(times))
	}
	// Each gap runs from when the receiver began to answer to the next
	// attempt, so it cannot be shorter than the wait the receiver asked.
	for i, as := range []string{"delay-seconds", "HTTP date"} {
		if gap := times[i+1].Sub(times[i]); gap < time.Second {
			t.Errorf("attempt %d came %s after a Retry-After of 1s (%s)", i+2, gap, as)
		}
	}
}

// TestFullQueueDropsAreLoggedOncePerMinute: a notifier whose receiver
// hangs while approvals keep coming logs one line a minute about the
// deliveries it drops, with their count, not one per delivery; the metric
// counts each.
func TestFullQueueDropsAreLoggedOncePerMinute(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	var logs logtest.Buffer
	metrics := prometheus.NewRegistry()
	d := notify.New(notify.Options{Registerer: metrics, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	defer d.Close()
	d.Load([]*notify.Target{target(t, "stuck", notify.Spec{Type: "webhook", URL: srv.URL, QueueSize: 2, Timeout: "1m"})})
	observe := func(n int) {
		for i := range n {
			d.ObserveApproval(registry.ApprovalEvent{Kind: registry.EventApprovalRequested, Approval: registry.Approval{ID: fmt.Sprint("apr_", i)}})
		}
	}
	// dropLines are the drop lines logged, by their counts.
	dropLines := func() []int {
		var counts []int
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var line struct {
				Msg      string
				Notifier string
				Dropped  int
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				t.Fatalf("a log line is not JSON: %s", sc.Text())
			}
			if strings.HasPrefix(line.Msg, "notify: queue full") && line.Notifier == "stuck" {
				counts = append(counts, line.Dropped)
			}
		}
		return counts
	}
	dropped := func() int {
		return int(testutil.ToFloat64(metricVec(t, metrics, "toolsvc_notifications_total", "stuck", "dropped")))
	}

	observe(400)
	if n := dropped(); n < 397 {
		t.Fatalf("dropped = %d; want at least 397", n)
	}
	if lines := dropLines(); len(lines) != 1 || lines[0] != 1 {
		t.Fatalf("drop lines within a minute, by count: %v; want [1]", lines)
	}
	observe(10) // still within the minute
	clock.Add(int64(time.Minute))
	observe(1)
	lines := dropLines()
	if len(lines) != 2 {
		t.Fatalf("drop lines after a minute, by count: %v; want two", lines)
	}
	if lines[0]+lines[1] != dropped() {
		t.Errorf("the lines count %v dropped deliveries; the metric %d", lines, dropped())
	}
}

// TestLocalLinksAreWarnedOnce: when the first notifier is loaded while
// links point to an address only the service's machine opens, one warning
// says to set TOOLSVC_PUBLIC_URL; reloads do not repeat it, and links to a
// public address make none.
func TestLocalLinksAreWarnedOnce(t *testing.T) {
	const warning = "links in notifications open only on the machine the service runs on; set TOOLSVC_PUBLIC_URL"
	for _, tc := range []struct {
		publicURL string
		warnings  int
	}{
		{"http://localhost:8080", 1},
		{"https://127.0.0.1:8443", 1},
		{"http://[::1]:8080", 1},
		{"http://0.0.0.0:8080", 1},
		{"http://:8080", 1},
		{"https://toolsvc.example.com", 0},
		{"http://10.1.2.3:8080", 0},
	} {
		var logs logtest.Buffer
		d := notify.New(notify.Options{PublicURL: tc.publicURL, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		d.Load(nil) // no notifier: no links to warn of yet
		if strings.Contains(logs.String(), warning) {
			t.Errorf("%s: warned without a notifier", tc.publicURL)
		}
		for range 3 { // start, then reloads
			d.Load([]*notify.Target{target(t, "hook", notify.Spec{Type: "webhook", URL: "http://127.0.0.1:1/hook"})})
		}
		d.Close()
		if n := strings.Count(logs.String(), warning); n != tc.warnings {
			t.Errorf("%s: warned %d times; want %d:\n%s", tc.publicURL, n, tc.warnings, logs.String())
		}
	}
}
