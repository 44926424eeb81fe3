package http

import (
	"slices"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestBatchCallsAnsweredBeforeTheExecutorAreAudited: a call of a batch
// that cannot be read, or whose id another call of the batch has, gets an
// error result without reaching the executor; it still gets its audit
// line at info level, with the same attributes as the executor's, the id
// its result carries and the request id.
func TestBatchCallsAnsweredBeforeTheExecutorAreAudited(t *testing.T) {
	e, logs := infoEnv(t)
	body := `{"calls":[
		{"toolName":"text__transform","toolCallId":"good","arguments":{"operation":"upper","text":"a"}},
		{"toolName":"text__transform","toolCallId":"bad\nid","arguments":{}},
		{"toolName":"text__transform","toolCallId":"good","arguments":{"operation":"upper","text":"b"}},
		{"toolName":"no such tool\u0000","args":{}}
	]}`
	h := map[string]string{"Content-Type": "application/json", "X-Request-Id": "req-batch-audit"}
	r := e.do("POST", "/calls/batch", []byte(body), h, false)
	if r.status != 200 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	var out struct{ Results []registry.Result }
	r.json(t, &out)
	if len(out.Results) != 4 || out.Results[0].Status != registry.StatusOK {
		t.Fatalf("results: %s", r.body)
	}
	// The audit lines by toolCallId and status (the third call has the
	// first's id).
	audit := map[[2]string]map[string]any{}
	for _, m := range logLines(t, logs) {
		if m["msg"] == "tool call" {
			audit[[2]string{m["toolCallId"].(string), m["status"].(string)}] = m
		}
	}
	keys := func(m map[string]any) []string {
		var ks []string
		for k := range m {
			if k != "time" {
				ks = append(ks, k)
			}
		}
		slices.Sort(ks)
		return ks
	}
	ran := audit[[2]string{"good", "ok"}]
	if ran == nil {
		t.Fatalf("no audit line of the call that ran:\n%s", logs)
	}
	for i, res := range out.Results[1:] {
		line := audit[[2]string{res.ToolCallID, "error"}]
		if line == nil {
			t.Errorf("call %d (%s): no audit line:\n%s", i+2, res.ToolCallID, logs)
			continue
		}
		if line["level"] != "INFO" || line["code"] != string(registry.CodeInvalidArguments) || line["requestId"] != "req-batch-audit" {
			t.Errorf("call %d: audit line %v", i+2, line)
		}
		if !slices.Equal(keys(line), keys(ran)) {
			t.Errorf("call %d: audit line has %v, the executor's has %v", i+2, keys(line), keys(ran))
		}
	}
	if got := audit[[2]string{out.Results[3].ToolCallID, "error"}]; got != nil && got["tool"] != registry.UnknownTool {
		t.Errorf("an unregistered name is logged as %q, not %q", got["tool"], registry.UnknownTool)
	}
	if got := audit[[2]string{out.Results[1].ToolCallID, "error"}]; got != nil && (got["tool"] != "text__transform" || got["tier"] != string(registry.ReadOnly)) {
		t.Errorf("a registered tool is logged as %q %q", got["tool"], got["tier"])
	}
}
