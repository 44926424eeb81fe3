package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestPlanStepsTakeRateLimitTokens: a plan's steps are held to the
// caller's rate limits as a batch's calls are, one token per step from the
// caller's bucket and from each tool rule's. Plans used to take one token
// for themselves and run up to 50 steps past every limit.
func TestPlanStepsTakeRateLimitTokens(t *testing.T) {
	c := newConfigDir(t)
	doc := `apiVersion: toolsvc/v1
kind: Caller
metadata: {name: agent}
spec:
  tokenSha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 # "test"
  rateLimit:
    perSecond: 0.001
    burst: 5
    tools: [{tools: ["text__*"], perSecond: 0.001, burst: 2}]
`
	c.write("callers.yaml", doc, 0o600)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_PLAN_TOOL=true", "TOOLSVC_WATCH=true")
	plan := func(tool string, n int) (int, result) {
		steps := make([]string, n)
		for i := range steps {
			args := `{"operation":"upper","text":"x"}`
			if tool == "fs__stat" {
				args = `{"path":"."}`
			}
			steps[i] = fmt.Sprintf(`{"tool":%q,"arguments":%s}`, tool, args)
		}
		return in.as("test", "POST", "/calls", `{"toolName":"plan__execute","arguments":{"steps":[`+strings.Join(steps, ",")+`]}}`)
	}
	// The caller's bucket: 5; text__*'s: 2.
	if code, r := in.as("test", "POST", "/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`); code != 200 || r.Status != "ok" {
		t.Fatalf("direct call: %d %+v", code, r)
	}
	// caller 4, text 1: two text steps are one more than text__* has left.
	code, r := plan("text__transform", 2)
	if code != 200 || r.code() != "E_TOOL" || !strings.Contains(r.Error.Message, "no step ran: the steps are over this caller's rate limit; retry in") {
		t.Fatalf("two text steps with one text token left: %d %s %s", code, r.code(), r.Output)
	}
	// A reload builds the plan tool again: its steps stay limited.
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })
	c.write("callers.yaml", doc+"# reloaded\n", 0o600)
	in.waitFor("the reload", func() bool {
		return strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="ok"} 1`)
	})
	// caller 3: three text steps can never pass text__*'s burst of 2.
	code, r = plan("text__transform", 3)
	if code != 200 || r.code() != "E_INVALID_ARGUMENTS" || !strings.Contains(r.Error.Message, "3 steps count against the tool rate limit, whose burst is 2; at most 2 such steps") {
		t.Fatalf("three text steps against a burst of 2: %d %s %+v", code, r.code(), r.Error)
	}
	// caller 2: the plan's own call takes one, its two steps one more than is left.
	code, r = plan("fs__stat", 2)
	if code != 200 || r.code() != "E_TOOL" || !strings.Contains(r.Error.Message, "over this caller's rate limit") {
		t.Fatalf("two steps with one caller token left after the plan's own: %d %s %s", code, r.code(), r.Output)
	}
	// caller 1: five steps and the plan's own call are more than a burst of 5.
	code, r = plan("fs__stat", 5)
	if code != 200 || r.code() != "E_INVALID_ARGUMENTS" || !strings.Contains(r.Error.Message, "whose burst is 5, and this call took 1 of it; at most 4 such steps") {
		t.Fatalf("five steps against a burst of 5 with the plan's own call: %d %s %+v", code, r.code(), r.Error)
	}
	// caller 0: the plan itself is refused at the door.
	if code, r := plan("fs__stat", 1); code != 429 {
		t.Fatalf("a plan with no caller token left: %d %+v", code, r)
	}
}
