package registry

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestExecuteBatchPassesCallerAndCatalog(t *testing.T) {
	who := Func(func(_ context.Context, r *Request) (any, error) {
		return map[string]any{"caller": r.Caller.ID, "catalog": r.Catalog}, nil
	})
	e := newExec(t, Options{}, tool("t__who", ReadOnly, who))
	caller := &Caller{ID: "gw-1", Scopes: []Scope{ScopeCall}}
	res, err := e.ExecuteBatch(context.Background(), caller, []*Call{
		{ToolName: "t__who", Arguments: json.RawMessage(`{"path":"a"}`)},
		{ToolName: "t__who", Arguments: json.RawMessage(`{"path":"a"}`), Catalog: []string{"t__who"}},
		{ToolName: "t__nope"},
	}, BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || string(res[0].Output) != `{"caller":"gw-1","catalog":null}` || string(res[1].Output) != `{"caller":"gw-1","catalog":["t__who"]}` {
		t.Fatalf("results: %s / %s", res[0].Output, res[1].Output)
	}
	if res[2].Code() != CodeToolNotFound {
		t.Errorf("unknown tool in a batch: %+v", res[2])
	}
	if _, err := e.ExecuteBatch(context.Background(), caller, make([]*Call, MaxBatchCalls+1), BatchOptions{}); !errors.Is(err, ErrBatchTooLarge) {
		t.Errorf("51 calls: %v", err)
	}
}

func TestExecuteBatchCancel(t *testing.T) {
	var started atomic.Int32
	running := make(chan struct{})
	block := Func(func(ctx context.Context, r *Request) (any, error) {
		if started.Add(1) == 1 {
			close(running)
		}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	e := newExec(t, Options{}, tool("t__block", ReadOnly, block), tool("t__write", SideEffecting, block))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-running
		cancel()
	}()
	calls := []*Call{{ToolName: "t__block"}, {ToolName: "t__block"}, {ToolName: "t__write"}, {ToolName: "t__block"}}
	for _, c := range calls {
		c.Arguments = json.RawMessage(`{"path":"a"}`)
	}
	res, err := e.ExecuteBatch(ctx, Anonymous(), calls, BatchOptions{Parallelism: 1})
	if err != nil {
		t.Fatal(err)
	}
	if started.Load() != 1 {
		t.Errorf("%d calls started after the cancellation, want only the first", started.Load())
	}
	for i, r := range res {
		if r.Code() != CodeCanceled || (i > 0 && !strings.HasPrefix(r.Error.Message, "not started")) || r.ToolCallID == "" {
			t.Errorf("result %d: %+v", i, r.Error)
		}
	}
	if res[2].Error.Name != "t__write" {
		t.Errorf("a call not started lacks its tool name: %+v", res[2].Error)
	}
}

// releasingPolicy allows everything; deciding on onDecide's tool first runs it.
type releasingPolicy struct {
	tool     string
	onDecide func()
}

func (p releasingPolicy) Decide(_ context.Context, in *PolicyInput) (Decision, error) {
	if in.Tool.Name == p.tool {
		p.onDecide()
	}
	return Decision{Effect: Allow, Rule: "test"}, nil
}

func TestExecuteBatchCapacity(t *testing.T) {
	release, held, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	hold := Func(func(ctx context.Context, r *Request) (any, error) {
		close(held)
		<-release
		return "held", nil
	})
	quick := Func(func(ctx context.Context, r *Request) (any, error) { return "ran", nil })
	var once sync.Once
	e := newExec(t, Options{MaxConcurrency: 1, Policy: releasingPolicy{tool: "t__second", onDecide: func() {
		// The first barrier has given up by now; free the slot for the second.
		once.Do(func() { close(release); <-done })
	}}}, tool("t__hold", ReadOnly, hold), tool("t__first", SideEffecting, quick), tool("t__second", SideEffecting, quick), tool("t__quick", ReadOnly, quick))
	args := json.RawMessage(`{"path":"a"}`)
	go func() {
		defer close(done)
		if _, err := e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__hold", Arguments: args}); err != nil {
			t.Error(err)
		}
	}()
	<-held

	// Nothing can run: the batch is overloaded as a whole.
	if _, err := e.ExecuteBatch(context.Background(), Anonymous(), []*Call{{ToolName: "t__quick", Arguments: args}}, BatchOptions{CapacityWait: time.Millisecond}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("batch while the only slot is held: %v", err)
	}
	// The first call finds no capacity, the second finds it freed.
	res, err := e.ExecuteBatch(context.Background(), Anonymous(), []*Call{{ToolName: "t__first", Arguments: args}, {ToolName: "t__second", Arguments: args}}, BatchOptions{CapacityWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Code() != CodeCanceled || !strings.HasPrefix(res[0].Error.Message, "not run: ") || res[0].Error.Suggestion == "" {
		t.Errorf("call without capacity: %+v", res[0].Error)
	}
	if res[1].Status != StatusOK {
		t.Errorf("call after capacity was freed: %+v", res[1])
	}
}

func TestExecuteBatchWaitsForCapacity(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{})
	var decided atomic.Bool
	hold := Func(func(ctx context.Context, r *Request) (any, error) {
		close(held)
		<-release
		return "held", nil
	})
	quick := Func(func(ctx context.Context, r *Request) (any, error) { return "ran", nil })
	e := newExec(t, Options{MaxConcurrency: 1, Policy: releasingPolicy{tool: "t__quick", onDecide: func() { decided.Store(true) }}},
		tool("t__hold", ReadOnly, hold), tool("t__quick", ReadOnly, quick))
	args := json.RawMessage(`{"path":"a"}`)
	go func() {
		_, _ = e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__hold", Arguments: args})
	}()
	<-held
	go func() {
		for !decided.Load() {
			time.Sleep(time.Millisecond)
		}
		close(release) // the batch call is past policy, at or near the slot
	}()
	res, err := e.ExecuteBatch(context.Background(), Anonymous(), []*Call{{ToolName: "t__quick", Arguments: args}}, BatchOptions{CapacityWait: time.Minute})
	if err != nil || res[0].Status != StatusOK {
		t.Fatalf("batch call that waited for capacity: %v %+v", err, res)
	}
}

// Once the executor drains, a batch in flight starts none of its calls
// not yet started, in a group or after a barrier; the call running
// finishes.
func TestExecuteBatchStopsStartingCallsWhenDraining(t *testing.T) {
	var started atomic.Int32
	running := make(chan struct{})
	release := make(chan struct{})
	hold := Func(func(ctx context.Context, r *Request) (any, error) {
		if started.Add(1) == 1 {
			close(running)
			<-release
		}
		return map[string]any{"ok": true}, nil
	})
	e := newExec(t, Options{}, tool("t__write", SideEffecting, hold), tool("t__read", ReadOnly, hold))
	calls := []*Call{{ToolName: "t__write"}, {ToolName: "t__read"}, {ToolName: "t__read"}, {ToolName: "t__write"}}
	for _, c := range calls {
		c.Arguments = json.RawMessage(`{"path":"a"}`)
	}
	go func() {
		<-running
		e.Drain()
		e.Drain() // twice is harmless
		close(release)
	}()
	res, err := e.ExecuteBatch(context.Background(), Anonymous(), calls, BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if started.Load() != 1 || res[0].Status != StatusOK {
		t.Fatalf("%d calls started, the first %+v; want only the first, ok", started.Load(), res[0])
	}
	for i, r := range res[1:] {
		if r.Code() != CodeCanceled || !strings.Contains(r.Error.Message, "not started: the service is shutting down") || r.Error.Suggestion == "" {
			t.Errorf("result %d: %+v", i+1, r.Error)
		}
	}
}
