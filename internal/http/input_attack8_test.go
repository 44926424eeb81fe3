package http

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestBatchContextIsHeldToACallsRules: the calls of a batch take its
// context as their own, so its identifiers are held to what a call's own
// context is: a NUL would fail the call store as if it were down
// (PostgreSQL refuses it), and an identifier past 256 characters would
// be recorded and logged with every call.
func TestBatchContextIsHeldToACallsRules(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = openStore(t) })
	call := `"calls":[{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}]`
	for _, c := range []struct{ context, member, why string }{
		{`{"instanceKey":"k\u0000"}`, "context.instanceKey", "control character"},
		{`{"agentName":"a\nb"}`, "context.agentName", "control character"},
		{`{"instanceKey":"` + strings.Repeat("k", 5000) + `"}`, "context.instanceKey", "longer than 256"},
		{`{"turnId":"` + strings.Repeat("t", 3000) + `"}`, "context.turnId", "longer than 256"},
		{`{"turnId":"\ud800"}`, "context.turnId", "not valid UTF-8"},
	} {
		// (The contract says so too: maxLength 256.)
		r := e.do("POST", "/calls/batch", []byte(`{"context":`+c.context+`,`+call+`}`), jsonCT, false)
		var p Problem
		r.json(t, &p)
		if r.status != 400 || p.Code != "invalid_batch" || !strings.Contains(p.Detail, "the batch's "+c.member) || !strings.Contains(p.Detail, c.why) {
			t.Errorf("batch context %.40s: %d %s; want 400 invalid_batch naming the batch's %s (%s)", c.context, r.status, r.body, c.member, c.why)
		}
	}
	// A good one still reaches the calls that give none.
	r := e.do("POST", "/calls/batch", []byte(`{"context":{"instanceKey":"k1","turnId":"`+strings.Repeat("t", 256)+`"},`+call+`}`), jsonCT, true)
	if r.status != 200 {
		t.Errorf("a good batch context: %d %s", r.status, r.body)
	}
}

// TestForgedApprovalCursor: anyone can write an ?after= cursor; one whose
// id is no id (a NUL, invalid UTF-8, a control character, past 256
// characters) is refused as a bad cursor, not taken to the store, where
// PostgreSQL fails on it as if it were down.
func TestForgedApprovalCursor(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = openStore(t) })
	cursor := func(id string) string { return base64.RawURLEncoding.EncodeToString([]byte("1." + id)) }
	for _, id := range []string{"\x00", "a\x00b", "\xff\xfe", "a\nb", strings.Repeat("x", 257)} {
		r := e.do("GET", "/approvals?after="+cursor(id), nil, nil, true)
		var p Problem
		r.json(t, &p)
		if r.status != 400 || p.Code != "invalid_parameter" || !strings.Contains(p.Detail, "after must be") {
			t.Errorf("cursor with id %.20q: %d %s; want 400 invalid_parameter", id, r.status, r.body)
		}
	}
	for _, id := range []string{"apr_1", strings.Repeat("é", 256)} {
		if r := e.do("GET", "/approvals?after="+cursor(id), nil, nil, true); r.status != 200 {
			t.Errorf("cursor with id %.20q: %d %s; want 200", id, r.status, r.body)
		}
	}
}

// TestMembersGivenTwiceOrInAnotherCase: encoding/json reads a member given
// twice as its last value and a member name in any case, without a word;
// other readers (a gateway, a proxy that logged the call, a person reading
// it) may take the first, or no member at all. So a body whose members
// toolsvc reads are given twice, or in another case than the contract's,
// is refused, naming the member; members toolsvc does not read, and the
// arguments (the executor's to check), are left alone.
func TestMembersGivenTwiceOrInAnotherCase(t *testing.T) {
	e := newEnv(t, func(d *Deps, o *registry.Options) { o.Store = openStore(t) })
	args := `"arguments":{"operation":"upper","text":"x"}`
	for _, c := range []struct{ body, code, detail string }{
		{`{"toolName":"test__priv","toolName":"text__transform",` + args + `}`, "invalid_call", `the call has the member "toolName" twice`},
		{`{"TOOLNAME":"text__transform",` + args + `}`, "unknown_member", `the call has a member "TOOLNAME"; member names are case-sensitive, so send it as "toolName"`},
		{`{"toolName":"text__transform","Arguments":{}}`, "unknown_member", `send it as "arguments"`},
		{`{"toolName":"text__transform",` + args + `,"context":{"turnId":"a","TurnId":"b"}}`, "unknown_member", `"context.TurnId"; member names are case-sensitive, so send it as "context.turnId"`},
		{`{"toolName":"text__transform",` + args + `,"context":{"turnId":"a","turnId":"b"}}`, "invalid_call", `the call has the member "context.turnId" twice`},
		{`{"toolName":"test__priv","arguments":{},"approval":{"granted":false,"Granted":true}}`, "unknown_member", `"approval.Granted"`},
		{`{"toolName":"text__transform",` + args + `,"timeoutMſ":1}`, "unknown_member", `send it as "timeoutMs"`}, // ſ folds to s
		// The shapes of the model providers.
		{`{"type":"function","id":"c1","function":{"name":"test__priv","name":"text__transform","arguments":"{}"}}`, "invalid_call", `"function.name" twice`},
		{`{"type":"tool_use","id":"c1","Name":"text__transform","input":{}}`, "unknown_member", `"Name"; member names are case-sensitive, so send it as "name"`},
		{`{"type":"tool_use","type":"function_call","id":"c1","name":"text__transform","input":{}}`, "invalid_call", `"type" twice`},
		{`{"functionCall":{"name":"text__transform","args":{},"ARGS":{}}}`, "unknown_member", `"functionCall.ARGS"`},
	} {
		r := e.do("POST", "/calls", []byte(c.body), jsonCT, false)
		var p Problem
		r.json(t, &p)
		if r.status != 400 || p.Code != c.code || !strings.Contains(p.Detail, c.detail) {
			t.Errorf("%s: %d %s; want 400 %s saying %s", c.body, r.status, r.body, c.code, c.detail)
		}
	}
	// In a batch: the envelope is refused; a call, in its slot.
	r := e.do("POST", "/calls/batch", []byte(`{"calls":[],"CALLS":[{"toolName":"text__transform",`+args+`}]}`), jsonCT, false)
	var p Problem
	r.json(t, &p)
	if r.status != 400 || p.Code != "invalid_batch" || !strings.Contains(p.Detail, `the batch has a member "CALLS"`) {
		t.Errorf("a batch's CALLS: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/calls/batch", []byte(`{"calls":[],"calls":[{"toolName":"test__priv"}]}`), jsonCT, false)
	r.json(t, &p)
	if r.status != 400 || p.Code != "invalid_batch" || !strings.Contains(p.Detail, `the batch has the member "calls" twice`) {
		t.Errorf("a batch's calls twice: %d %s", r.status, r.body)
	}
	r = e.do("POST", "/calls/batch", []byte(`{"context":{"instanceKey":"a","instanceKey":"b"},"calls":[]}`), jsonCT, false)
	r.json(t, &p)
	if r.status != 400 || p.Code != "invalid_batch" || !strings.Contains(p.Detail, `"context.instanceKey" twice`) {
		t.Errorf("a batch context's instanceKey twice: %d %s", r.status, r.body)
	}
	var out struct{ Results []registry.Result }
	r = e.do("POST", "/calls/batch", []byte(`{"calls":[{"toolCallId":"one","toolName":"test__priv","toolName":"text__transform",`+args+`},{"toolName":"text__transform",`+args+`}]}`), jsonCT, false)
	r.json(t, &out)
	if r.status != 200 || len(out.Results) != 2 || out.Results[0].Error == nil || !strings.Contains(out.Results[0].Error.Message, `"toolName" twice`) ||
		out.Results[0].ToolCallID == "one" || out.Results[1].Status != registry.StatusOK {
		t.Errorf("a batch call's toolName twice: %d %s", r.status, r.body)
	}

	// What is left alone: members of a provider's own, in any case, and
	// a member twice in the arguments, which the executor answers.
	for _, body := range []string{
		`{"type":"function_call","call_id":"c2","name":"text__transform","arguments":"{\"operation\":\"upper\",\"text\":\"x\"}","status":"completed","Status":"x"}`,
		`{"functionCall":{"name":"text__transform","args":{"operation":"upper","text":"x"}},"thoughtSignature":"s"}`,
	} {
		if r, res := e.call("/calls", body); r.status != 200 || res.Status != registry.StatusOK {
			t.Errorf("%s: %d %s", body, r.status, r.body)
		}
	}
	r, res := e.call("/calls", `{"toolName":"text__transform","arguments":{"operation":"upper","text":"x","text":"y"}}`)
	if r.status != 200 || res.Error == nil || res.Error.Code != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, "RFC 7493") {
		t.Errorf("a member twice in the arguments: %d %s; want the executor's E_INVALID_ARGUMENTS", r.status, r.body)
	}

	// An approval decided by a body with two decisions would be approved
	// by encoding/json (the last) and denied by a reader taking the first.
	id := e.askApproval("twice_1")
	for _, body := range []string{
		`{"decision":"deny","decision":"approve"}`,
		`{"Decision":"approve"}`,
		`{"decision":"approve","REASON":"x"}`,
	} {
		r := e.do("POST", "/approvals/"+id, []byte(body), jsonCT, false)
		var p Problem
		r.json(t, &p)
		if r.status != 400 || p.Code != "invalid_decision" || !strings.Contains(p.Detail, "the decision has") {
			t.Errorf("decision %s: %d %s; want 400 invalid_decision", body, r.status, r.body)
		}
	}
	r = e.do("GET", "/approvals/"+id, nil, nil, true)
	var a registry.Approval
	r.json(t, &a)
	if a.Status != registry.ApprovalPending {
		t.Errorf("after refused decisions the request is %s, want pending", a.Status)
	}
}

// TestBadIDsOfUnreadableCallsAreNotEchoed: a call of a batch that cannot
// be read is answered in its slot, and audited, with a fresh id when its
// own fails the id check, whatever else is wrong with it: neither the
// answer nor the log carries 200,000 characters, a NUL or a newline of
// the client's.
func TestBadIDsOfUnreadableCallsAreNotEchoed(t *testing.T) {
	e, logs := infoEnv(t)
	long := strings.Repeat("a", 200000)
	body := fmt.Sprintf(`{"calls":[{"toolCallId":%q},{"toolCallId":%q,"toolName":5},{"toolCallId":"x\ny\u0000"},{"toolCallId":"\ud800z","toolName":"text__transform","args":{}},{"toolCallId":"ok_1","toolName":5}]}`, long, long)
	r := e.do("POST", "/calls/batch", []byte(body), jsonCT, false)
	var out struct{ Results []registry.Result }
	r.json(t, &out)
	if r.status != 200 || len(out.Results) != 5 {
		t.Fatalf("batch: %d %.300s", r.status, r.body)
	}
	for i, res := range out.Results[:4] {
		if !strings.HasPrefix(res.ToolCallID, "call_") || res.Status != registry.StatusError {
			t.Errorf("call %d: answered with id %.40q; want a fresh one", i+1, res.ToolCallID)
		}
	}
	if out.Results[4].ToolCallID != "ok_1" {
		t.Errorf("a good id of an unreadable call: answered with %q, want it kept", out.Results[4].ToolCallID)
	}
	if len(r.body) > 10000 {
		t.Errorf("the answer is %d bytes", len(r.body))
	}
	if n := logs.Len(); n > 20000 || strings.Contains(logs.String(), "aaaaaaaaaa") || strings.Contains(logs.String(), `x\ny`) {
		t.Errorf("the log holds a bad id (%d bytes):\n%.2000s", n, logs.String())
	}
}
