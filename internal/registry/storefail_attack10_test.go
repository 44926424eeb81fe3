package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// unreadableCalls is a real store whose reads of call records fail with
// err, as on a locked calls table (a plain error: the store did not
// answer in time) or a dropped one (marked ErrStoreBroken, as the
// PostgreSQL store marks a missing relation).
type unreadableCalls struct {
	*sqlite.Store
	err error
}

func (u *unreadableCalls) GetCall(context.Context, string, string) (*registry.CallRecord, error) {
	return nil, u.err
}

// TestRecallFailureIsCountedAndKeepsItsKind: a durable call with a
// toolCallId reads its record before it writes one (recall), and on a
// locked or dropped calls table that read is what fails. The call does
// not run and answers ErrUnavailable, keeping an ErrStoreBroken of the
// store (the answer then says an operator must act, with a longer
// Retry-After); and three such calls make store.Failing report the
// store, so /readyz fails. Before, only the writes counted: /readyz
// answered ready while every call with a toolCallId answered 503.
func TestRecallFailureIsCountedAndKeepsItsKind(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		wantBroken bool
	}{
		{"locked table", errors.New("canceling statement due to statement timeout (SQLSTATE 57014)"), false},
		{"dropped table", fmt.Errorf("%w (a table is missing): relation \"calls\" does not exist (SQLSTATE 42P01)", registry.ErrStoreBroken), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var runs atomic.Int32
			tool := &registry.Tool{
				Definition: registry.Definition{Name: "fs__write", Description: "Writes.", Tier: registry.SideEffecting, Parameters: object},
				Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
					return runs.Add(1), nil
				}),
			}
			st := store.WithDeadline(&unreadableCalls{Store: openSQLite(t), err: tt.err}, 5*time.Second)
			e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool), Store: st})
			t.Cleanup(e.Drain)
			for i := range 4 {
				res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolCallID: fmt.Sprintf("w%d", i), ToolName: "fs__write"})
				if !errors.Is(err, registry.ErrUnavailable) || errors.Is(err, registry.ErrStoreBroken) != tt.wantBroken {
					t.Fatalf("call %d: %v %+v; want ErrUnavailable, ErrStoreBroken %v", i, err, res, tt.wantBroken)
				}
			}
			if n := runs.Load(); n != 0 {
				t.Errorf("the tool ran %d times; its calls' records could not be read", n)
			}
			if err := store.Failing(st); err == nil || !strings.Contains(err.Error(), "the last 4 reads of call records failed") {
				t.Errorf("Failing after four calls failed reading their records: %v", err)
			}
		})
	}
}
