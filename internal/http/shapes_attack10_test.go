package http

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// countEnv is newEnv with a tool test__count that counts its runs.
func countEnv(t *testing.T) (*env, *atomic.Int32) {
	t.Helper()
	var runs atomic.Int32
	count := &registry.Tool{
		Definition: registry.Definition{Name: "test__count", Description: "counts", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return map[string]int32{"runs": runs.Add(1)}, nil
		}),
	}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384}, append(o.Registry.List(nil, registry.Filter{}), count)...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
	return e, &runs
}

// A body that carries a call in two shapes is refused: toolsvc read the
// provider's shape and dropped the native members beside it (or the
// second provider's), so {"toolName":"fs__read",…,"function":{"name":
// "fs__delete"}} showed a reader one tool and ran another, and a
// toolCallId beside an OpenAI id answered with the id the model did not
// send.
func TestCallInTwoShapesIsRefused(t *testing.T) {
	e, runs := countEnv(t)
	const up = `{"operation":"upper","text":"a"}`
	for _, c := range []struct {
		name, body string
		members    []string // named in the detail
	}{
		{"toolName beside an OpenAI tool call", `{"toolName":"text__transform","arguments":` + up + `,"type":"function","function":{"name":"test__count","arguments":"{}"}}`,
			[]string{`"function.name"`, `"toolName"`}},
		{"arguments beside an OpenAI tool call", `{"arguments":{},"type":"function","function":{"name":"test__count","arguments":"{}"}}`,
			[]string{`"function.arguments"`, `"arguments"`}},
		{"toolCallId beside an OpenAI id", `{"toolCallId":"A1","id":"call_B","type":"function","function":{"name":"test__count","arguments":"{}"}}`,
			[]string{`"id"`, `"toolCallId"`}},
		{"toolCallId beside an empty OpenAI id", `{"toolCallId":"A1","id":"","type":"function","function":{"name":"test__count","arguments":"{}"}}`,
			[]string{`"id"`, `"toolCallId"`}},
		{"native beside a Gemini part", `{"toolName":"text__transform","arguments":` + up + `,"functionCall":{"name":"test__count","args":{}}}`,
			[]string{`"functionCall.name"`, `"toolName"`}},
		{"toolCallId beside a Gemini id", `{"toolCallId":"A1","functionCall":{"id":"g1","name":"test__count","args":{}}}`,
			[]string{`"functionCall.id"`, `"toolCallId"`}},
		{"an id beside a Gemini part", `{"id":"A1","functionCall":{"name":"test__count","args":{}}}`,
			[]string{`"functionCall.id"`, `"id"`}},
		{"tool_use beside function", `{"type":"tool_use","id":"t1","name":"test__count","input":{},"function":{"name":"text__transform","arguments":"{}"}}`,
			[]string{`"name"`, `"function"`}},
		{"tool_use beside arguments", `{"type":"tool_use","id":"t1","name":"test__count","input":{},"arguments":{}}`,
			[]string{`"input"`, `"arguments"`}},
		{"function_call beside toolName", `{"type":"function_call","call_id":"c1","name":"test__count","arguments":"{}","toolName":"text__transform"}`,
			[]string{`"name"`, `"toolName"`}},
		{"function_call beside input", `{"type":"function_call","call_id":"c1","name":"test__count","arguments":"{}","input":{}}`,
			[]string{`"arguments"`, `"input"`}},
		{"function_call beside toolCallId", `{"type":"function_call","call_id":"c1","name":"test__count","arguments":"{}","toolCallId":"c2"}`,
			[]string{`"call_id"`, `"toolCallId"`}},
		{"OpenAI beside a Gemini part", `{"type":"function","function":{"name":"test__count","arguments":"{}"},"functionCall":{"name":"text__transform","args":{}}}`,
			[]string{`"function.name"`, `"functionCall"`}},
		{"OpenAI beside an Anthropic name", `{"type":"function","function":{"name":"test__count","arguments":"{}"},"name":"text__transform"}`,
			[]string{`"function.name"`, `"name"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do("POST", "/calls?format=openai", []byte(c.body), jsonCT, false)
			var p Problem
			r.json(t, &p)
			if r.status != 400 || p.Code != "invalid_call" || !strings.Contains(p.Detail, "JSON readers differ") {
				t.Fatalf("got %d %s; want 400 invalid_call", r.status, r.body)
			}
			for _, m := range c.members {
				if !strings.Contains(p.Detail, m) {
					t.Errorf("the detail does not name %s: %s", m, p.Detail)
				}
			}
			if strings.Contains(p.Detail, "A1") || strings.Contains(p.Detail, "call_B") {
				t.Errorf("the detail echoes an id: %s", p.Detail)
			}
			// In a batch, the call is an error in its slot, under a fresh id.
			r = e.do("POST", "/calls/batch", []byte(`{"calls":[`+c.body+`]}`), jsonCT, false)
			var b struct{ Results []registry.Result }
			r.json(t, &b)
			if r.status != 200 || len(b.Results) != 1 || b.Results[0].Code() != registry.CodeInvalidArguments ||
				!strings.Contains(b.Results[0].Error.Message, "JSON readers differ") || !strings.HasPrefix(b.Results[0].ToolCallID, "call_") ||
				b.Results[0].ToolName != "" {
				t.Errorf("batch: %d %s", r.status, r.body)
			}
		})
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("test__count ran %d times", n)
	}
	// One shape at a time still runs; a toolCallId beside a shape without
	// an id of its own is the call's id.
	for _, c := range []struct{ body, id string }{
		{`{"toolCallId":"A1","functionCall":{"name":"test__count","args":{}}}`, "A1"},
		{`{"toolCallId":"A2","type":"function","function":{"name":"test__count","arguments":"{}"}}`, "A2"},
		{`{"type":"function_call","id":"fc_1","call_id":"c1","name":"test__count","arguments":"{}","context":{"turnId":"t"},"timeoutMs":1000}`, "c1"},
		{`{"type":"tool_use","id":"t1","name":"test__count","input":{},"context":{"instanceKey":"k"}}`, "t1"},
	} {
		r, res := e.call("/calls", c.body)
		if r.status != 200 || res.Status != registry.StatusOK || res.ToolCallID != c.id || res.ToolName != "test__count" {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
		}
	}
}

// A body in a charset other than UTF-8 is refused for its Content-Type,
// naming the charset, rather than read as UTF-8 and refused for a byte it
// does not explain ("invalid character 'ÿ'").
func TestNonUTF8CharsetIsRefused(t *testing.T) {
	e := newEnv(t)
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}`)
	for _, c := range []struct {
		ct     string
		status int
	}{
		{"application/json; charset=utf-16", 415},
		{"application/json; charset=ISO-8859-1", 415},
		{`application/json; charset="latin1"`, 415},
		{"application/json", 200},
		{"application/json; charset=utf-8", 200},
		{"application/json;charset=UTF-8", 200},
		{`application/json; charset="Utf-8"`, 200},
	} {
		r := e.do("POST", "/calls", body, map[string]string{"Content-Type": c.ct}, false)
		if r.status != c.status {
			t.Errorf("%s: %d %s; want %d", c.ct, r.status, r.body, c.status)
			continue
		}
		if c.status == 415 {
			var p Problem
			r.json(t, &p)
			cs := strings.Trim(strings.SplitN(c.ct, "=", 2)[1], `"`)
			if p.Code != "unsupported_media_type" || !strings.Contains(p.Detail, "charset "+cs) || !strings.Contains(p.Detail, "UTF-8") {
				t.Errorf("%s: %s", c.ct, r.body)
			}
		}
	}
	// /mcp too, as a JSON-RPC error.
	h := mcpPost("2025-11-25")
	h["Content-Type"] = "application/json; charset=utf-16"
	r := e.do("POST", "/mcp", []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`), h, false)
	if id, code, msg := rpcErrorOf(t, r); r.status != 415 || code != -32600 || id != "null" || !strings.Contains(msg, "charset utf-16") {
		t.Errorf("/mcp: %d %s", r.status, r.body)
	}
}

// CONNECT names a host, not a path: the 405 says that the server is no
// proxy, instead of "CONNECT is not allowed on " with nothing after it.
func TestConnectIsExplained(t *testing.T) {
	e := newEnv(t)
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	target := e.ts.Listener.Addr().String()
	if _, err := conn.Write([]byte("CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	got := sb.String()
	if !strings.HasPrefix(got, "HTTP/1.1 405 ") || !strings.Contains(got, "not a proxy") || !strings.Contains(got, target) {
		t.Errorf("CONNECT: %s", got)
	}
}
