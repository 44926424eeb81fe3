package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestBatchAndPlanWiring(t *testing.T) {
	in := start(t, "TOOLSVC_PLAN_TOOL=true", "TOOLSVC_BATCH_PARALLELISM=2")
	resp, err := http.Get(in.base + "/tools?q=plan&format=openai")
	if err != nil {
		t.Fatal(err)
	}
	var cat struct {
		Tools []struct{ Function struct{ Name string } }
	}
	_ = json.NewDecoder(resp.Body).Decode(&cat)
	resp.Body.Close()
	if len(cat.Tools) == 0 || cat.Tools[0].Function.Name != "plan__execute" {
		t.Fatalf("plan tool not served first for q=plan: %+v", cat.Tools)
	}

	status, res := in.post("/calls", `{"toolName":"plan__execute","arguments":{"steps":[
		{"tool":"text__transform","arguments":{"operation":"upper","text":"a"}},
		{"tool":"fs__write","arguments":{"path":"p.txt","content":"x"}},
		{"tool":"fs__read","arguments":{"path":"p.txt"}}]}}`)
	output, _ := res["output"].(map[string]any)
	steps, _ := output["steps"].([]any)
	if status != 200 || res["status"] != "ok" || len(steps) != 3 {
		t.Fatalf("plan: %d %v", status, res)
	}
	if output["ok"] != float64(3) || output["failed"] != float64(0) {
		t.Errorf("plan counts: %v", output)
	}
	for i, s := range steps {
		if step := s.(map[string]any); step["status"] != "ok" || step["step"] != float64(i+1) {
			t.Errorf("step %d: %v", i+1, step)
		}
	}
	// The write is a barrier, so the read after it sees the file.
	read := steps[2].(map[string]any)["output"].(map[string]any)
	if read["content"] != "x" {
		t.Errorf("read after write: %v", read)
	}

	status, res = in.post("/calls/batch?format=anthropic", `{"calls":[
		{"type":"tool_use","id":"toolu_1","name":"text__transform","input":{"operation":"lower","text":"B"}},
		{"type":"tool_use","id":"toolu_2","name":"fs__read","input":{"path":"missing.txt"}}]}`)
	results, _ := res["results"].([]any)
	if status != 200 || len(results) != 2 {
		t.Fatalf("batch: %d %v", status, res)
	}
	second := results[1].(map[string]any)
	if second["tool_use_id"] != "toolu_2" || second["is_error"] != true {
		t.Errorf("batch result: %v", second)
	}
}

func TestBatchParallelismIsValidated(t *testing.T) {
	ws := "TOOLSVC_WORKSPACE=" + t.TempDir()
	for _, v := range []string{"0", "51", "many"} {
		err := run(context.Background(), []string{"toolsvc", "validate"}, []string{ws, "TOOLSVC_BATCH_PARALLELISM=" + v}, io.Discard, io.Discard)
		if err == nil || v != "many" && !strings.Contains(err.Error(), "TOOLSVC_BATCH_PARALLELISM") {
			t.Errorf("TOOLSVC_BATCH_PARALLELISM=%s: %v", v, err)
		}
	}
	var out strings.Builder
	if err := run(context.Background(), []string{"toolsvc", "validate"}, []string{ws, "TOOLSVC_PLAN_TOOL=true"}, &out, io.Discard); err != nil || out.String() != "configuration OK: 15 tools\n" {
		t.Errorf("validate with the plan tool: %v %q", err, out.String())
	}
}

// TestPlanToolSurvivesReload: a reload builds a new plan__execute, which
// must be bound to the executor like the first one.
func TestPlanToolSurvivesReload(t *testing.T) {
	c := newConfigDir(t)
	c.write("policy.yaml", "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: p}\nspec: {}\n", 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_WATCH=true", "TOOLSVC_PLAN_TOOL=true")
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })
	c.write("policy.yaml", "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: p2}\nspec: {}\n", 0o644)
	in.waitFor("the reload", func() bool {
		return strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="ok"} 1`)
	})
	status, res := in.post("/calls", `{"toolName":"plan__execute","arguments":{"steps":[{"tool":"text__transform","arguments":{"operation":"upper","text":"ok"}}]}}`)
	if status != 200 || res["status"] != "ok" || !strings.Contains(fmt.Sprint(res["output"]), "OK") {
		t.Errorf("plan__execute after a reload: %d %v", status, res)
	}
}
