package plan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	"github.com/toolsvc/toolsvc/internal/tools/text"
)

// testEnv is a real executor serving the plan tool, the text and jq tools,
// and a side-effecting and a privileged tool that record their runs.
type testEnv struct {
	exec *registry.Executor
	mu   sync.Mutex
	log  []string
	// entered gets a value each time test__wait starts; closing gate
	// lets every test__wait return.
	entered chan struct{}
	gate    chan struct{}
	binder  *Binder
}

func newTestEnv(t *testing.T, bind bool) *testEnv {
	t.Helper()
	return newTestEnvWith(t, bind, registry.Options{})
}

// newTestEnvWith is newTestEnv with the executor's options o (its
// Registry is set here), a tool test__wait that blocks until its gate is
// closed, and the tools extra.
func newTestEnvWith(t *testing.T, bind bool, o registry.Options, extra ...*registry.Tool) *testEnv {
	t.Helper()
	env := &testEnv{entered: make(chan struct{}, registry.MaxBatchCalls), gate: make(chan struct{})}
	record := func(name string) registry.Func {
		return func(ctx context.Context, r *registry.Request) (any, error) {
			env.mu.Lock()
			defer env.mu.Unlock()
			env.log = append(env.log, name+" by "+r.Caller.ID+" in "+r.Context.InstanceKey)
			return "done", nil
		}
	}
	obj := json.RawMessage(`{"type":"object","additionalProperties":false}`)
	side := &registry.Tool{Definition: registry.Definition{Name: "test__write", Description: "writes", Tier: registry.SideEffecting, Parameters: obj}, Handler: record("write")}
	priv := &registry.Tool{Definition: registry.Definition{Name: "test__exec", Description: "runs", Tier: registry.Privileged, Parameters: obj}, Handler: record("exec")}
	wait := &registry.Tool{Definition: registry.Definition{Name: "test__wait", Description: "waits", Tier: registry.ReadOnly, Parameters: obj},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			env.entered <- struct{}{}
			select {
			case <-env.gate:
				return "went", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		})}
	planTools, binder := Tools(Options{})
	tools := append(append(append(append(planTools, text.Tools()...), jsonq.Tools()...), side, priv, wait), extra...)
	reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	o.Registry = reg
	env.exec = registry.NewExecutor(o)
	env.binder = binder
	if bind {
		binder.Bind(env.exec)
	}
	return env
}

func (env *testEnv) plan(t *testing.T, caller *registry.Caller, call *registry.Call) (*registry.Result, []StepResult) {
	t.Helper()
	call.ToolName = Name
	if call.ToolCallID == "" {
		call.ToolCallID = "plan-1"
	}
	res, err := env.exec.Execute(context.Background(), caller, call)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != registry.StatusOK {
		return res, nil
	}
	// Every output matches the declared output schema, and its counts
	// are those of its steps.
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(res.Output))
	if err != nil {
		t.Fatalf("plan output is not JSON: %v: %s", err, res.Output)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	schemaDoc, err := jsonschema.UnmarshalJSON(strings.NewReader(outputSchema))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("mem:///plan.output.json", schemaDoc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("mem:///plan.output.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := sch.Validate(doc); err != nil {
		t.Errorf("plan output does not match its output schema: %v: %s", err, res.Output)
	}
	var out Output
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("plan output: %v: %s", err, res.Output)
	}
	counts := map[registry.Status]int{}
	held := 0
	for _, s := range out.Steps {
		counts[s.Status]++
		if s.RecordPending {
			held++
		}
	}
	if out.RecordPending != held {
		t.Errorf("plan counts %d steps recordPending, steps have %d", out.RecordPending, held)
	}
	if out.OK != counts[registry.StatusOK] || out.Failed != counts[registry.StatusError] || out.PendingApproval != counts[registry.StatusPendingApproval] {
		t.Errorf("plan counts %d/%d/%d, steps %v", out.OK, out.Failed, out.PendingApproval, counts)
	}
	return res, out.Steps
}

func TestPlanRunsEveryStep(t *testing.T) {
	env := newTestEnv(t, true)
	res, steps := env.plan(t, registry.Anonymous(), &registry.Call{
		Context: registry.CallContext{InstanceKey: "conv-1"},
		Arguments: json.RawMessage(`{"steps":[
			{"tool":"text__transform","arguments":{"operation":"upper","text":"abc"}},
			{"tool":"json__query","arguments":{"program":".a","input":{"a":7}}},
			{"tool":"text__transform","arguments":{"operation":"nope"}},
			{"tool":"test__write","arguments":{}},
			{"tool":"test__exec"},
			{"tool":"fs__read","arguments":{"path":"x"}}
		]}`)})
	if res.Status != registry.StatusOK || len(steps) != 6 {
		t.Fatalf("plan: %+v %s", res, res.Output)
	}
	want := []struct {
		tool   string
		status registry.Status
		code   registry.Code
		output string
	}{
		{"text__transform", registry.StatusOK, "", `{"result":"ABC"}`},
		{"json__query", registry.StatusOK, "", `{"count":1,"results":[7]}`},
		{"text__transform", registry.StatusError, registry.CodeInvalidArguments, ""},
		{"test__write", registry.StatusOK, "", `"done"`},
		// each step passes policy on its own: privileged asks, and a plan
		// cannot approve it
		{"test__exec", registry.StatusError, registry.CodePolicyDenied, ""},
		{"fs__read", registry.StatusError, registry.CodeToolNotFound, ""},
	}
	for i, w := range want {
		s := steps[i]
		code := registry.Code("")
		if s.Error != nil {
			code = s.Error.Code
		}
		if s.Step != i+1 || s.Tool != w.tool || s.Status != w.status || code != w.code || (w.output != "" && string(s.Output) != w.output) {
			t.Errorf("step %d: %+v (output %s), want %+v", i+1, s, s.Output, w)
		}
	}
	if !strings.HasPrefix(string(res.Output), `{"ok":3,"failed":3,"pendingApproval":0,"steps":[`) {
		t.Errorf("the counts do not come first: %.80s", res.Output)
	}
	if strings.Join(env.log, ";") != "write by anonymous in conv-1" {
		t.Errorf("side effects: %v", env.log)
	}
}

// A plan holds a slot of the service-wide limit while it runs. When the
// service has no other slot free, its steps run on that one, one at a
// time, instead of each waiting for a slot the plan itself keeps taken
// and failing as not run. The slot is lent to the plan's steps only: a
// call from outside is still refused.
func TestPlanStepsRunOnThePlansSlot(t *testing.T) {
	env := newTestEnvWith(t, true, registry.Options{MaxConcurrency: 1})
	type answer struct {
		res   *registry.Result
		steps []StepResult
	}
	done := make(chan answer, 1)
	go func() {
		res, steps := env.plan(t, registry.Anonymous(), &registry.Call{Arguments: json.RawMessage(`{"steps":[
			{"tool":"test__wait","arguments":{}},
			{"tool":"test__wait","arguments":{}},
			{"tool":"text__transform","arguments":{"operation":"upper","text":"a"}},
			{"tool":"test__write","arguments":{}}
		]}`)})
		done <- answer{res, steps}
	}()
	timeout := time.After(30 * time.Second)
	select {
	case <-env.entered:
	case a := <-done:
		t.Fatalf("the plan ended before any step started: %+v %s", a.res.Error, a.res.Output)
	case <-timeout:
		t.Fatal("no step of the plan started")
	}
	// One step runs on the plan's slot; its read-only neighbour waits for
	// it rather than for a slot of its own.
	select {
	case <-env.entered:
		t.Fatal("two steps ran at once on a service with one slot")
	default:
	}
	if _, err := env.exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "text__transform", Arguments: json.RawMessage(`{"operation":"upper","text":"b"}`)}); !errors.Is(err, registry.ErrOverloaded) {
		t.Errorf("a call from outside the plan, while the plan holds the only slot: %v, want ErrOverloaded", err)
	}
	close(env.gate)
	var a answer
	select {
	case a = <-done:
	case <-timeout:
		t.Fatal("the plan did not finish")
	}
	if a.res.Status != registry.StatusOK || len(a.steps) != 4 {
		t.Fatalf("plan: %+v %s", a.res, a.res.Output)
	}
	for _, s := range a.steps {
		if s.Status != registry.StatusOK {
			t.Errorf("step %d (%s): %s %+v", s.Step, s.Tool, s.Status, s.Error)
		}
	}
	// The slot is the service's again once the plan is done.
	if res, err := env.exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "text__transform", Arguments: json.RawMessage(`{"operation":"upper","text":"b"}`)}); err != nil || res.Status != registry.StatusOK {
		t.Errorf("a call after the plan: %+v, %v", res, err)
	}
}

func TestPlanStepsAreCalledAsTheCaller(t *testing.T) {
	env := newTestEnv(t, true)
	// The caller may use the plan and the text tool, not jq: a plan does not widen that.
	caller := &registry.Caller{ID: "narrow", Tools: []string{"plan__*", "text__*"}, Scopes: []registry.Scope{registry.ScopeCall}}
	steps := `{"steps":[{"tool":"json__query","arguments":{"program":"."}},{"tool":"text__transform","arguments":{"operation":"trim","text":" a "}}]}`
	_, got := env.plan(t, caller, &registry.Call{Arguments: json.RawMessage(steps)})
	if got[0].Error == nil || got[0].Error.Code != registry.CodeToolNotInCatalog || got[1].Status != registry.StatusOK {
		t.Errorf("steps outside the caller's catalog: %+v", got)
	}
	// Nor does it widen the request's own narrowing of the catalog.
	_, got = env.plan(t, registry.Anonymous(), &registry.Call{Catalog: []string{Name, "json__query"}, Arguments: json.RawMessage(steps)})
	if got[0].Status != registry.StatusOK || got[1].Error == nil || got[1].Error.Code != registry.CodeToolNotInCatalog {
		t.Errorf("steps outside the request's catalog: %+v", got)
	}
}

func TestPlanRefusals(t *testing.T) {
	env := newTestEnv(t, true)
	many := make([]string, registry.MaxBatchCalls+1)
	for i := range many {
		many[i] = `{"tool":"text__transform","arguments":{"operation":"upper","text":"a"}}`
	}
	cases := map[string]struct {
		args string
		want string
	}{
		"nested":     {`{"steps":[{"tool":"text__transform","arguments":{"operation":"upper","text":"a"}},{"tool":"plan__execute","arguments":{"steps":[]}}]}`, "step 2 calls plan__execute: a plan cannot contain another plan"},
		"too many":   {`{"steps":[` + strings.Join(many, ",") + `]}`, "/steps"},
		"empty":      {`{"steps":[]}`, "/steps"},
		"extra keys": {`{"steps":[{"tool":"a__b","args":{}}]}`, "args"},
	}
	for name, c := range cases {
		res, _ := env.plan(t, registry.Anonymous(), &registry.Call{Arguments: json.RawMessage(c.args)})
		if res.Code() != registry.CodeInvalidArguments || !strings.Contains(fmt.Sprint(res.Error), c.want) {
			t.Errorf("%s: %+v", name, res.Error)
		}
	}
	if len(env.log) != 0 {
		t.Errorf("a refused plan ran steps: %v", env.log)
	}
	unbound := newTestEnv(t, false)
	res, _ := unbound.plan(t, registry.Anonymous(), &registry.Call{Arguments: json.RawMessage(`{"steps":[{"tool":"text__transform"}]}`)})
	if res.Code() != registry.CodeInternal {
		t.Errorf("unbound plan tool: %+v", res.Error)
	}
}

func TestPlanDefinition(t *testing.T) {
	tools, _ := Tools(Options{})
	d := tools[0].Definition
	if d.Name != Name || d.Tier != registry.SideEffecting || d.MaxOutputBytes != DefaultMaxOutputBytes || !strings.Contains(d.Description, "cannot contain plan__execute") {
		t.Errorf("definition: %+v", d)
	}
	var s map[string]any
	if err := json.Unmarshal(d.Parameters, &s); err != nil || s["additionalProperties"] != false {
		t.Errorf("schema: %v %s", err, d.Parameters)
	}
}

// newStoredEnv is newTestEnv with the embedded store, so that calls are
// recorded.
func newStoredEnv(t *testing.T) *testEnv {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return newTestEnvWith(t, true, registry.Options{Store: st})
}

func (env *testEnv) writes() int {
	env.mu.Lock()
	defer env.mu.Unlock()
	return len(env.log)
}

// TestPlanStoppedByItsDeadlineGoesOnWhenRepeated: a plan whose time runs
// out says which steps ran, which was stopped and which did not start;
// repeated with the same toolCallId it runs what did not run, and what
// ran answers from its record without running twice.
func TestPlanStoppedByItsDeadlineGoesOnWhenRepeated(t *testing.T) {
	env := newStoredEnv(t)
	steps := json.RawMessage(`{"steps":[{"tool":"test__write","arguments":{}},{"tool":"test__wait","arguments":{}},{"tool":"test__write","arguments":{}}]}`)
	res, out := env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "p1", Arguments: steps, TimeoutMs: 1000})
	if res.Status != registry.StatusOK || len(out) != 3 {
		t.Fatalf("plan: %+v %+v", res, res.Error)
	}
	if out[0].Status != registry.StatusOK || out[1].Error == nil || !strings.HasPrefix(out[1].Error.Message, "stopped: the plan's time ran out") ||
		out[2].Error == nil || !strings.HasPrefix(out[2].Error.Message, "not started: the plan's time ran out") || !strings.Contains(out[2].Error.Suggestion, "same toolCallId") {
		t.Fatalf("steps: %+v / %+v / %+v", out[0], out[1].Error, out[2].Error)
	}
	if n := env.writes(); n != 1 {
		t.Fatalf("%d writes ran, want 1", n)
	}
	<-env.entered
	close(env.gate)
	res, out = env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "p1", Arguments: steps, TimeoutMs: 1000})
	if res.Status != registry.StatusOK || len(out) != 3 || out[0].Status != registry.StatusOK || out[1].Status != registry.StatusOK || out[2].Status != registry.StatusOK {
		t.Fatalf("repeated plan: %+v %+v", res, out)
	}
	if n := env.writes(); n != 2 {
		t.Errorf("%d writes ran in all, want 2: the first step's must not run again", n)
	}
}

// TestPlanRefusedByItsRateLimitIsNotKept: a plan none of whose steps ran,
// refused by the caller's rate limit, runs when it is repeated with the
// same toolCallId once the limit lets it.
func TestPlanRefusedByItsRateLimitIsNotKept(t *testing.T) {
	env := newStoredEnv(t)
	var refuse sync.Mutex
	refusing := true
	env.binder.BindLimit(func(ctx context.Context, caller *registry.Caller, held string, tools []string) error {
		refuse.Lock()
		defer refuse.Unlock()
		if refusing {
			return &registry.Error{Code: registry.CodeTool, Message: "no step ran: the steps are over this caller's rate limit; retry in 1 s"}
		}
		return nil
	})
	call := func() *registry.Result {
		res, _ := env.plan(t, registry.Anonymous(), &registry.Call{ToolCallID: "p2", Arguments: json.RawMessage(`{"steps":[{"tool":"test__write","arguments":{}}]}`)})
		return res
	}
	if res := call(); res.Code() != registry.CodeTool || env.writes() != 0 {
		t.Fatalf("refused plan: %+v, %d writes", res.Error, env.writes())
	}
	refuse.Lock()
	refusing = false
	refuse.Unlock()
	if res := call(); res.Status != registry.StatusOK || env.writes() != 1 {
		t.Fatalf("repeated plan: %+v %+v, %d writes", res, res.Error, env.writes())
	}
}
