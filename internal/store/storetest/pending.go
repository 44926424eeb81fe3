package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// RunPendingLimit checks that a caller's bound on waiting approval
// requests (registry.Options.MaxPendingApprovals) holds when many calls
// file at the same moment, through executors over stores, which may be
// several stores sharing one database (replicas): exactly the bound are
// filed, the others are E_POLICY_DENIED and leave no record. The stores
// must offer registry.PendingLimiter, whose own bound is checked the same
// way.
func RunPendingLimit(t *testing.T, stores ...registry.Store) {
	t.Helper()
	const max, calls = 10, 60
	t.Run("store", func(t *testing.T) {
		now := time.Now()
		errs := fire(calls, func(i int) error {
			st := stores[i%len(stores)]
			l, ok := st.(registry.PendingLimiter)
			if !ok {
				return fmt.Errorf("%T is not a registry.PendingLimiter", st)
			}
			return l.CreateApprovalWithin(context.Background(), &registry.Approval{
				ID: fmt.Sprintf("apr_limit_%d", i), CallerID: "flood-store", ToolCallID: fmt.Sprintf("c%d", i), ToolName: "t__x",
				ArgumentsDigest: "d", Arguments: []byte(`{}`), Status: registry.ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(time.Hour),
			}, max)
		})
		filed := 0
		for _, err := range errs {
			switch {
			case err == nil:
				filed++
			case !errors.Is(err, registry.ErrTooManyPending):
				t.Fatalf("CreateApprovalWithin: %v", err)
			}
		}
		n, err := stores[0].CountApprovals(context.Background(), registry.ApprovalFilter{Status: registry.ApprovalPending, CallerID: "flood-store"})
		if err != nil {
			t.Fatal(err)
		}
		if filed != max || n != max {
			t.Errorf("%d concurrent filings at a bound of %d: %d filed, %d pending; want %d", calls, max, filed, n, max)
		}
	})
	t.Run("executor", func(t *testing.T) {
		tool := &registry.Tool{
			Definition: registry.Definition{Name: "shell__exec", Description: "Runs after approval.", Tier: registry.Privileged,
				Parameters: []byte(`{"type":"object"}`)},
			Handler: registry.Func(func(context.Context, *registry.Request) (any, error) { return "ran", nil }),
		}
		reg, err := registry.New(registry.Defaults{Timeout: time.Minute, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tool)
		if err != nil {
			t.Fatal(err)
		}
		execs := make([]*registry.Executor, len(stores))
		for i, st := range stores {
			execs[i] = registry.NewExecutor(registry.Options{Registry: reg, Store: st, MaxPendingApprovals: max})
		}
		caller := &registry.Caller{ID: "flood", Scopes: []registry.Scope{registry.ScopeCall}}
		results := make([]*registry.Result, calls)
		errs := fire(calls, func(i int) error {
			var err error
			results[i], err = execs[i%len(execs)].Execute(context.Background(), caller, &registry.Call{ToolCallID: fmt.Sprintf("f%d", i), ToolName: "shell__exec"})
			return err
		})
		pending := 0
		for i, res := range results {
			switch {
			case errs[i] != nil:
				t.Fatalf("call %d: %v", i, errs[i])
			case res.Status == registry.StatusPendingApproval:
				pending++
			case res.Code() != registry.CodePolicyDenied:
				t.Fatalf("call %d: %+v, want pending or E_POLICY_DENIED", i, res)
			default:
				if _, err := stores[0].GetCall(context.Background(), "flood", res.ToolCallID); !errors.Is(err, registry.ErrNotFound) {
					t.Errorf("refused call %s left a record (%v)", res.ToolCallID, err)
				}
			}
		}
		n, err := stores[0].CountApprovals(context.Background(), registry.ApprovalFilter{Status: registry.ApprovalPending, CallerID: "flood"})
		if err != nil {
			t.Fatal(err)
		}
		if pending != max || n != max {
			t.Errorf("%d concurrent calls at a bound of %d waiting requests, over %d stores: %d answered pending, %d requests waiting; want %d",
				calls, max, len(stores), pending, n, max)
		}
	})
}

// fire runs f(0) … f(n-1) on goroutines of their own, released together,
// and returns their errors.
func fire(n int, f func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = f(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}
