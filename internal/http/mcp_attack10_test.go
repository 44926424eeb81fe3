package http

import (
	"strings"
	"testing"
)

// A JSON-RPC message to /mcp that gives a member twice, in its envelope
// or in its params, is refused: the SDK took the last, so a "name" given
// twice showed a proxy or a log one tool and ran the other, "method"
// twice ran tools/call under a tools/list, and "id" twice was answered
// with the second id. A name twice within a call's arguments stays the
// executor's E_INVALID_ARGUMENTS, as for POST /calls.
func TestMCPMemberTwiceIsRefused(t *testing.T) {
	e, runs := countEnv(t)
	const up = `{"operation":"upper","text":"a"}`
	for _, c := range []struct {
		name, body, version string
		code                int
		id, member          string
	}{
		{"a tool's name twice", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"text__transform","name":"test__count","arguments":{}}}`, "2025-11-25",
			-32602, "1", `"params.name"`},
		{"a tool's name twice, one escaped", `{"jsonrpc":"2.0","id":"q","method":"tools/call","params":{"name":"text__transform","n\u0061me":"test__count","arguments":{}}}`, "2025-11-25",
			-32602, `"q"`, `"params.name"`},
		{"arguments twice", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test__count","arguments":{},"arguments":{"a":1}}}`, "2025-11-25",
			-32602, "2", `"params.arguments"`},
		{"a member of _meta twice", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test__count","arguments":{},"_meta":{"progressToken":1,"progressToken":2}}}`, "2025-11-25",
			-32602, "3", `"params._meta.progressToken"`},
		{"method twice", `{"jsonrpc":"2.0","id":4,"method":"tools/list","method":"tools/call","params":{"name":"test__count","arguments":{}}}`, "2025-11-25",
			-32600, "null", `"method"`},
		{"id twice", `{"jsonrpc":"2.0","id":7,"id":8,"method":"ping"}`, "2025-11-25",
			-32600, "null", `"id"`},
		{"params twice", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"text__transform","arguments":` + up + `},"params":{"name":"test__count","arguments":{}}}`, "2025-11-25",
			-32600, "null", `"params"`},
		{"a name twice in a batch's message", `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"text__transform","name":"test__count","arguments":{}}}]`, "2025-03-26",
			-32602, "null", `message 2 of the batch: the message has the member "params.name" twice`},
		{"an id twice in a batch's message", `[{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}]`, "2025-03-26",
			-32600, "null", `message 1 of the batch: the message has the member "id" twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/mcp", []byte(c.body), mcpPost(c.version), false)
			id, code, msg := rpcErrorOf(t, r)
			if r.status != 400 || code != c.code || id != c.id || !strings.Contains(msg, c.member) || !strings.Contains(msg, "JSON readers differ") {
				t.Errorf("got %d id %s code %d %q; want 400 id %s code %d naming %s", r.status, id, code, msg, c.id, c.code, c.member)
			}
		})
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("test__count ran %d times", n)
	}
	for _, c := range []struct{ name, body, want string }{
		// Members that differ in case are two members, as the SDK reads them.
		{"id and Id", `{"jsonrpc":"2.0","id":1,"Id":2,"method":"tools/call","params":{"name":"test__count","Name":"x","arguments":{}}}`, `"runs":1`},
		// The same name in two objects is no name twice.
		{"name in params and in _meta", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"test__count","arguments":{"name":1},"_meta":{"name":"x"}}}`, `"runs":2`},
		// Within the arguments, it is the executor's to refuse.
		{"a name twice in the arguments", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"test__count","arguments":{"a":1,"a":2}}}`, `E_INVALID_ARGUMENTS`},
	} {
		r := e.do("POST", "/mcp", []byte(c.body), mcpPost("2025-11-25"), false)
		if r.status != 200 || !strings.Contains(string(r.body), c.want) {
			t.Errorf("%s: %d %s; want %s", c.name, r.status, r.body, c.want)
		}
	}
}
