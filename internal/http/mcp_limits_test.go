package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// mcpPost is the header of a POST to /mcp for a client of revision
// version ("" sends none: the SDK takes 2025-03-26).
func mcpPost(version string) map[string]string {
	h := map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
	if version != "" {
		h["Mcp-Protocol-Version"] = version
	}
	return h
}

// mcpCallAs posts one JSON-RPC tools/call of text__transform (id 7) to
// /mcp with the headers h (credentials) and decodes the answer into v.
func mcpCallAs(t *testing.T, e *env, h map[string]string, v any) {
	t.Helper()
	header := mcpPost("")
	for k, val := range h {
		if k != "Content-Type" {
			header[k] = val
		}
	}
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"text__transform","arguments":{"operation":"upper","text":"x"}}}`
	e.do("POST", "/mcp", []byte(body), header, false).json(t, v)
}

// rpcErrorOf is the JSON-RPC error of a response to /mcp.
func rpcErrorOf(t *testing.T, r response) (id string, code int, msg string) {
	t.Helper()
	var m struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.body, &m); err != nil || m.Error == nil {
		t.Fatalf("not a JSON-RPC error: %d %v %.300s", r.status, err, r.body)
	}
	return string(m.ID), m.Error.Code, m.Error.Message
}

// A batch may hold one tools/list, not more: each is answered with the
// whole catalog, so 50 of them in 2.7 KB were answered with 45 MB. The
// batch is refused whole with -32600 naming the rule, before any list
// is built; a batch with one list (and other messages) is answered.
func TestMCPBatchHoldsOneToolsList(t *testing.T) {
	e := newEnv(t)
	list := func(id int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, id) }
	ping := func(id int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping"}`, id) }
	var fifty []string
	for i := range 50 {
		fifty = append(fifty, list(i))
	}
	for _, c := range []struct {
		name, body, want string
	}{
		{"two lists", "[" + list(1) + "," + list(2) + "]", "messages 1 and 2 of the batch are both tools/list; a batch may hold at most one"},
		{"fifty lists", "[" + strings.Join(fifty, ",") + "]", "messages 1 and 2 of the batch are both tools/list"},
		{"a list among pings", "[" + ping(1) + "," + list(2) + "," + ping(3) + "," + list(4) + "]", "messages 2 and 4 of the batch are both tools/list"},
		// A notification is answered with nothing, but the SDK may
		// still build the list.
		{"a list notification", `[{"jsonrpc":"2.0","method":"tools/list"},` + list(2) + "]", "messages 1 and 2 of the batch are both tools/list"},
	} {
		r := e.do("POST", "/mcp", []byte(c.body), mcpPost("2025-03-26"), false)
		id, code, msg := rpcErrorOf(t, r)
		if r.status != 400 || id != "null" || code != -32600 || !strings.Contains(msg, c.want) {
			t.Errorf("%s: %d id %s code %d %q, want 400 -32600 %q", c.name, r.status, id, code, msg, c.want)
		}
	}

	r := e.do("POST", "/mcp", []byte("["+ping(1)+","+list(2)+","+ping(3)+"]"), mcpPost("2025-03-26"), false)
	var answers []struct {
		ID     int `json:"id"`
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(r.body, &answers); err != nil || r.status != 200 || len(answers) != 3 {
		t.Fatalf("batch with one list: %d %v %.300s", r.status, err, r.body)
	}
	for _, a := range answers {
		if a.Error != nil || (a.ID == 2 && len(a.Result.Tools) != e.srv.deps.Executor.Registry().Len()) {
			t.Errorf("batch with one list: answer %d: %d tools, error %s", a.ID, len(a.Result.Tools), a.Error)
		}
	}
}

// An empty batch is an invalid request (-32600), as JSON-RPC 2.0 says,
// not a parse error.
func TestMCPEmptyBatch(t *testing.T) {
	e := newEnv(t)
	for _, body := range []string{"[]", " [ ]\n"} {
		r := e.do("POST", "/mcp", []byte(body), mcpPost("2025-03-26"), false)
		id, code, msg := rpcErrorOf(t, r)
		if r.status != 400 || id != "null" || code != -32600 || !strings.Contains(msg, "batch is empty") {
			t.Errorf("%q: %d id %s code %d %q", body, r.status, id, code, msg)
		}
	}
}

// A client that hangs up ends its tools/call at once, whatever revision
// it speaks: the SDK ties the call to the HTTP request only from
// 2026-07-28 on, and an older client could otherwise hold tool slots for
// the whole timeout without holding a connection.
func TestMCPHangUpCancelsCall(t *testing.T) {
	started := make(chan struct{}, 1)
	ended := make(chan error, 1)
	slow := &registry.Tool{
		Definition: registry.Definition{Name: "slow__wait", Description: "waits", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler: registry.Func(func(ctx context.Context, _ *registry.Request) (any, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				ended <- ctx.Err()
				return nil, ctx.Err()
			case <-time.After(10 * time.Second):
				ended <- nil
				return map[string]any{}, nil
			}
		}),
	}
	e := mcpEnvWith(t, nil, slow)
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow__wait","arguments":{}}}`
	for _, c := range []struct{ name, version, body string }{
		{"2025-11-25", "2025-11-25", call},
		{"2025-06-18", "2025-06-18", call},
		{"no version header", "", call},
		{"in a batch", "2025-03-26", "[" + call + `,{"jsonrpc":"2.0","id":2,"method":"ping"}]`},
		{"2026-07-28", "2026-07-28", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"slow__wait","arguments":{}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, hangUp := context.WithCancel(context.Background())
			defer hangUp()
			req, err := http.NewRequestWithContext(ctx, "POST", e.ts.URL+"/mcp", strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range mcpPost(c.version) {
				req.Header.Set(k, v)
			}
			if c.version >= "2026-07-28" {
				req.Header.Set("Mcp-Method", "tools/call")
				req.Header.Set("Mcp-Name", "slow__wait")
			}
			sent := make(chan error, 1)
			go func() {
				resp, err := e.ts.Client().Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					err = fmt.Errorf("answered %s before the client hung up: %.300s", resp.Status, b)
				}
				sent <- err
			}()
			select {
			case <-started:
			case err := <-sent:
				t.Fatalf("the tool did not start: %v", err)
			case <-time.After(5 * time.Second):
				t.Fatal("the tool did not start")
			}
			hangUp()
			if err := <-sent; !errors.Is(err, context.Canceled) {
				t.Fatalf("client: %v", err)
			}
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Errorf("the tool ended with %v, want its context canceled", err)
				}
			case <-time.After(2 * time.Second):
				t.Errorf("the tool still runs 2 s after its client hung up; it ended with %v", <-ended)
			}
		})
	}
}

// The Accept header must list both JSON and event streams, as the spec
// asks of clients (wildcards count, so curl's default */* passes), even
// though the answers are JSON: a header that is absent or lists one is a
// 400 with a JSON-RPC error, as docs/mcp.md says.
func TestMCPAccept(t *testing.T) {
	e := newEnv(t)
	ping := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	for accept, want := range map[string]int{
		"":                                    400,
		"application/json":                    400,
		"text/event-stream":                   400,
		"application/json, text/event-stream": 200,
		"*/*":                                 200,
		"application/*, text/*":               200,
	} {
		h := mcpPost("2025-11-25")
		delete(h, "Accept")
		if accept != "" {
			h["Accept"] = accept
		}
		r := e.do("POST", "/mcp", ping, h, false)
		if r.status != want || !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			t.Errorf("Accept %q: %d %s %s, want %d", accept, r.status, r.header.Get("Content-Type"), r.body, want)
			continue
		}
		if want == 400 {
			if _, code, msg := rpcErrorOf(t, r); code != -32600 || !strings.Contains(msg, "Accept must contain both") {
				t.Errorf("Accept %q: %d %q", accept, code, msg)
			}
		}
	}
}
