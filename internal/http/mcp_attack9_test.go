package http

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
	"github.com/toolsvc/toolsvc/internal/tools/plan"
	"github.com/toolsvc/toolsvc/internal/tools/text"
)

// heldEnv is newEnv over a store whose FinishCall fails while fs.down is
// set, with a side-effecting tool test__write (recorded, so its result
// can be held) and plan__execute.
func heldEnv(t *testing.T) (*env, *storetest.FinishFails, *atomic.Int32) {
	t.Helper()
	var writes atomic.Int32
	write := &registry.Tool{
		Definition: registry.Definition{Name: "test__write", Description: "writes", Tier: registry.SideEffecting, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return map[string]int32{"written": writes.Add(1)}, nil
		}),
	}
	planTools, binder := plan.Tools(plan.Options{})
	fs := &storetest.FinishFails{Store: openStore(t)}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000},
			append(append(text.Tools(), write), planTools...)...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry, o.Store = reg, fs
	})
	binder.Bind(e.srv.deps.Executor.(*registry.Executor))
	return e, fs, &writes
}

// TestMCPCallWhoseRecordIsHeldSaysSo: a tools/call whose result the store
// could not take is not a plain success over /mcp either: POST /calls says
// recordPending and Toolsvc-Record: pending, and /mcp says it in _meta
// (with the toolCallId, under which GET /calls reads it) and, for the
// model, in a text block after the output, which stays the first block,
// as structuredContent stays the output. A plan's step says so in the
// plan's output.
func TestMCPCallWhoseRecordIsHeldSaysSo(t *testing.T) {
	e, fs, writes := heldEnv(t)
	cs, err := mcpSession(t, e, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := t.Context()

	fs.Down.Store(true)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__write", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 2 || res.Content[0].(*mcp.TextContent).Text != `{"written":1}` ||
		string(mustJSON(t, res.StructuredContent)) != `{"written":1}` {
		t.Fatalf("held call: %s %v", resultText(res), res.StructuredContent)
	}
	note := res.Content[1].(*mcp.TextContent).Text
	id, _ := res.Meta[mcpToolCallIDMeta].(string)
	if res.Meta[mcpRecordPendingMeta] != true || id == "" {
		t.Errorf("held call's _meta: %v; want %s true and %s", res.Meta, mcpRecordPendingMeta, mcpToolCallIDMeta)
	}
	if res.Meta[mcp.MetaKeyServerInfo] == nil {
		t.Errorf("held call's _meta lost the SDK's own: %v", res.Meta)
	}
	if !strings.Contains(note, "could not store the record of this call yet") || !strings.Contains(note, "not yet durable") ||
		!strings.Contains(note, "Do not call the tool again because of this") || !strings.Contains(note, id) {
		t.Errorf("held call's note: %q", note)
	}
	// The id is the call's: this instance answers it from memory.
	r := e.do("GET", "/calls/"+url.PathEscape(id), nil, nil, true)
	var got registry.Result
	r.json(t, &got)
	if r.status != 200 || !got.RecordPending || string(got.Output) != `{"written":1}` || r.header.Get(RecordHeader) != "pending" {
		t.Errorf("GET /calls/%s: %d %s", id, r.status, r.body)
	}

	// A plan's step that is held says so in the plan's output.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: plan.Name, Arguments: map[string]any{"steps": []any{
		map[string]any{"tool": "test__write", "arguments": map[string]any{}},
		map[string]any{"tool": "text__transform", "arguments": map[string]any{"operation": "upper", "text": "a"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	// Read as a client would, from the JSON.
	var out struct {
		RecordPending int `json:"recordPending"`
		Steps         []struct {
			Status        registry.Status `json:"status"`
			RecordPending bool            `json:"recordPending"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(mustJSON(t, res.StructuredContent), &out); err != nil || res.IsError || len(out.Steps) != 2 {
		t.Fatalf("held plan: %v %s", err, resultText(res))
	}
	if out.RecordPending != 1 || !out.Steps[0].RecordPending || out.Steps[1].RecordPending || out.Steps[0].Status != registry.StatusOK {
		t.Errorf("held plan's steps: %s", mustJSON(t, res.StructuredContent))
	}
	if res.Meta[mcpRecordPendingMeta] != true || len(res.Content) != 2 {
		t.Errorf("held plan: _meta %v, %d content blocks; want recordPending and the note", res.Meta, len(res.Content))
	}
	r = e.do("POST", "/calls", []byte(`{"toolName":"plan__execute","arguments":{"steps":[{"tool":"test__write"}]}}`), jsonCT, true)
	if r.status != 200 || r.header.Get(RecordHeader) != "pending" || !strings.Contains(string(r.body), `"recordPending":1,"steps"`) {
		t.Errorf("held plan over POST /calls: %d %s %q", r.status, r.body, r.header.Get(RecordHeader))
	}

	// Once the store takes results, a call is a plain result again.
	fs.Down.Store(false)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__write", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 || res.Meta[mcpRecordPendingMeta] != nil || res.Meta[mcpToolCallIDMeta] != nil || writes.Load() != 4 {
		t.Errorf("recorded call: %s %v (%d writes)", resultText(res), res.Meta, writes.Load())
	}
}

// beginTimesOut is a real store whose BeginCall times out during its
// commit, as a stalled database does: the record of the call may or may
// not commit, but the call does not run.
type beginTimesOut struct{ registry.Store }

func (beginTimesOut) BeginCall(context.Context, *registry.CallRecord) (*registry.CallRecord, bool, error) {
	return nil, false, fmt.Errorf("store: outcome of the write unknown: %w", context.DeadlineExceeded)
}

// TestMCPCallTheStoreRefusedSaysItDidNotRun: a tools/call the store did
// not take says what POST /calls says, that the call did not run, not the
// store's own "outcome of the write unknown", which a model reads as a
// side effect to look for; the cause goes to the log.
func TestMCPCallTheStoreRefusedSaysItDidNotRun(t *testing.T) {
	e, logs := infoEnv(t, func(d *Deps, o *registry.Options) { o.Store = beginTimesOut{openStore(t)} })
	r := e.do("POST", "/calls", []byte(`{"toolName":"test__priv","toolCallId":"bt-1"}`), jsonCT, true)
	var p Problem
	r.json(t, &p)
	if r.status != 503 || !strings.Contains(p.Detail, "the call did not run") {
		t.Fatalf("POST /calls: %d %s", r.status, r.body)
	}
	cs, err := mcpSession(t, e, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "test__priv", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if text := resultText(res); !res.IsError || text != "The call could not be taken: "+p.Detail+"." || strings.Contains(text, "outcome") {
		t.Errorf("/mcp: %q; want the detail of POST /calls, %q", text, p.Detail)
	}
	line := findLogLine(t, logs, func(m map[string]any) bool { return m["msg"] == "mcp: a tool call could not be taken" })
	if line["level"] != "ERROR" || !strings.Contains(fmt.Sprint(line["error"]), "outcome of the write unknown") || line["tool"] != "test__priv" {
		t.Errorf("the refusal's log line: %v", line)
	}
}
