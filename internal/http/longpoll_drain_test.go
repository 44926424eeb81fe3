package http

import (
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestLongPollsEndAtDrain: a GET /calls/{id}?wait= waiting on a call is no
// call in flight, so shutdown does not wait for it; it must not wait out
// its wait either. At drain it answers at once with the call's state as
// it stands, and tells the client to ask again (elsewhere). Before, it
// waited until the server cut it off 5 s later, which answered 503 "the
// call store is not answering" and made the process exit 1.
func TestLongPollsEndAtDrain(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = openStore(t) })
	if r, res := e.call("/calls", `{"toolName":"test__priv","toolCallId":"waits","arguments":{"n":1}}`); r.status != 202 || res.Approval == nil {
		t.Fatalf("filing: %d %s", r.status, r.body)
	}
	answered := make(chan response, 1)
	go func() { answered <- e.do("GET", "/calls/waits?wait=60s", nil, nil, true) }()
	select {
	case r := <-answered:
		t.Fatalf("the long poll answered before the drain: %d %s", r.status, r.body)
	case <-time.After(300 * time.Millisecond):
	}
	e.srv.Drain()
	select {
	case r := <-answered:
		if r.status != 202 || r.header.Get("Retry-After") == "" {
			t.Errorf("the long poll at drain: %d %v %s", r.status, r.header, r.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll went on waiting after the drain")
	}
}

// TestDrainRefusalsAreNotErrors: a call refused because the service is
// shutting down is logged at info level: a drain is what the operator
// asked for, and an error line per refused call pages someone for it.
func TestDrainRefusalsAreNotErrors(t *testing.T) {
	e, logs := infoEnv(t)
	e.srv.Drain()
	if r, _ := e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`); r.status != 503 {
		t.Fatalf("a call while draining: %d %s", r.status, r.body)
	}
	findLogLine(t, logs, func(m map[string]any) bool { return m["msg"] == "refused while draining" && m["level"] == "INFO" })
	for _, m := range logLines(t, logs) {
		if m["level"] == "ERROR" {
			t.Errorf("an error line for a refusal while draining: %v", m)
		}
	}
}
