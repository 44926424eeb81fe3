package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	"github.com/toolsvc/toolsvc/internal/tools/text"
)

// gauge measures how many calls of a tool run at once. A call waits until
// want calls run together, or until every call of the test has started,
// so the measured maximum is what the scheduler allows and not what the
// machine's timing happened to produce. It then stays a moment longer, so a
// scheduler that allowed more would show it; no assertion depends on that
// moment.
type gauge struct {
	mu                sync.Mutex
	cond              *sync.Cond
	cur, max, started int
	want, total       int
}

func newGauge(want, total int) *gauge {
	g := &gauge{want: want, total: total}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gauge) run(ctx context.Context, r *registry.Request) (any, error) {
	stop := context.AfterFunc(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.cond.Broadcast()
	})
	defer stop()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started++
	g.cur++
	g.max = max(g.max, g.cur)
	g.cond.Broadcast()
	for g.cur < g.want && g.started < g.total && ctx.Err() == nil {
		g.cond.Wait()
	}
	g.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	g.mu.Lock()
	g.cur--
	return r.CallID, ctx.Err()
}

// batchEnv serves the text and jq tools and the tools given.
func batchEnv(t *testing.T, o registry.BatchOptions, extra ...*registry.Tool) *env {
	t.Helper()
	return newEnv(t, func(d *Deps, opts *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000},
			append(append(text.Tools(), jsonq.Tools()...), extra...)...)
		if err != nil {
			t.Fatal(err)
		}
		opts.Registry = reg
		d.Batch = o
	})
}

func testTool(name string, tier registry.Tier, f registry.Func) *registry.Tool {
	return &registry.Tool{Definition: registry.Definition{Name: name, Description: "test " + name, Tier: tier,
		Parameters: json.RawMessage(`{"type":"object","properties":{"label":{"type":"string"},"group":{"type":"integer"}}}`)}, Handler: f}
}

type nativeBatch struct {
	Results []registry.Result `json:"results"`
}

func (e *env) batch(path, body string) (response, nativeBatch) {
	e.t.Helper()
	r := e.do("POST", path, []byte(body), jsonCT, true)
	var out nativeBatch
	if r.status == 200 {
		r.json(e.t, &out)
	}
	return r, out
}

func TestBatchReadOnlyConcurrency(t *testing.T) {
	for _, c := range []struct {
		name        string
		parallelism int
		want        int
	}{
		{"default", 0, registry.DefaultBatchParallelism},
		{"configured", 3, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 25
			g := newGauge(c.want, n)
			e := batchEnv(t, registry.BatchOptions{Parallelism: c.parallelism}, testTool("test__gauge", registry.ReadOnly, g.run))
			calls := make([]string, n)
			for i := range calls {
				calls[i] = fmt.Sprintf(`{"toolCallId":"c%d","toolName":"test__gauge"}`, i)
			}
			r, out := e.batch("/calls/batch", `{"calls":[`+strings.Join(calls, ",")+`]}`)
			if r.status != 200 || len(out.Results) != n {
				t.Fatalf("%d %s", r.status, r.body)
			}
			for i, res := range out.Results {
				if res.Status != registry.StatusOK || res.ToolCallID != fmt.Sprintf("c%d", i) || string(res.Output) != fmt.Sprintf(`"c%d"`, i) {
					t.Errorf("result %d out of order or failed: %+v", i, res)
				}
			}
			t.Logf("maximum concurrency of %d read_only calls: %d (bound %d)", n, g.max, c.want)
			if g.max != c.want {
				t.Errorf("maximum concurrency %d, want exactly %d", g.max, c.want)
			}
		})
	}
}

func TestBatchBarriers(t *testing.T) {
	var mu sync.Mutex
	var events []string
	entered := map[int]int{}
	cond := sync.NewCond(&mu)
	type args struct {
		Label string
		Group int
	}
	// A read joins its group and waits until the whole group has started
	// (groups of 2 and 3 here), so its members must overlap.
	read := func(ctx context.Context, r *registry.Request) (any, error) {
		var a args
		_ = r.Bind(&a)
		stop := context.AfterFunc(ctx, func() { mu.Lock(); cond.Broadcast(); mu.Unlock() })
		defer stop()
		mu.Lock()
		defer mu.Unlock()
		events = append(events, "enter "+a.Label)
		entered[a.Group]++
		cond.Broadcast()
		for entered[a.Group] < a.Group && ctx.Err() == nil {
			cond.Wait()
		}
		events = append(events, "exit "+a.Label)
		return a.Label, ctx.Err()
	}
	write := func(ctx context.Context, r *registry.Request) (any, error) {
		var a args
		_ = r.Bind(&a)
		mu.Lock()
		events = append(events, "enter "+a.Label)
		mu.Unlock()
		mu.Lock()
		events = append(events, "exit "+a.Label)
		mu.Unlock()
		return a.Label, nil
	}
	e := batchEnv(t, registry.BatchOptions{}, testTool("test__read", registry.ReadOnly, read), testTool("test__write", registry.SideEffecting, write))
	r, out := e.batch("/calls/batch", `{"calls":[
		{"toolName":"test__read","arguments":{"label":"a1","group":2}},
		{"toolName":"test__read","arguments":{"label":"a2","group":2}},
		{"toolName":"test__write","arguments":{"label":"w1"}},
		{"toolName":"test__write","arguments":{"label":"w2"}},
		{"toolName":"test__read","arguments":{"label":"b1","group":3}},
		{"toolName":"test__read","arguments":{"label":"b2","group":3}},
		{"toolName":"test__read","arguments":{"label":"b3","group":3}},
		{"toolName":"test__write","arguments":{"label":"w3"}}]}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for i, want := range []string{"a1", "a2", "w1", "w2", "b1", "b2", "b3", "w3"} {
		if res := out.Results[i]; res.Status != registry.StatusOK || string(res.Output) != `"`+want+`"` {
			t.Errorf("result %d: %+v", i, res)
		}
	}
	at := func(ev string) int {
		i := slices.Index(events, ev)
		if i < 0 {
			t.Fatalf("no %q in %v", ev, events)
		}
		return i
	}
	after := func(later string, earlier ...string) {
		for _, ev := range earlier {
			if at(later) < at(ev) {
				t.Errorf("%q came before %q: %v", later, ev, events)
			}
		}
	}
	after("enter w1", "exit a1", "exit a2")
	after("enter w2", "exit w1")
	after("enter b1", "exit w2")
	after("enter b2", "exit w2")
	after("enter b3", "exit w2")
	after("enter w3", "exit b1", "exit b2", "exit b3")
	t.Logf("events: %v", events)
}

func TestBatchMixedShapesAndBadCalls(t *testing.T) {
	where := func(ctx context.Context, r *registry.Request) (any, error) { return r.Context.InstanceKey, nil }
	e := batchEnv(t, registry.BatchOptions{}, testTool("test__where", registry.ReadOnly, where))
	body := `{"context":{"instanceKey":"conv-9"},"calls":[
		{"toolCallId":"n1","toolName":"text__transform","arguments":{"operation":"upper","text":"abc"}},
		{"id":"call_2","type":"function","function":{"name":"json__query","arguments":"{\"program\":\".a\",\"input\":{\"a\":2}}"}},
		{"type":"tool_use","id":"toolu_3","name":"text__transform","input":{"operation":"shout"}},
		{"type":"function_call","id":"fc_4","call_id":"call_4","name":"text__transform","arguments":"{\"operation\":\"lower\",\"text\":\"D\"}"},
		{"functionCall":{"id":"g5","name":"text__transform","args":{"operation":"trim","text":" e "}}},
		{"toolCallId":"bad6","toolName":5},
		{"id":"call_7","type":"function","function":{"arguments":"{}"}},
		5,
		{"toolCallId":"n1","toolName":"text__transform","arguments":{"operation":"upper","text":"again"}},
		{"toolCallId":"u10","toolName":"nope__nope"},
		{"toolCallId":"w11","toolName":"test__where"},
		{"toolCallId":"w12","toolName":"test__where","context":{"instanceKey":"own"}}
	]}`
	want := []struct {
		id, output string
		code       registry.Code
		message    string
	}{
		{"n1", `{"result":"ABC"}`, "", ""},
		{"call_2", `{"count":1,"results":[2]}`, "", ""},
		{"toolu_3", "", registry.CodeInvalidArguments, "arguments do not match the schema"},
		{"call_4", `{"result":"d"}`, "", ""},
		{"g5", `{"result":"e"}`, "", ""},
		{"bad6", "", registry.CodeInvalidArguments, "call 6 of the batch cannot be read, so it did not run: the call does not have the expected shape"},
		{"call_7", "", registry.CodeInvalidArguments, "call 7 of the batch cannot be read, so it did not run: the call names no tool"},
		{"", "", registry.CodeInvalidArguments, "call 8 of the batch cannot be read, so it did not run: a call must be a JSON object"},
		{"n1", "", registry.CodeInvalidArguments, `toolCallId "n1" is also used by call 1 of this batch`},
		{"u10", "", registry.CodeToolNotFound, `no tool named "nope__nope"`},
		{"w11", `"conv-9"`, "", ""},
		{"w12", `"own"`, "", ""},
	}
	r, out := e.batch("/calls/batch", body)
	if r.status != 200 || len(out.Results) != len(want) {
		t.Fatalf("%d %s", r.status, r.body)
	}
	for i, w := range want {
		res := out.Results[i]
		if w.id != "" && res.ToolCallID != w.id || res.ToolCallID == "" {
			t.Errorf("result %d: id %q, want %q", i+1, res.ToolCallID, w.id)
		}
		if res.Code() != w.code || w.output != "" && string(res.Output) != w.output || w.message != "" && !strings.HasPrefix(res.Error.Message, w.message) {
			t.Errorf("result %d: %+v (output %s)", i+1, res.Error, res.Output)
		}
		if res.Error != nil && res.Error.Suggestion == "" {
			t.Errorf("result %d: no suggestion: %+v", i+1, res.Error)
		}
	}

	// ?format= applies to every result.
	r = e.do("POST", "/calls/batch?format=openai", []byte(body), jsonCT, true)
	var msgs struct{ Results []openAIToolMessage }
	r.json(t, &msgs)
	if len(msgs.Results) != len(want) {
		t.Fatalf("openai: %s", r.body)
	}
	for i, m := range msgs.Results {
		if m.Role != "tool" || (want[i].id != "" && m.ToolCallID != want[i].id) || (want[i].code != "") != strings.HasPrefix(m.Content, "Error E_") {
			t.Errorf("openai message %d: %+v", i+1, m)
		}
	}
	if msgs.Results[4].Content != `{"result":"e"}` || msgs.Results[10].Content != "conv-9" {
		t.Errorf("openai contents: %+v", msgs.Results)
	}
}

func TestBatchEnvelope(t *testing.T) {
	e := batchEnv(t, registry.BatchOptions{})
	many := strings.Repeat(`{"toolName":"text__transform"},`, registry.MaxBatchCalls)
	cases := []struct {
		name, body, path string
		status           int
		code             string
		detail           string
	}{
		{"array", `[]`, "/calls/batch", 400, "invalid_batch", ""},
		{"no calls", `{"context":{}}`, "/calls/batch", 400, "invalid_batch", ""},
		{"calls not an array", `{"calls":{"toolName":"x"}}`, "/calls/batch", 400, "invalid_batch", "calls must be an array, not object"},
		{"too many", `{"calls":[` + many + `{"toolName":"text__transform"}]}`, "/calls/batch", 400, "invalid_batch", ""},
		{"not json", `{"calls":[`, "/calls/batch", 400, "invalid_json", ""},
		{"bad format", `{"calls":[]}`, "/calls/batch?format=xml", 400, "invalid_parameter", ""},
		// A misspelt member would have left the catalog unnarrowed.
		{"misspelt catalog", `{"calls":[{"toolName":"text__transform"}],"catalgo":["json__*"]}`, "/calls/batch", 400, "invalid_batch", `"catalgo"`},
		{"unknown context member", `{"calls":[],"context":{"instance":"a"}}`, "/calls/batch", 400, "invalid_batch", `"instance"`},
	}
	for _, c := range cases {
		r := e.do("POST", c.path, []byte(c.body), jsonCT, false)
		var p Problem
		r.json(t, &p)
		if r.status != c.status || p.Code != c.code || p.Detail == "" || !strings.Contains(p.Detail, c.detail) || strings.Contains(p.Detail, "Go ") {
			t.Errorf("%s: %d %s", c.name, r.status, r.body)
		}
	}
	if r, out := e.batch("/calls/batch", `{"calls":[]}`); r.status != 200 || out.Results == nil || len(out.Results) != 0 {
		t.Errorf("empty batch: %d %s", r.status, r.body)
	}
	if r, out := e.batch("/calls/batch", `{"calls":[`+strings.TrimSuffix(many, ",")+`]}`); r.status != 200 || len(out.Results) != registry.MaxBatchCalls {
		t.Errorf("50 calls: %d", r.status)
	}
}

func TestBatchHonoursCancellation(t *testing.T) {
	started := make(chan string, 10)
	block := func(ctx context.Context, r *registry.Request) (any, error) {
		started <- r.CallID
		<-ctx.Done()
		return nil, ctx.Err()
	}
	e := batchEnv(t, registry.BatchOptions{Parallelism: 1}, testTool("test__block", registry.ReadOnly, block), testTool("test__wblock", registry.SideEffecting, block))
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("POST", "/calls/batch", strings.NewReader(`{"calls":[
		{"toolCallId":"a","toolName":"test__block"},{"toolCallId":"b","toolName":"test__block"},
		{"toolCallId":"c","toolName":"test__wblock"},{"toolCallId":"d","toolName":"test__block"}]}`)).WithContext(ctx)
	req.Header.Set("Content-Type", "application/json")
	go func() {
		<-started
		cancel()
	}()
	w := httptest.NewRecorder()
	e.srv.ServeHTTP(w, req)
	var out nativeBatch
	if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != 200 || len(out.Results) != 4 {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if len(started) != 0 {
		t.Errorf("calls started after the cancellation: %d", len(started))
	}
	for i, res := range out.Results {
		if res.Code() != registry.CodeCanceled || (i > 0) != strings.HasPrefix(res.Error.Message, "not started") {
			t.Errorf("result %d: %+v", i, res.Error)
		}
	}
	if !e.srv.WaitIdle(context.Background()) {
		t.Error("not idle")
	}
}

func TestBatchOverloaded(t *testing.T) {
	release, held := make(chan struct{}), make(chan struct{})
	hold := func(ctx context.Context, r *registry.Request) (any, error) {
		close(held)
		<-release
		return "done", nil
	}
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second}, append(text.Tools(), testTool("test__hold", registry.ReadOnly, hold))...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry, o.MaxConcurrency = reg, 1
		d.Batch = registry.BatchOptions{CapacityWait: time.Millisecond}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := http.Post(e.ts.URL+"/calls", "application/json", strings.NewReader(`{"toolName":"test__hold"}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-held
	r := e.do("POST", "/calls/batch", []byte(`{"calls":[{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}},{"toolName":"text__transform","arguments":{"operation":"lower","text":"B"}}]}`), jsonCT, true)
	if r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Errorf("batch with no capacity at all: %d %s", r.status, r.body)
	}
	close(release)
	<-done
	if r, out := e.batch("/calls/batch", `{"calls":[{"toolName":"text__transform","arguments":{"operation":"upper","text":"a"}}]}`); r.status != 200 || out.Results[0].Status != registry.StatusOK {
		t.Errorf("batch with capacity: %d %s", r.status, r.body)
	}
}

func TestShapeErrorSpeaksJSON(t *testing.T) {
	for body, want := range map[string]string{
		`{"toolName":5}`:                               "toolName must be a string, not number",
		`{"toolName":"a__b","timeoutMs":"soon"}`:       "timeoutMs must be an integer, not string",
		`{"toolName":"a__b","catalog":"x"}`:            "catalog must be an array, not string",
		`{"toolName":"a__b","context":[]}`:             "context must be an object, not array",
		`{"type":"function","function":{"name":true}}`: "function.name must be a string, not bool",
	} {
		_, err := decodeCall([]byte(body), 64)
		if err == nil || !strings.HasSuffix(err.(*Problem).Detail, want) {
			t.Errorf("%s: %v, want …%s", body, err, want)
		}
	}
}

// BenchmarkPostCallsBatch is POST /calls/batch with ten read_only calls end
// to end through a real HTTP server on loopback.
func BenchmarkPostCallsBatch(b *testing.B) {
	e := newEnv(b)
	call := `{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`
	body := []byte(`{"calls":[` + strings.TrimSuffix(strings.Repeat(call+",", 10), ",") + `]}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		readOK(b)(client.Post(e.ts.URL+"/calls/batch", "application/json", bytes.NewReader(body)))
	}
}
