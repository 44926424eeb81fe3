package plan

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// TestPlanStepWhoseRecordIsHeldSaysSo: a step that ran while the store
// could not take its result is answered recordPending, as the call of
// its own would be, and the plan counts it; a plain "ok" would be
// contradicted by a repeat of the plan once the held result is lost
// (E_INTERRUPTED). Once the store has taken it, the repeat answers from
// the record, without the flag and without running the step again.
func TestPlanStepWhoseRecordIsHeldSaysSo(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	fs := &storetest.FinishFails{Store: st}
	env := newTestEnvWith(t, true, registry.Options{Store: fs})
	args := json.RawMessage(`{"steps":[{"tool":"test__write","arguments":{}},{"tool":"text__transform","arguments":{"operation":"upper","text":"a"}}]}`)
	// The plan's output, read as a client reads it.
	type output struct {
		RecordPending int `json:"recordPending"`
		Steps         []struct {
			Status        registry.Status `json:"status"`
			RecordPending bool            `json:"recordPending"`
		} `json:"steps"`
	}
	plan := func() (*registry.Result, output) {
		t.Helper()
		res, steps := env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "rp", Arguments: args})
		if res.Status != registry.StatusOK || len(steps) != 2 {
			t.Fatalf("plan: %+v %+v", res, res.Error)
		}
		var out output
		if err := json.Unmarshal(res.Output, &out); err != nil {
			t.Fatal(err)
		}
		return res, out
	}

	fs.Down.Store(true)
	res, out := plan()
	if !out.Steps[0].RecordPending || out.Steps[0].Status != registry.StatusOK || out.RecordPending != 1 {
		t.Errorf("the step whose record is held: %+v (plan counts %d held); want ok with recordPending, counted: %s", out.Steps[0], out.RecordPending, res.Output)
	}
	if !res.RecordPending {
		t.Errorf("the plan with a held step: %+v; want recordPending", res)
	}
	if out.Steps[1].RecordPending {
		t.Errorf("the read-only step, which has no record to hold: %+v", out.Steps[1])
	}
	// Repeated while held, the step answers from memory, still pending.
	if _, again := plan(); !again.Steps[0].RecordPending || env.writes() != 1 {
		t.Errorf("repeated while held: %+v (%d writes)", again.Steps[0], env.writes())
	}

	fs.Down.Store(false)
	if n := env.exec.FlushRecords(t.Context()); n != 0 {
		t.Fatalf("%d results still held once the store is back", n)
	}
	if res, again := plan(); res.RecordPending || again.Steps[0].RecordPending || again.RecordPending != 0 || again.Steps[0].Status != registry.StatusOK || env.writes() != 1 {
		t.Errorf("repeated once recorded: %+v, %d held (%d writes)", again.Steps[0], again.RecordPending, env.writes())
	}
}
