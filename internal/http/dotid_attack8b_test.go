package http

import (
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestDotSegmentIDsAreRefused: a toolCallId of "." or ".." names the call
// in URLs that cannot reach it (GET /calls/.. is GET / to a browser or
// curl, which resolve dot segments away), so it is refused, with a 400
// that says why, in every shape of call and in a batch's slot; ids that
// merely hold dots are fine.
func TestDotSegmentIDsAreRefused(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = openStore(t) })
	args := `"arguments":{"operation":"upper","text":"a"}`
	for _, id := range []string{".", ".."} {
		for _, body := range []string{
			`{"toolCallId":"` + id + `","toolName":"text__transform",` + args + `}`,
			`{"id":"` + id + `","type":"function","function":{"name":"text__transform","arguments":"{\"operation\":\"upper\",\"text\":\"a\"}"}}`,
			`{"type":"tool_use","id":"` + id + `","name":"text__transform","input":{"operation":"upper","text":"a"}}`,
			`{"functionCall":{"id":"` + id + `","name":"text__transform","args":{"operation":"upper","text":"a"}}}`,
		} {
			r := e.do("POST", "/calls", []byte(body), jsonCT, false)
			var p Problem
			r.json(t, &p)
			if r.status != 400 || p.Code != "invalid_call" || !strings.Contains(p.Detail, `toolCallId is "`+id+`", which no URL can carry`) {
				t.Errorf("%s: %d %s; want 400 invalid_call saying the id cannot be in a URL", body, r.status, r.body)
			}
		}
		r := e.do("POST", "/calls/batch", []byte(`{"calls":[{"toolCallId":"`+id+`","toolName":"text__transform",`+args+`}]}`), jsonCT, true)
		var out struct{ Results []registry.Result }
		r.json(t, &out)
		if r.status != 200 || len(out.Results) != 1 || out.Results[0].ToolCallID == id || out.Results[0].Error == nil ||
			!strings.Contains(out.Results[0].Error.Message, "which no URL can carry") {
			t.Errorf("batch with id %q: %d %s; want its slot refused, under a fresh id", id, r.status, r.body)
		}
	}
	for _, id := range []string{"...", ".a", "a.", "a..b"} {
		r, res := e.call("/calls", `{"toolCallId":"`+id+`","toolName":"text__transform",`+args+`}`)
		if r.status != 200 || res.ToolCallID != id {
			t.Errorf("id %q: %d %s; want it taken", id, r.status, r.body)
		}
	}
}
