package http

import (
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestBatchHeldCallsNameThePendingCallByItsRequestPosition: a batch whose
// calls 2, 3 and 5 reuse ids and whose call 6 cannot be read, so that
// none of them reaches the executor, then whose call 9 waits for
// approval: the calls after it are told that call 9 waits, not the
// pending call's place among the calls the executor was given (6).
func TestBatchHeldCallsNameThePendingCallByItsRequestPosition(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = openStore(t) })
	read := func(id string) string {
		return `{"toolName":"text__transform","toolCallId":"` + id + `","arguments":{"operation":"upper","text":"a"}}`
	}
	priv := func(id string) string {
		return `{"toolName":"test__priv","toolCallId":"` + id + `","arguments":{"n":1}}`
	}
	body := `{"calls":[` + strings.Join([]string{
		read("d1"), read("d1"), read("d1"), read("d2"), read("d2"),
		`{"toolName":1}`, read("r7"), read("r8"), priv("ap"), read("after1"), priv("after2"),
	}, ",") + `]}`
	r := e.do("POST", "/calls/batch", []byte(body), jsonCT, false)
	if r.status != 200 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	var out struct{ Results []registry.Result }
	r.json(t, &out)
	if len(out.Results) != 11 || out.Results[8].Status != registry.StatusPendingApproval {
		t.Fatalf("results: %s", r.body)
	}
	for i, want := range map[int]string{1: "used by call 1 ", 2: "used by call 1 ", 4: "used by call 4 ", 5: "call 6 of the batch cannot be read"} {
		if res := out.Results[i]; res.Code() != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, want) {
			t.Errorf("call %d: %+v, want %q", i+1, res.Error, want)
		}
	}
	for i := 9; i < 11; i++ {
		res := out.Results[i]
		if res.Code() != registry.CodeCanceled ||
			!strings.HasPrefix(res.Error.Message, `not started: call 9 of the batch (toolCallId "ap") waits for approval`) ||
			!strings.HasPrefix(res.Error.Suggestion, "Send this call again once call 9 has finished") {
			t.Errorf("call %d after the pending one: %+v", i+1, res.Error)
		}
	}
}
