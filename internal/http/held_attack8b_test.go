package http

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// TestGetCallAnswersFromTheHeldResult: a call that finished while the
// store was full answered 200 with its record pending, and GET
// /calls/{toolCallId} answered 202 "running" for as long as the store
// stayed full (80 s in the probe), ?wait= waiting out its whole time,
// while a repeat of the POST answered ok from memory. GET now answers
// with the held result, as the POST did (recordPending, Toolsvc-Record:
// pending), and a wait ends when the call does.
func TestGetCallAnswersFromTheHeldResult(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	st := &storetest.FinishFails{Store: openStore(t)} // FinishCall fails, as on a full disk, while down
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second}, &registry.Tool{
			Definition: registry.Definition{Name: "test__append", Description: "appends", Tier: registry.SideEffecting, Parameters: json.RawMessage(`{"type":"object"}`)},
			Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
				started <- struct{}{}
				<-release
				return "appended", nil
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		o.Registry, o.Store = reg, st
	})
	st.Down.Store(true)
	posted := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.ts.URL+"/calls", strings.NewReader(`{"toolName":"test__append","toolCallId":"held-1"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := e.ts.Client().Do(req)
		if err != nil {
			t.Error(err)
			posted <- response{}
			return
		}
		defer resp.Body.Close()
		posted <- response{status: resp.StatusCode, header: resp.Header}
	}()
	<-started
	if r := e.do("GET", "/calls/held-1", nil, nil, true); r.status != 202 {
		t.Fatalf("GET while the call runs: %d %s", r.status, r.body)
	}
	type got struct {
		r  response
		at time.Duration
	}
	waited := make(chan got, 1)
	begin := time.Now()
	go func() {
		r := e.do("GET", "/calls/held-1?wait=20s", nil, nil, true)
		waited <- got{r, time.Since(begin)}
	}()
	time.Sleep(200 * time.Millisecond) // the GET waits
	close(release)
	if p := <-posted; p.status != 200 || p.header.Get(RecordHeader) != "pending" {
		t.Fatalf("the call's own answer: %d, %s %q; want 200 with its record pending", p.status, RecordHeader, p.header.Get(RecordHeader))
	}
	check := func(what string, r response) {
		t.Helper()
		var res registry.Result
		if r.status == 200 {
			r.json(t, &res)
		}
		if r.status != 200 || res.Status != registry.StatusOK || !res.RecordPending || string(res.Output) != `"appended"` || r.header.Get(RecordHeader) != "pending" {
			t.Errorf("%s: %d %s, %s %q; want 200 ok with recordPending and %s: pending", what, r.status, r.body, RecordHeader, r.header.Get(RecordHeader), RecordHeader)
		}
	}
	w := <-waited
	check("GET ?wait=20s", w.r)
	if w.at > 5*time.Second {
		t.Errorf("GET ?wait=20s answered after %s; want as the call ended", w.at)
	}
	check("GET", e.do("GET", "/calls/held-1", nil, nil, true))
	check("GET ?wait=3s", e.do("GET", "/calls/held-1?wait=3s", nil, nil, true))
	if rec, err := st.GetCall(t.Context(), "anonymous", "held-1"); err != nil || rec.State != registry.CallRunning {
		t.Fatalf("the store's record: %v %+v; the test needs it still running", err, rec)
	}
	// The console's page of the call shows it as the API does.
	if status, body := e.page("/ui/calls/held-1"); status != 200 || !strings.Contains(body, "appended") {
		t.Errorf("the console's page of the held call: %d, without its output:\n%s", status, body)
	}

	// Once the store takes the result, the stored record answers.
	st.Down.Store(false)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if n := e.srv.deps.Executor.(*registry.Executor).FlushRecords(ctx); n != 0 {
		t.Fatalf("FlushRecords = %d", n)
	}
	r := e.do("GET", "/calls/held-1", nil, nil, true)
	var res registry.Result
	r.json(t, &res)
	if r.status != 200 || res.Status != registry.StatusOK || res.RecordPending || r.header.Get(RecordHeader) != "" {
		t.Errorf("GET once recorded: %d %s %q", r.status, r.body, r.header.Get(RecordHeader))
	}
}
