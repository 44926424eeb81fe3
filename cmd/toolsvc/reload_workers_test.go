package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestReloadKeepsTheWorkerPool: the confined tools' workers are the
// process's, not a configuration's. Before, each reload made a pool of
// its own, so with TOOLSVC_TOOL_WORKERS=1 a reload let a second worker
// run beside a busy one (the memory ceiling is counted per worker), and
// closed the old pool under the calls queued on it, which failed with
// E_TOOL "worker pool closed" without running.
func TestReloadKeepsTheWorkerPool(t *testing.T) {
	cfg, _ := testEnviron(t, newConfigDir(t).dir, "TOOLSVC_TOOL_WORKERS=1")
	log := slog.New(slog.NewJSONHandler(&logtest.Buffer{}, nil))
	mgr := newMCPManager(cfg, log, make(chan struct{}, 1))
	t.Cleanup(mgr.Close)
	workers, err := newWorkers(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(workers.Close)
	a, err := build(cfg, log, mgr, workers)
	if err != nil {
		t.Fatal(err)
	}
	exec := registry.NewExecutor(registry.Options{Registry: a.registry, Policy: a.policy})
	rl := newReloader(cfg, log, exec, nil, mgr, prometheus.NewRegistry(), a)

	type answer struct {
		*registry.Result
		at time.Time
	}
	query := func(program string, timeoutMs int64) <-chan answer {
		done := make(chan answer, 1)
		go func() {
			args, _ := json.Marshal(map[string]any{"program": program, "input": 41})
			res, err := exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "json__query", Arguments: args, TimeoutMs: timeoutMs})
			if err != nil {
				res = &registry.Result{Status: registry.StatusError, Error: &registry.Error{Code: registry.CodeInternal, Message: err.Error()}}
			}
			done <- answer{res, time.Now()}
		}()
		return done
	}
	// One call keeps the only worker busy until its timeout; one waits for it.
	busy := query("reduce range(100000000000) as $i (0; .+1)", 3000)
	time.Sleep(500 * time.Millisecond)
	queued := query(". + 1", 0)
	time.Sleep(300 * time.Millisecond)
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if rl.cur.workers != workers {
		t.Error("the reloaded configuration has a worker pool of its own")
	}
	// A call after the reload does not get a worker of its own either: it
	// waits behind the two before it.
	start := time.Now()
	after := query(". * 2", 0)
	if res := <-busy; res.Code() != registry.CodeTimeout {
		t.Errorf("the runaway call: %+v", res.Error)
	}
	if res := <-queued; res.Status != registry.StatusOK {
		t.Errorf("the call queued before the reload: %+v", res.Error)
	}
	res := <-after
	if res.Status != registry.StatusOK {
		t.Errorf("the call made after the reload: %+v", res.Error)
	}
	if waited := res.at.Sub(start); waited < time.Second {
		t.Errorf("the call made after the reload answered in %s, beside the busy worker: a second worker ran", waited)
	}
}
