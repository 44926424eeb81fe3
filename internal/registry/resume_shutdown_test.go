package registry_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestApprovedCallStopsWithTheService: an approved call outlives its
// approver's request, but not the service: when the drain time is up and
// calls are cancelled (ErrShutdown), it stops and reads E_INTERRUPTED
// like every other recorded call. Before, it was detached from the
// shutdown too, so it ran on past TOOLSVC_SHUTDOWN_TIMEOUT with the
// approver waiting for an answer that never came.
func TestApprovedCallStopsWithTheService(t *testing.T) {
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	defer close(release)
	waits := &registry.Tool{
		Definition: registry.Definition{Name: "t__wait", Description: "Waits.", Tier: registry.Privileged, Parameters: object},
		Handler: registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
			entered <- struct{}{}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-release:
				return "released", nil
			}
		}),
	}
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, waits), Store: openSQLite(t)})
	decide := func(ctx context.Context, id string) <-chan *registry.Result {
		done := make(chan *registry.Result, 1)
		go func() {
			_, res, err := e.Decide(ctx, registry.Anonymous(), id, registry.VerdictApprove, "")
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		return done
	}
	file := func(id string) string {
		res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolCallID: id, ToolName: "t__wait", Arguments: json.RawMessage(`{}`)})
		if err != nil || res.Status != registry.StatusPendingApproval {
			t.Fatalf("filing: %v %+v", err, res)
		}
		return res.Approval.ID
	}

	// The approver leaves: the call goes on.
	ctx, leave := context.WithCancel(t.Context())
	left := decide(ctx, file("c1"))
	<-entered
	leave()
	select {
	case res := <-left:
		t.Fatalf("the approved call stopped when its approver left: %+v", res)
	case <-time.After(300 * time.Millisecond):
	}

	// The service stops: the call stops, and says it was interrupted.
	ctx, shutdown := context.WithCancelCause(t.Context())
	stopped := decide(ctx, file("c2"))
	<-entered
	shutdown(registry.ErrShutdown)
	select {
	case res := <-stopped:
		if res.Code() != registry.CodeInterrupted {
			t.Errorf("the approved call at shutdown: %+v", res.Error)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the approved call ran on after the service cancelled its calls")
	}
}
