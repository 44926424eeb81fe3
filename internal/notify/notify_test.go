package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/notify"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

const secret = "0123456789abcdef-secret"

func lookup(name string) (string, bool) {
	if name == "HOOK_SECRET" {
		return secret, true
	}
	return "", false
}

// received is what a webhook receiver got.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a real webhook receiver on loopback.
func receiver(t testing.TB, status int) (*httptest.Server, <-chan received) {
	ch := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- received{header: r.Header.Clone(), body: b}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

// executor runs a privileged tool (which asks for approval) with the
// embedded store, and tells obs of approval events.
func executor(t testing.TB, obs registry.ApprovalObserver) *registry.Executor {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000},
		&registry.Tool{
			Definition: registry.Definition{Name: "ops__restart", Description: "Restarts a service.", Tier: registry.Privileged,
				Parameters: json.RawMessage(`{"type":"object","properties":{"service":{"type":"string"}}}`)},
			Handler: registry.Func(func(context.Context, *registry.Request) (any, error) { return "restarted", nil }),
		})
	if err != nil {
		t.Fatal(err)
	}
	return registry.NewExecutor(registry.Options{Registry: reg, Store: st, Observer: obs})
}

func target(t testing.TB, name string, spec notify.Spec) *notify.Target {
	t.Helper()
	tg, err := notify.Decode(name, spec, lookup)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func wait(t *testing.T, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no notification arrived within 10s")
	}
	return received{}
}

func TestWebhookGetsSignedRequestedAndDecided(t *testing.T) {
	srv, got := receiver(t, http.StatusNoContent)
	metrics := prometheus.NewRegistry()
	d := notify.New(notify.Options{PublicURL: "https://toolsvc.example.com/", Registerer: metrics})
	defer d.Close()
	d.Load([]*notify.Target{target(t, "oncall", notify.Spec{Type: "webhook", URL: srv.URL, SecretFrom: &notify.EnvRef{Env: "HOOK_SECRET"}})})
	e := executor(t, d)
	ctx := context.Background()
	res, err := e.Execute(ctx, &registry.Caller{ID: "agent-7", Scopes: []registry.Scope{registry.ScopeCall}},
		&registry.Call{ToolCallID: "c1", ToolName: "ops__restart", Arguments: json.RawMessage(`{"service":"db"}`)})
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("Execute = %+v, %v; want pending_approval", res, err)
	}

	r := wait(t, got)
	if err := notify.Verify([]byte(secret), r.header.Get(notify.SignatureHeader), r.body, time.Now(), 5*time.Minute); err != nil {
		t.Fatalf("signature: %v (header %q)", err, r.header.Get(notify.SignatureHeader))
	}
	if err := notify.Verify([]byte("another-secret-of-16"), r.header.Get(notify.SignatureHeader), r.body, time.Now(), 5*time.Minute); err == nil {
		t.Error("a signature verified with the wrong secret")
	}
	tampered := []byte(strings.Replace(string(r.body), "agent-7", "agent-8", 1))
	if err := notify.Verify([]byte(secret), r.header.Get(notify.SignatureHeader), tampered, time.Now(), 5*time.Minute); err == nil {
		t.Error("a signature verified over a changed body")
	}
	if err := notify.Verify([]byte(secret), r.header.Get(notify.SignatureHeader), r.body, time.Now().Add(time.Hour), 5*time.Minute); err == nil {
		t.Error("an hour-old signature verified")
	}
	var m notify.Message
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	if m.Event != "approval.requested" || r.header.Get(notify.EventHeader) != "approval.requested" || m.Approval.CallerID != "agent-7" ||
		m.Approval.ToolName != "ops__restart" || m.Approval.Status != "pending" || m.Approval.ID != res.Approval.ID ||
		m.URL != "https://toolsvc.example.com/ui/approvals/"+res.Approval.ID || r.header.Get(notify.DeliveryHeader) != m.ID {
		t.Errorf("requested message = %s, headers %v", r.body, r.header)
	}
	if m.Approval.Arguments != nil {
		t.Errorf("arguments were sent without includeArguments: %s", m.Approval.Arguments)
	}

	if _, _, err := e.Decide(ctx, &registry.Caller{ID: "alice", Scopes: []registry.Scope{registry.ScopeApprove}}, res.Approval.ID, registry.VerdictDeny, "not during the freeze"); err != nil {
		t.Fatal(err)
	}
	r = wait(t, got)
	if err := notify.Verify([]byte(secret), r.header.Get(notify.SignatureHeader), r.body, time.Now(), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	m = notify.Message{}
	_ = json.Unmarshal(r.body, &m)
	if m.Event != "approval.decided" || m.Approval.Status != "denied" || m.Approval.DecidedBy != "alice" || m.Approval.DecisionReason != "not during the freeze" {
		t.Errorf("decided message = %s", r.body)
	}
	// The receiver has the body before the sender counts the answer.
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(metricVec(t, metrics, "toolsvc_notifications_total", "oncall", "delivered")) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("delivered did not reach 2 within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSlackShapeLinksToTheConsoleAndEscapes(t *testing.T) {
	srv, got := receiver(t, http.StatusOK)
	d := notify.New(notify.Options{PublicURL: "https://console.example"})
	defer d.Close()
	d.Load([]*notify.Target{target(t, "slack", notify.Spec{Type: "slack", URL: srv.URL, Events: []string{"requested"}})})
	d.ObserveApproval(registry.ApprovalEvent{Kind: registry.EventApprovalDecided, Approval: registry.Approval{ID: "apr_x", ToolName: "t"}})
	d.ObserveApproval(registry.ApprovalEvent{Kind: registry.EventApprovalRequested, Time: time.Now(), Approval: registry.Approval{
		ID: "apr_1", CallerID: "<!channel> & co", ToolName: "ops__restart", Tier: registry.Privileged, Rule: "ask-ops", Status: registry.ApprovalPending}})
	r := wait(t, got)
	var m struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m.Text, "<https://console.example/ui/approvals/apr_1|") || !strings.Contains(m.Text, "&lt;!channel&gt; &amp; co") ||
		strings.Contains(m.Text, "<!channel>") || len(m.Blocks) != 1 || m.Blocks[0].Type != "section" {
		t.Errorf("slack body = %s", r.body)
	}
	if r.header.Get(notify.SignatureHeader) != "" {
		t.Error("signed without a secret")
	}
	select {
	case r := <-got:
		t.Errorf("an event the notifier does not select was sent: %s", r.body)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestRetriesWithBackoffThenFails(t *testing.T) {
	var mu sync.Mutex
	var times []time.Time
	metrics := failedDelivery(t, "flaky", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 4 {
		t.Fatalf("attempts = %d; want 4", len(times))
	}
	// Pauses double: 20ms, 40ms, 80ms (at least).
	for i, want := range []time.Duration{20, 40, 80} {
		if gap := times[i+1].Sub(times[i]); gap < want*time.Millisecond {
			t.Errorf("pause before attempt %d = %s; want at least %dms", i+2, gap, want)
		}
	}
	if n := testutil.ToFloat64(metricVec(t, metrics, "toolsvc_notification_retries_total", "flaky")); n != 3 {
		t.Errorf("retries = %v; want 3", n)
	}
}

// A redirect is not followed, so asking again gets it again: the delivery
// is given up at once, as for a 4xx, not retried until attempts run out.
func TestRedirectIsNotRetried(t *testing.T) {
	var attempts atomic.Int32
	metrics := failedDelivery(t, "moved", func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	})
	if n := attempts.Load(); n != 1 {
		t.Errorf("attempts = %d; want 1", n)
	}
	if n := testutil.ToFloat64(metricVec(t, metrics, "toolsvc_notification_retries_total", "moved")); n != 0 {
		t.Errorf("retries = %v; want 0", n)
	}
}

// failedDelivery sends one approval request to a webhook notifier name
// (four attempts at most, 20ms backoff) served by h, and returns the
// metrics once the delivery has been given up.
func failedDelivery(t *testing.T, name string, h http.HandlerFunc) *prometheus.Registry {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	metrics := prometheus.NewRegistry()
	d := notify.New(notify.Options{Registerer: metrics, Backoff: 20 * time.Millisecond})
	t.Cleanup(d.Close)
	d.Load([]*notify.Target{target(t, name, notify.Spec{Type: "webhook", URL: srv.URL, MaxAttempts: 4})})
	d.ObserveApproval(registry.ApprovalEvent{Kind: registry.EventApprovalRequested, Approval: registry.Approval{ID: "apr_1"}})
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(metricVec(t, metrics, "toolsvc_notifications_total", name, "failed")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the delivery was not given up within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return metrics
}

func TestFullQueueDropsInsteadOfBlocking(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	metrics := prometheus.NewRegistry()
	d := notify.New(notify.Options{Registerer: metrics})
	defer d.Close()
	d.Load([]*notify.Target{target(t, "stuck", notify.Spec{Type: "webhook", URL: srv.URL, QueueSize: 3, Timeout: "1m"})})
	for i := range 10 {
		d.ObserveApproval(registry.ApprovalEvent{Kind: registry.EventApprovalRequested, Approval: registry.Approval{ID: fmt.Sprint("apr_", i)}})
	}
	// One is being sent, three wait, six are dropped (the worker may not
	// have taken the first yet, then seven are).
	if n := testutil.ToFloat64(metricVec(t, metrics, "toolsvc_notifications_total", "stuck", "dropped")); n < 6 || n > 7 {
		t.Errorf("dropped = %v; want 6 or 7", n)
	}
}

// TestReceiverDownOrHangingDoesNotSlowCalls files calls needing approval
// while one notifier's receiver hangs and another's port is closed. Each
// call must answer far sooner than the receivers' timeout (a generous
// bound; the benchmark below gives the ratio).
func TestReceiverDownOrHangingDoesNotSlowCalls(t *testing.T) {
	hang := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(hang)
	d := notify.New(notify.Options{})
	defer d.Close()
	d.Load([]*notify.Target{
		target(t, "hangs", notify.Spec{Type: "webhook", URL: hanging.URL, Timeout: "1m"}),
		target(t, "down", notify.Spec{Type: "slack", URL: "http://" + closedAddr(t)}),
	})
	e := executor(t, d)
	caller := &registry.Caller{ID: "agent", Scopes: []registry.Scope{registry.ScopeCall}}
	start := time.Now()
	for i := range 20 {
		res, err := e.Execute(context.Background(), caller, &registry.Call{ToolCallID: fmt.Sprint("c", i), ToolName: "ops__restart", Arguments: json.RawMessage(`{}`)})
		if err != nil || res.Status != registry.StatusPendingApproval {
			t.Fatalf("Execute = %+v, %v", res, err)
		}
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("20 calls took %s while receivers hang (each waits up to 1m)", took)
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// BenchmarkFileApproval files a call that needs approval with no
// notifier, with a notifier whose receiver hangs, and with one whose
// receiver is down: the ratio of the three is what notifications cost a
// call.
func BenchmarkFileApproval(b *testing.B) {
	hang := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer hanging.Close()
	defer close(hang)
	down := "http://" + closedAddr(b)
	for _, bc := range []struct {
		name string
		spec *notify.Spec
	}{
		{"none", nil},
		{"hanging", &notify.Spec{Type: "webhook", URL: hanging.URL, Timeout: "1m"}},
		{"down", &notify.Spec{Type: "webhook", URL: down}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			d := notify.New(notify.Options{})
			defer d.Close()
			if bc.spec != nil {
				d.Load([]*notify.Target{target(b, bc.name, *bc.spec)})
			}
			e := executor(b, d)
			caller := &registry.Caller{ID: "agent", Scopes: []registry.Scope{registry.ScopeCall}}
			i := 0
			for b.Loop() {
				i++
				res, err := e.Execute(context.Background(), caller, &registry.Call{ToolCallID: fmt.Sprint("c", i), ToolName: "ops__restart", Arguments: json.RawMessage(`{}`)})
				if err != nil || res.Status != registry.StatusPendingApproval {
					b.Fatal(res, err)
				}
			}
		})
	}
}

func TestDecodeRefusesBadSpecs(t *testing.T) {
	for _, tc := range []struct {
		spec notify.Spec
		want string
	}{
		{notify.Spec{URL: "http://x"}, "type is required"},
		{notify.Spec{Type: "email", URL: "http://x"}, "webhook or slack"},
		{notify.Spec{Type: "webhook", URL: "ftp://x"}, "absolute http or https"},
		{notify.Spec{Type: "webhook", URLFrom: &notify.EnvRef{Env: "NOPE"}}, `"NOPE" is not set`},
		{notify.Spec{Type: "webhook", URL: "http://x", SecretFrom: &notify.EnvRef{Env: "NOPE"}}, "at least 16"},
		{notify.Spec{Type: "webhook", URL: "http://x", Events: []string{"approved"}}, `unknown event "approved"`},
		{notify.Spec{Type: "webhook", URL: "http://x", Timeout: "2h"}, "timeout"},
		{notify.Spec{Type: "webhook", URL: "http://x", MaxAttempts: 99}, "maxAttempts"},
		{notify.Spec{Type: "webhook", URL: "http://x", QueueSize: -1}, "queueSize"},
		{notify.Spec{Type: "webhook", URL: "http://x", Tools: []string{"["}}, "bad glob"},
	} {
		_, err := notify.Decode("n", tc.spec, lookup)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decode(%+v) = %v; want an error with %q", tc.spec, err, tc.want)
		}
	}
}

func metricVec(t testing.TB, g *prometheus.Registry, name string, labels ...string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, l := range m.GetLabel() {
				vals = append(vals, l.GetValue())
			}
			if strings.Join(vals, ",") == strings.Join(labels, ",") {
				v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
				c := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
				c.Set(v)
				return c
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return nil
}

// TestWebhookArgumentsAreBounded: with includeArguments a message carries
// the arguments and their length, but leaves out arguments longer than
// registry.ListedArgumentsBytes, as a list of requests does: a notifier's
// queue (up to 10,000 messages, rendered when queued) held a whole copy of
// every large call while its receiver was slow.
func TestWebhookArgumentsAreBounded(t *testing.T) {
	srv, got := receiver(t, http.StatusNoContent)
	d := notify.New(notify.Options{Registerer: prometheus.NewRegistry()})
	defer d.Close()
	d.Load([]*notify.Target{target(t, "oncall", notify.Spec{Type: "webhook", URL: srv.URL, IncludeArguments: true})})
	e := executor(t, d)
	ctx := context.Background()
	args := map[string]string{
		"small": `{"service":"db"}`,
		"large": `{"service":"` + strings.Repeat("x", registry.ListedArgumentsBytes) + `"}`,
	}
	for id, a := range args {
		res, err := e.Execute(ctx, &registry.Caller{ID: "agent-7", Scopes: []registry.Scope{registry.ScopeCall}},
			&registry.Call{ToolCallID: id, ToolName: "ops__restart", Arguments: json.RawMessage(a)})
		if err != nil || res.Status != registry.StatusPendingApproval {
			t.Fatalf("Execute(%s) = %+v, %v; want pending_approval", id, res, err)
		}
		if _, _, err := e.Decide(ctx, &registry.Caller{ID: "alice", Scopes: []registry.Scope{registry.ScopeApprove}}, res.Approval.ID, registry.VerdictDeny, "no"); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 {
		r := wait(t, got)
		var m notify.Message
		if err := json.Unmarshal(r.body, &m); err != nil {
			t.Fatal(err)
		}
		a := args[m.Approval.ToolCallID]
		want := ""
		if len(a) <= registry.ListedArgumentsBytes {
			want = a
		}
		if string(m.Approval.Arguments) != want || m.Approval.ArgumentsBytes != len(a) {
			t.Errorf("%s of %s: %d bytes of arguments, %d said; want %d sent, %d said",
				m.Event, m.Approval.ToolCallID, len(m.Approval.Arguments), m.Approval.ArgumentsBytes, len(want), len(a))
		}
	}
}
