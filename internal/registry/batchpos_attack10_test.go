package registry_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestBatchHeldNamesTheCallByItsRequestPosition: the calls a batch holds
// behind a call that waits for approval name that call by its position
// in the request (BatchOptions.Positions), which counts the calls answered
// before the batch; without positions, by its index among the calls.
// The probe's batch had calls 2, 3 and 5 refused as duplicates, and the
// calls after its ninth, pending, call were told to wait for "call 6".
func TestBatchHeldNamesTheCallByItsRequestPosition(t *testing.T) {
	for _, c := range []struct {
		name      string
		positions []int
		want      int
	}{
		{"request positions", []int{1, 4, 6, 7, 8, 9, 10, 11}, 9},
		{"no positions", nil, 6},
		{"positions of another length are ignored", []int{1, 4}, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log runLog
			e := registry.NewExecutor(registry.Options{Store: openSQLite(t), Policy: askFor("t__deploy"), Registry: newRegistry(t,
				log.tool("t__read", registry.ReadOnly), log.tool("t__deploy", registry.SideEffecting), log.tool("t__write", registry.SideEffecting))})
			calls := batchCalls("t__read", "t__read", "t__read", "t__read", "t__read", "t__deploy", "t__read", "t__write")
			res, err := e.ExecuteBatch(t.Context(), registry.Anonymous(), calls, registry.BatchOptions{Positions: c.positions})
			if err != nil {
				t.Fatal(err)
			}
			if res[5].Status != registry.StatusPendingApproval {
				t.Fatalf("the deploy: %+v", res[5])
			}
			msg := fmt.Sprintf(`not started: call %d of the batch (toolCallId "c6") waits for approval`, c.want)
			sug := fmt.Sprintf("once call %d has finished", c.want)
			for i, r := range res[6:] {
				if r.Code() != registry.CodeCanceled || !strings.HasPrefix(r.Error.Message, msg) || !strings.Contains(r.Error.Suggestion, sug) {
					t.Errorf("call %d after the pending one: %+v; want %q and %q", i+7, r.Error, msg, sug)
				}
			}
		})
	}
}
