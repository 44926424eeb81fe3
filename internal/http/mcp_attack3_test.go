package http

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// mcpEnvWith is an env whose registry also holds extra.
func mcpEnvWith(t *testing.T, logs *logtest.Buffer, extra ...*registry.Tool) *env {
	t.Helper()
	return newEnv(t, func(d *Deps, o *registry.Options) {
		if logs != nil {
			d.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		}
		reg, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, append(o.Registry.List(nil, registry.Filter{}), extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
}

func echoTool(name, params string) *registry.Tool {
	return &registry.Tool{Definition: registry.Definition{Name: name, Description: "echoes its name", Tier: registry.ReadOnly, Parameters: json.RawMessage(params)},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) { return map[string]any{"tool": name}, nil })}
}

// A tool the SDK refuses to serve (its x-mcp-header annotation sits on an
// object property) is left out of /mcp with an error logged, instead of
// every request to /mcp failing with 500 for every caller who sees it.
func TestMCPToolTheSDKRefusesIsLeftOut(t *testing.T) {
	logs := &logtest.Buffer{}
	e := mcpEnvWith(t, logs,
		echoTool("bad__hdr", `{"type":"object","properties":{"region":{"type":"object","x-mcp-header":"Region"}}}`),
		echoTool("good__one", `{"type":"object"}`))
	cs, err := mcpSession(t, e, "")
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	defer cs.Close()
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); strings.Contains(got, "bad__hdr") || !strings.Contains(got, "good__one") {
		t.Errorf("tools/list: %s", got)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "good__one", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("tools/call good__one: %v %+v", err, res)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "bad__hdr", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), `unknown tool "bad__hdr"`) {
		t.Errorf("tools/call bad__hdr: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "cannot be served over /mcp") || !strings.Contains(l, `"tool":"bad__hdr"`) || !strings.Contains(l, "x-mcp-header") {
		t.Errorf("log does not name the refused tool and why:\n%s", l)
	}
}

// A request to /mcp gives the SDK only the tools its messages use: a ping
// with a catalog of 300 tools costs what it costs with none, while
// tools/list still lists them all and tools/call (alone or batched) finds
// the tools it names. Allocations stand for the work: a ping used to
// convert every tool's schemas (over 100,000 allocations here).
func TestMCPRequestBuildsOnlyTheToolsItUses(t *testing.T) {
	var extra []*registry.Tool
	var props []string
	for j := range 10 {
		props = append(props, fmt.Sprintf(`"p%d":{"type":"string","description":"parameter %d","maxLength":100}`, j, j))
	}
	for i := range 300 {
		extra = append(extra, echoTool(fmt.Sprintf("big__e%d", i), `{"type":"object","properties":{`+strings.Join(props, ",")+`}}`))
	}
	e := mcpEnvWith(t, nil, extra...)
	post := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/mcp", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Accept", "application/json, text/event-stream")
		r.Header.Set("Mcp-Protocol-Version", "2025-03-26")
		w := httptest.NewRecorder()
		e.srv.ServeHTTP(w, r)
		return w
	}
	allocs := testing.AllocsPerRun(5, func() {
		if w := post(`{"jsonrpc":"2.0","id":1,"method":"ping"}`); w.Code != 200 {
			t.Fatalf("ping: %d %s", w.Code, w.Body)
		}
	})
	if allocs > 10_000 {
		t.Errorf("a ping took %.0f allocations with 300 tools in the catalog: the request built tools it does not use", allocs)
	}

	var list struct {
		Result struct {
			Tools []struct{ Name string } `json:"tools"`
		} `json:"result"`
	}
	w := post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || len(list.Result.Tools) != e.srv.deps.Executor.Registry().Len() {
		t.Fatalf("tools/list: %v %d tools: %.300s", err, len(list.Result.Tools), w.Body)
	}

	var batch []struct {
		ID     int `json:"id"`
		Result struct {
			StructuredContent map[string]string `json:"structuredContent"`
		} `json:"result"`
		Error *struct{ Message string } `json:"error"`
	}
	w = post(`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"big__e7","arguments":{}}},` +
		`{"jsonrpc":"2.0","id":2,"method":"ping"},` +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"big__e299","arguments":{}}},` +
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope__x","arguments":{}}}]`)
	if err := json.Unmarshal(w.Body.Bytes(), &batch); err != nil || len(batch) != 4 {
		t.Fatalf("batch: %v %s", err, w.Body)
	}
	for _, r := range batch {
		switch r.ID {
		case 1, 3:
			if want := map[int]string{1: "big__e7", 3: "big__e299"}[r.ID]; r.Error != nil || r.Result.StructuredContent["tool"] != want {
				t.Errorf("call %d: %s", r.ID, w.Body)
			}
		case 4:
			if r.Error == nil || !strings.Contains(r.Error.Message, `unknown tool "nope__x"`) {
				t.Errorf("call of an unknown tool: %s", w.Body)
			}
		}
	}
}
