package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// probeTool is a side-effecting tool whose schema holds a tag to max
// characters (0: any), and how many times it ran. Calls wait for release
// (nil: they do not wait).
func probeTool(name string, max int, release <-chan struct{}, runs *atomic.Int32) *registry.Tool {
	tag := `{"type":"string"}`
	if max > 0 {
		tag = `{"type":"string","maxLength":` + string(rune('0'+max)) + `}`
	}
	return &registry.Tool{
		Definition: registry.Definition{Name: name, Description: "Runs the probe.", Tier: registry.SideEffecting,
			Parameters: json.RawMessage(`{"type":"object","properties":{"tag":` + tag + `}}`)},
		Handler: registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
			if release != nil {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return map[string]any{"run": runs.Add(1)}, nil
		}),
	}
}

// TestRepeatAfterReloadGetsItsStoredResult: a call that ran is repeated
// after a reload removed its tool, tightened its schema or narrowed the
// caller's catalog; the repeat gets the stored result, not
// E_TOOL_NOT_FOUND, E_INVALID_ARGUMENTS or E_TOOL_NOT_IN_CATALOG, which
// would tell a model to "fix" the call and make its side effect again.
// Another call under the id is still a 409, and a new id is refused as
// before.
func TestRepeatAfterReloadGetsItsStoredResult(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, probeTool("probe__run", 0, release, &runs)), Store: openSQLite(t)})
	caller := &registry.Caller{ID: "agent", Scopes: []registry.Scope{registry.ScopeCall}}
	call := func(id, tool, args string) (*registry.Result, error) {
		return e.Execute(t.Context(), caller, &registry.Call{ToolCallID: id, ToolName: tool, Arguments: json.RawMessage(args)})
	}

	// The first call runs while a reload removes its tool; a repeat made
	// meanwhile waits for it.
	first := make(chan *registry.Result, 1)
	go func() {
		res, err := call("rt1", "probe__run", `{"tag":"abcdef"}`)
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := e.Store().GetCall(t.Context(), "agent", "rt1"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("the first call was not recorded")
		}
	}
	e.Load(newRegistry(t), nil)
	waiting := make(chan *registry.Result, 1)
	go func() {
		res, _ := call("rt1", "probe__run", `{"tag":"abcdef"}`)
		waiting <- res
	}()
	time.Sleep(50 * time.Millisecond)
	close(release)
	ran := <-first
	if ran.Status != registry.StatusOK {
		t.Fatalf("first call: %+v", ran.Error)
	}
	if res := <-waiting; res == nil || res.Status != registry.StatusOK || string(res.Output) != string(ran.Output) {
		t.Fatalf("a repeat while the call ran, its tool removed meanwhile: %+v, want the call's result %s", res, ran.Output)
	}

	for _, tc := range []struct {
		name string
		reg  *registry.Registry
		c    *registry.Caller
	}{
		{"tool removed", newRegistry(t), caller},
		{"schema tightened", newRegistry(t, probeTool("probe__run", 2, nil, &runs)), caller},
		{"caller's catalog narrowed", newRegistry(t, probeTool("probe__run", 0, nil, &runs)), &registry.Caller{ID: "agent", Tools: []string{"other__*"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.Load(tc.reg, nil)
			res, err := e.Execute(t.Context(), tc.c, &registry.Call{ToolCallID: "rt1", ToolName: "probe__run", Arguments: json.RawMessage(`{"tag":"abcdef"}`)})
			if err != nil || res.Status != registry.StatusOK || string(res.Output) != string(ran.Output) {
				t.Fatalf("repeat: %v %+v, want the stored result %s", err, res.Error, ran.Output)
			}
			if _, err := e.Execute(t.Context(), tc.c, &registry.Call{ToolCallID: "rt1", ToolName: "probe__run", Arguments: json.RawMessage(`{"tag":"other"}`)}); !errors.Is(err, registry.ErrConflict) {
				t.Errorf("the id with other arguments: %v, want ErrConflict", err)
			}
			if _, err := e.Execute(t.Context(), tc.c, &registry.Call{ToolCallID: "rt1", ToolName: "probe__gone", Arguments: json.RawMessage(`{"tag":"abcdef"}`)}); !errors.Is(err, registry.ErrConflict) {
				t.Errorf("the id with another tool: %v, want ErrConflict", err)
			}
		})
	}
	e.Load(newRegistry(t), nil)
	if res, err := call("rt2", "probe__run", `{"tag":"abcdef"}`); err != nil || res.Code() != registry.CodeToolNotFound {
		t.Errorf("a new call of the removed tool: %v %+v, want E_TOOL_NOT_FOUND", err, res)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
}

// TestApprovedWhileToolMissingSaysSo: a call approved while a reload had
// removed its tool ends E_TOOL_NOT_FOUND without running, and its record
// says that the tool did not exist when the call was approved, so that a
// repeat that reads it once the tool is back is not told the tool does
// not exist. An approved call whose arguments no longer fit the tool's
// schema says the same of them.
func TestApprovedWhileToolMissingSaysSo(t *testing.T) {
	tool, runs := privileged()
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: openSQLite(t)})
	caller := &registry.Caller{ID: "agent", Scopes: []registry.Scope{registry.ScopeCall}}
	call := &registry.Call{ToolCallID: "nf1", ToolName: "shell__exec", Arguments: json.RawMessage(`{}`)}
	res, err := e.Execute(t.Context(), caller, call)
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing: %v %+v", err, res)
	}
	e.Load(newRegistry(t), nil)
	if again, err := e.Execute(t.Context(), caller, call); err != nil || again.Status != registry.StatusPendingApproval {
		t.Fatalf("a repeat while the tool is missing: %v %+v, want its pending ticket", err, again)
	}
	_, out, err := e.Decide(t.Context(), registry.Anonymous(), res.Approval.ID, registry.VerdictApprove, "")
	if err != nil {
		t.Fatal(err)
	}
	if out.Code() != registry.CodeToolNotFound || !strings.Contains(out.Error.Message, "did not exist when this call was approved") || !strings.HasPrefix(out.Error.Message, "nothing ran") {
		t.Fatalf("approved while its tool was missing: %+v", out.Error)
	}
	e.Load(newRegistry(t, tool), nil)
	again, err := e.Execute(t.Context(), caller, call)
	if err != nil || again.Code() != registry.CodeToolNotFound || again.Error.Message != out.Error.Message {
		t.Fatalf("a repeat once the tool is back: %v %+v, want the record's answer", err, again)
	}

	// Arguments that no longer fit.
	e.Load(newRegistry(t, tool), nil)
	tagged := &registry.Call{ToolCallID: "nf2", ToolName: "shell__exec", Arguments: json.RawMessage(`{"tag":"abcdef"}`)}
	res, err = e.Execute(t.Context(), caller, tagged)
	if err != nil || res.Status != registry.StatusPendingApproval {
		t.Fatalf("filing: %v %+v", err, res)
	}
	strict := *tool
	strict.Parameters = json.RawMessage(`{"type":"object","properties":{"tag":{"type":"string","maxLength":2}}}`)
	e.Load(newRegistry(t, &strict), nil)
	_, out, err = e.Decide(t.Context(), registry.Anonymous(), res.Approval.ID, registry.VerdictApprove, "")
	if err != nil {
		t.Fatal(err)
	}
	if out.Code() != registry.CodeInvalidArguments || !strings.Contains(out.Error.Message, "when it was approved arguments do not match") {
		t.Fatalf("approved once its schema changed: %+v", out.Error)
	}
	if runs.Load() != 0 {
		t.Errorf("the tool ran %d times", runs.Load())
	}
}
