package main

import (
	"strings"
	"testing"
)

// A plan's steps run on the plan's own slot when the service has no other
// free, so TOOLSVC_PLAN_TOOL=true works even with TOOLSVC_MAX_CONCURRENCY=1,
// where a plan used to hold the only slot while each step waited for
// another and failed as not run.
func TestPlanRunsWithOneSlot(t *testing.T) {
	p := startBinary(t, "TOOLSVC_PLAN_TOOL=true", "TOOLSVC_MAX_CONCURRENCY=1")
	a := p.send("POST", "/calls", `{"toolName":"plan__execute","arguments":{"steps":[
		{"tool":"fs__write","arguments":{"path":"a.txt","content":"one"}},
		{"tool":"fs__list","arguments":{"path":"."}},
		{"tool":"text__transform","arguments":{"operation":"upper","text":"two"}}]}}`)
	if a.status != 200 || a.res.Status != "ok" || !strings.HasPrefix(string(a.res.Output), `{"ok":3,"failed":0,`) {
		t.Fatalf("plan with one slot: %d %s", a.status, a.body)
	}
	if !strings.Contains(string(a.res.Output), `"a.txt"`) || !strings.Contains(string(a.res.Output), `"TWO"`) {
		t.Errorf("steps' outputs: %s", a.res.Output)
	}
}
