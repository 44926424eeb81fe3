package registry

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// TestReloadKeepsToolSlots: a reload builds every tool anew; the calls
// still running from before it count against the tool's maxConcurrency
// after it, so reloads cannot multiply the limit. A changed limit starts
// afresh.
func TestReloadKeepsToolSlots(t *testing.T) {
	started, release := make(chan struct{}, 4), make(chan struct{})
	slow := func(ctx context.Context, r *Request) (any, error) { started <- struct{}{}; <-release; return "ok", nil }
	limited := func(n int) *Tool {
		t := tool("t__slow", ReadOnly, slow)
		t.MaxConcurrency = n
		return t
	}
	e := newExec(t, Options{}, limited(1))
	defer close(release)
	load := func(n int) {
		reg, err := New(Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, limited(n))
		if err != nil {
			t.Fatal(err)
		}
		e.Load(reg, nil)
	}
	args := json.RawMessage(`{"path":"x"}`)
	go e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__slow", Arguments: args})
	<-started
	for range 3 {
		load(1)
		if _, err := e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__slow", Arguments: args}); !errors.Is(err, ErrOverloaded) {
			t.Fatalf("a call after a reload, with one running from before: %v, want ErrOverloaded", err)
		}
	}
	load(2)
	go e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__slow", Arguments: args})
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("a raised limit did not let a call run")
	}
}
