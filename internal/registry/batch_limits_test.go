package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestBatchWaitsForItsOwnCalls: a batch alone on the service runs every
// call, however low the tool's or the service's limit: the calls beyond
// a limit wait for the batch's own calls to end, where before they waited
// the capacity wait for slots the batch's slow calls held, and were
// refused.
func TestBatchWaitsForItsOwnCalls(t *testing.T) {
	slow := func(ctx context.Context, r *Request) (any, error) {
		time.Sleep(100 * time.Millisecond)
		return "ok", nil
	}
	limited := tool("t__limited", ReadOnly, slow)
	limited.MaxConcurrency = 2
	free := tool("t__free", ReadOnly, slow)
	e := newExec(t, Options{MaxConcurrency: 3}, limited, free)
	args := json.RawMessage(`{"path":"x"}`)
	for _, name := range []string{"t__limited", "t__free"} {
		calls := make([]*Call, 12)
		for i := range calls {
			calls[i] = &Call{ToolName: name, Arguments: args}
		}
		results, err := e.ExecuteBatch(context.Background(), Anonymous(), calls, BatchOptions{CapacityWait: 20 * time.Millisecond})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, res := range results {
			if res.Status != StatusOK {
				t.Errorf("%s: call %d: %+v", name, i+1, res.Error)
			}
		}
	}
}

// TestBatchNamesTheLimitThatRefused: a call refused because its tool's
// own limit is taken by calls outside the batch says so, not that the
// service is full.
func TestBatchNamesTheLimitThatRefused(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	block := func(ctx context.Context, r *Request) (any, error) { entered <- struct{}{}; <-release; return "ok", nil }
	limited := tool("t__limited", ReadOnly, block)
	limited.MaxConcurrency = 1
	e := newExec(t, Options{}, limited, tool("t__echo", ReadOnly, echo))
	args := json.RawMessage(`{"path":"x"}`)
	go e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__limited", Arguments: args})
	<-entered
	defer close(release)
	results, err := e.ExecuteBatch(context.Background(), Anonymous(), []*Call{{ToolName: "t__echo", Arguments: args}, {ToolName: "t__limited", Arguments: args}},
		BatchOptions{CapacityWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res := results[1]; res.Code() != CodeCanceled || !strings.Contains(res.Error.Message, "tool t__limited runs at most 1 calls at once") {
		t.Errorf("refused call: %+v", res.Error)
	}
}

// TestBatchAnswersAreAudited: the calls a batch answers itself (here, not
// started because the caller left) have the audit line every call the
// service answers has.
func TestBatchAnswersAreAudited(t *testing.T) {
	var logs bytes.Buffer
	e := newExec(t, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, tool("t__echo", ReadOnly, echo))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	args := json.RawMessage(`{"path":"x"}`)
	results, err := e.ExecuteBatch(ctx, Anonymous(), []*Call{{ToolCallID: "n1", ToolName: "t__echo", Arguments: args}, {ToolCallID: "n2", ToolName: "t__echo", Arguments: args}}, BatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		if res.Code() != CodeCanceled {
			t.Fatalf("result: %+v", res)
		}
		if !strings.Contains(logs.String(), `"msg":"tool call","caller":"anonymous","tool":"t__echo","tier":"read_only","toolCallId":"`+res.ToolCallID+`"`) {
			t.Errorf("no audit line of %s:\n%s", res.ToolCallID, logs.String())
		}
	}
}
