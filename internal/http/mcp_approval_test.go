package http

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// approvalEnv serves test__mine (side_effecting; a rule asks for approval
// and lets the caller approve) and test__priv (privileged; the tier
// default asks, approvers only), with an embedded store. Token "user" is
// a caller with the call scope, "oncall" an approver.
type approvalEnv struct {
	*env
	st   *sqlite.Store
	runs atomic.Int64 // runs of test__mine
	// A run of test__mine with n 99 says it started, then waits for
	// release.
	started, release chan struct{}
	// later is how far the executor's clock is ahead of time.Now.
	later atomic.Int64
}

func newApprovalEnv(t *testing.T) *approvalEnv {
	t.Helper()
	st := openStore(t)
	pol, err := policy.New([]policy.Document{{Name: "t", Source: "test.yaml:1", Spec: policy.Spec{Rules: []policy.Rule{
		{Name: "mine", Tools: []string{"test__mine"}, Decision: registry.Ask, Reason: "changes the user's things", CallerMayApprove: true},
	}}}}, policy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ae := &approvalEnv{st: st, started: make(chan struct{}, 1), release: make(chan struct{})}
	mine := &registry.Tool{Definition: registry.Definition{Name: "test__mine", Description: "test test__mine", Tier: registry.SideEffecting,
		Parameters: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			ae.runs.Add(1)
			if string(r.Arguments) == `{"n":99}` {
				ae.started <- struct{}{}
				select {
				case <-ae.release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return fmt.Sprintf("changed %s", r.Arguments), nil
		})}
	ae.env = newEnv(t, func(d *Deps, o *registry.Options) {
		tools := append(testTools(), mine)
		reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
		if err != nil {
			t.Fatal(err)
		}
		o.Registry, o.Store, o.Policy = reg, st, pol
		o.Now = func() time.Time { return time.Now().Add(time.Duration(ae.later.Load())) }
		d.Auth = staticAuth{
			"user":   {ID: "user", Scopes: []registry.Scope{registry.ScopeCall}},
			"oncall": {ID: "oncall", Scopes: []registry.Scope{registry.ScopeCall, registry.ScopeApprove}},
		}
	})
	return ae
}

// approval reads an approval request as the approver sees it.
func (ae *approvalEnv) approval(t *testing.T, id string) registry.Approval {
	t.Helper()
	r := ae.do("GET", "/approvals/"+id, nil, map[string]string{"Authorization": "Bearer oncall"}, true)
	var a registry.Approval
	if r.status != 200 || json.Unmarshal(r.body, &a) != nil {
		t.Fatalf("GET /approvals/%s: %d %s", id, r.status, r.body)
	}
	return a
}

// decide posts an approver's decision.
func (ae *approvalEnv) decide(id, decision string) response {
	return ae.do("POST", "/approvals/"+id, []byte(`{"decision":"`+decision+`","reason":"on call"}`),
		map[string]string{"Authorization": "Bearer oncall", "Content-Type": "application/json"}, true)
}

// elicitations answers the approval elicitations of a client with a
// function of the approval id, and keeps what it was asked.
type elicitations struct {
	answer func(id string) (*mcp.ElicitResult, error)
	mu     sync.Mutex
	asked  []*mcp.ElicitParams
}

func (el *elicitations) handle(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
	el.mu.Lock()
	el.asked = append(el.asked, req.Params)
	el.mu.Unlock()
	var meta struct {
		ID string `json:"id"`
	}
	b, _ := json.Marshal(req.Params.Meta[mcpApprovalMeta])
	_ = json.Unmarshal(b, &meta)
	return el.answer(meta.ID)
}

func (el *elicitations) count() int {
	el.mu.Lock()
	defer el.mu.Unlock()
	return len(el.asked)
}

// session connects a Go SDK client as token at version ("" is the
// newest, 2026-07-28); with el it declares elicitation and answers with it.
func (ae *approvalEnv) session(t *testing.T, token, version string, el *elicitations, o *mcp.ClientOptions) (*mcp.ClientSession, *recordingTransport) {
	t.Helper()
	if o == nil {
		o = &mcp.ClientOptions{}
	}
	if el != nil {
		o.ElicitationHandler = el.handle
	}
	wire := &recordingTransport{token: token}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "approval-test", Version: "1"}, o).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: ae.ts.URL + "/mcp", HTTPClient: &http.Client{Transport: wire}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, wire
}

var pendingText = regexp.MustCompile(`Approval id: (apr_\w+) .* Tool call id: (call_\w+)\.`)

// pendingID is the approval id of today's pending result, or fails.
func pendingID(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	m := pendingText.FindStringSubmatch(resultText(res))
	if !res.IsError || m == nil {
		t.Fatalf("want the pending result, got %s", resultText(res))
	}
	return m[1]
}

func mineCall(n int) *mcp.CallToolParams {
	return &mcp.CallToolParams{Name: "test__mine", Arguments: map[string]any{"n": n}}
}

// TestMCPCallerApprovesOverMCP: at 2026-07-28 a client that can elicit
// gets input_required asking to approve the exact call; accept runs it
// once, and the approval request and the audit trail say the caller
// decided, via MCP.
func TestMCPCallerApprovesOverMCP(t *testing.T) {
	ae := newApprovalEnv(t)
	el := &elicitations{answer: func(string) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"reason": "I asked for it"}}, nil
	}}
	cs, wire := ae.session(t, "user", "", el, nil)
	res, err := cs.CallTool(context.Background(), mineCall(7))
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || resultText(res) != `changed {"n":7}` {
		t.Fatalf("approved call: %s", resultText(res))
	}
	if n := ae.runs.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want 1", n)
	}
	if el.count() != 1 {
		t.Fatalf("elicitations: %d, want 1", el.count())
	}
	asked := el.asked[0]
	for _, want := range []string{"Approve this tool call?", "Tool: test__mine", `Arguments: {"n":7}`, "Rule: t/mine (changes the user's things)", "Approval id: apr_"} {
		if !strings.Contains(asked.Message, want) {
			t.Errorf("elicitation message lacks %q: %s", want, asked.Message)
		}
	}
	if asked.Mode != "form" || !strings.Contains(string(mustJSON(t, asked.RequestedSchema)), `"reason"`) {
		t.Errorf("elicitation form: %s %s", asked.Mode, mustJSON(t, asked.RequestedSchema))
	}
	log := wire.String()
	if !strings.Contains(log, `"resultType":"input_required"`) || !strings.Contains(log, `"method":"elicitation/create"`) || !strings.Contains(log, `"requestState":"apr_`) {
		t.Errorf("the wire lacks the input_required result: %s", log)
	}
	id := regexp.MustCompile(`"requestState":"(apr_\w+)"`).FindStringSubmatch(log)[1]
	a := ae.approval(t, id)
	if a.Status != registry.ApprovalApproved || a.DecidedBy != "user" || a.DecisionReason != "via MCP: I asked for it" || a.CallerID != "user" {
		t.Errorf("approval record: %+v", a)
	}
	audit, err := ae.st.ListAudit(context.Background(), registry.AuditFilter{ToolName: "test__mine"})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, e := range audit {
		events = append(events, fmt.Sprintf("%s/%s/%s/%s", e.Event, e.CallerID, e.Decision, e.Status))
	}
	if got := strings.Join(events, " "); got != "call/user/ask/pending_approval caller-approval/user/allow/ call/user/allow/ok" {
		t.Errorf("audit trail: %s", got)
	}
}

// TestMCPCallerDeclines: decline denies the request with the existing
// denied result; the tool does not run.
func TestMCPCallerDeclines(t *testing.T) {
	ae := newApprovalEnv(t)
	var id string
	el := &elicitations{answer: func(got string) (*mcp.ElicitResult, error) {
		id = got
		return &mcp.ElicitResult{Action: "decline"}, nil
	}}
	cs, _ := ae.session(t, "user", "", el, nil)
	res, err := cs.CallTool(context.Background(), mineCall(1))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(resultText(res), "Error E_APPROVAL_DENIED: ") {
		t.Fatalf("declined call: %s", resultText(res))
	}
	if n := ae.runs.Load(); n != 0 {
		t.Errorf("a declined call ran %d times", n)
	}
	if a := ae.approval(t, id); a.Status != registry.ApprovalDenied || a.DecidedBy != "user" || a.DecisionReason != "via MCP" {
		t.Errorf("approval record: %+v", a)
	}
	// Decided is decided: an approver's later approve runs nothing.
	if r := ae.decide(id, "approve"); r.status != 200 || !strings.Contains(string(r.body), "E_APPROVAL_DENIED") || ae.runs.Load() != 0 {
		t.Errorf("approve after decline: %d %s, runs %d", r.status, r.body, ae.runs.Load())
	}
}

// TestMCPCallerCancels: cancel decides nothing; the request stays pending
// for an approver, whose approve runs the call once.
func TestMCPCallerCancels(t *testing.T) {
	ae := newApprovalEnv(t)
	el := &elicitations{answer: func(string) (*mcp.ElicitResult, error) { return &mcp.ElicitResult{Action: "cancel"}, nil }}
	cs, _ := ae.session(t, "user", "", el, nil)
	res, err := cs.CallTool(context.Background(), mineCall(2))
	if err != nil {
		t.Fatal(err)
	}
	id := pendingID(t, res)
	if a := ae.approval(t, id); a.Status != registry.ApprovalPending || el.count() != 1 {
		t.Fatalf("after cancel: %+v, %d elicitations", a, el.count())
	}
	if r := ae.decide(id, "approve"); r.status != 200 || !strings.Contains(string(r.body), `changed {\"n\":2}`) {
		t.Fatalf("approve: %d %s", r.status, r.body)
	}
	if n := ae.runs.Load(); n != 1 {
		t.Errorf("runs: %d, want 1", n)
	}
	if a := ae.approval(t, id); a.DecidedBy != "oncall" {
		t.Errorf("decided by %q, want oncall", a.DecidedBy)
	}
}

// TestMCPPendingWithoutCallerApproval: a rule without callerMayApprove,
// a client without the elicitation capability and a 2025-11-25 client
// (which this stateless server cannot send elicitation/create) all get
// today's pending result, and nobody is asked.
func TestMCPPendingWithoutCallerApproval(t *testing.T) {
	ae := newApprovalEnv(t)
	never := &elicitations{answer: func(string) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept"}, nil
	}}
	cs, wire := ae.session(t, "user", "", never, nil)
	// The tier default asks for test__priv; only approvers may decide.
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "test__priv", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	pendingID(t, res)
	if strings.Contains(wire.String(), "input_required") {
		t.Errorf("input_required for a rule without callerMayApprove: %s", wire)
	}

	noCap, wire := ae.session(t, "user", "", nil, nil)
	res, err = noCap.CallTool(context.Background(), mineCall(3))
	if err != nil {
		t.Fatal(err)
	}
	id := pendingID(t, res)
	// resultType is in answers of 2026-07-28 only.
	if strings.Contains(wire.String(), "input_required") || !strings.Contains(wire.String(), `"isError":true,"resultType":"complete"`) {
		t.Errorf("client without elicitation: %s", wire)
	}
	if a := ae.approval(t, id); a.Status != registry.ApprovalPending {
		t.Errorf("approval: %+v", a)
	}

	old, wire := ae.session(t, "user", "2025-11-25", never, nil)
	res, err = old.CallTool(context.Background(), mineCall(4))
	if err != nil {
		t.Fatal(err)
	}
	pendingID(t, res)
	if !strings.Contains(wire.String(), `"protocolVersion":"2025-11-25"`) || strings.Contains(wire.String(), "resultType") {
		t.Errorf("2025-11-25 client: %s", wire)
	}
	if never.count() != 0 || ae.runs.Load() != 0 {
		t.Errorf("asked %d times, ran %d times; want neither", never.count(), ae.runs.Load())
	}
}

// TestMCPCallerAndApproverRace: an approver's POST /approvals/{id} and
// the caller's accept race for the same request: one decides, the other
// sees it decided, and the call runs once. First with the approver
// deciding before the answer, then the caller deciding before the
// approver, then both at once.
func TestMCPCallerAndApproverRace(t *testing.T) {
	ae := newApprovalEnv(t)
	var post response
	el := &elicitations{answer: func(id string) (*mcp.ElicitResult, error) {
		post = ae.decide(id, "approve")
		return &mcp.ElicitResult{Action: "accept"}, nil
	}}
	cs, _ := ae.session(t, "user", "", el, nil)
	res, err := cs.CallTool(context.Background(), mineCall(10))
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || resultText(res) != `changed {"n":10}` || post.status != 200 || !strings.Contains(string(post.body), `changed {\"n\":10}`) {
		t.Fatalf("approver first: mcp %s; POST %d %s", resultText(res), post.status, post.body)
	}
	if n := ae.runs.Load(); n != 1 {
		t.Fatalf("approver first: ran %d times", n)
	}

	// The caller first: the tool runs on the caller's accept, and the
	// approver's approve meanwhile finds the request decided and answers
	// with the same result.
	ae.runs.Store(0)
	var (
		id  string
		got = make(chan *mcp.CallToolResult, 1)
	)
	el.answer = func(a string) (*mcp.ElicitResult, error) {
		id = a
		return &mcp.ElicitResult{Action: "accept"}, nil
	}
	go func() {
		res, err := cs.CallTool(context.Background(), mineCall(99))
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	select {
	case <-ae.started:
	case <-time.After(time.Minute):
		t.Fatal("the accepted call did not start within a minute")
	}
	posted := make(chan response, 1)
	go func() { posted <- ae.decide(id, "approve") }()
	close(ae.release)
	res, post = <-got, <-posted
	if res == nil || res.IsError || resultText(res) != `changed {"n":99}` || post.status != 200 || !strings.Contains(string(post.body), `changed {\"n\":99}`) {
		t.Fatalf("caller first: mcp %+v; POST %d %s", res, post.status, post.body)
	}
	if a := ae.approval(t, id); a.DecidedBy != "user" || ae.runs.Load() != 1 {
		t.Fatalf("caller first: decided by %q, ran %d times", a.DecidedBy, ae.runs.Load())
	}

	// At once.
	for i := range 4 {
		ae.runs.Store(0)
		var (
			wg    sync.WaitGroup
			id    string
			posts response
		)
		el.answer = func(got string) (*mcp.ElicitResult, error) {
			id = got
			wg.Add(1)
			go func() { defer wg.Done(); posts = ae.decide(got, "approve") }()
			return &mcp.ElicitResult{Action: "accept"}, nil
		}
		res, err := cs.CallTool(context.Background(), mineCall(20+i))
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`changed {"n":%d}`, 20+i)
		if res.IsError || resultText(res) != want || posts.status != 200 || !strings.Contains(string(posts.body), strings.ReplaceAll(want, `"`, `\"`)) {
			t.Errorf("race %d: mcp %s; POST %d %s", i, resultText(res), posts.status, posts.body)
		}
		if n := ae.runs.Load(); n != 1 {
			t.Errorf("race %d: ran %d times, want 1", i, n)
		}
		if a := ae.approval(t, id); a.Status != registry.ApprovalApproved || (a.DecidedBy != "user" && a.DecidedBy != "oncall") {
			t.Errorf("race %d: approval %+v", i, a)
		}
	}
}

// TestMCPAnswerMustFitTheCall: a retry whose requestState names another
// call's request, another caller's, or whose answer is missing is a
// protocol error, and decides nothing.
func TestMCPAnswerMustFitTheCall(t *testing.T) {
	ae := newApprovalEnv(t)
	manual := &mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}
	el := &elicitations{answer: func(string) (*mcp.ElicitResult, error) { return nil, errors.New("not used") }}
	cs, _ := ae.session(t, "user", "", el, manual)
	ctx := context.Background()
	first, err := cs.CallTool(ctx, mineCall(5))
	if err != nil {
		t.Fatal(err)
	}
	if !first.NeedsInput() || first.RequestState == "" || len(first.Content) != 0 {
		t.Fatalf("first round: %+v", first)
	}
	if _, ok := first.InputRequests[mcpApprovalInput].(*mcp.ElicitParams); !ok {
		t.Fatalf("input requests: %+v", first.InputRequests)
	}
	accept := mcp.InputResponseMap{mcpApprovalInput: &mcp.ElicitResult{Action: "accept"}}
	retry := func(cs *mcp.ClientSession, args map[string]any, state string, answers mcp.InputResponseMap) error {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__mine", Arguments: args, RequestState: state, InputResponses: answers})
		return err
	}
	other, _ := ae.session(t, "oncall", "", el, manual)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"other arguments", retry(cs, map[string]any{"n": 6}, first.RequestState, accept), "is for another call"},
		{"unknown request", retry(cs, map[string]any{"n": 5}, "apr_000", accept), `names no approval request of this caller`},
		{"another caller", retry(other, map[string]any{"n": 5}, first.RequestState, accept), `names no approval request of this caller`},
		{"no answer", retry(cs, map[string]any{"n": 5}, first.RequestState, mcp.InputResponseMap{}), `lacks "approval"`},
		{"no state", retry(cs, map[string]any{"n": 5}, "", accept), "without requestState"},
	} {
		var je *jsonrpc.Error
		if !errors.As(tc.err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, tc.want) {
			t.Errorf("%s: %v, want -32602 with %q", tc.name, tc.err, tc.want)
		}
	}
	if a := ae.approval(t, first.RequestState); a.Status != registry.ApprovalPending || ae.runs.Load() != 0 {
		t.Fatalf("after refused answers: %+v, runs %d", a, ae.runs.Load())
	}
	// The fitting answer decides, once; answering again runs nothing more.
	for range 2 {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test__mine", Arguments: map[string]any{"n": 5}, RequestState: first.RequestState, InputResponses: accept})
		if err != nil || res.IsError || resultText(res) != `changed {"n":5}` {
			t.Fatalf("fitting answer: %v %+v", err, res)
		}
	}
	if n := ae.runs.Load(); n != 1 {
		t.Errorf("runs: %d, want 1", n)
	}
}

// TestMCPAnswerAfterExpiry: an accept that comes after the request
// expired decides nothing and runs nothing: the answer is
// E_APPROVAL_EXPIRED.
func TestMCPAnswerAfterExpiry(t *testing.T) {
	ae := newApprovalEnv(t)
	var id string
	el := &elicitations{answer: func(got string) (*mcp.ElicitResult, error) {
		id = got
		ae.later.Store(int64(16 * time.Minute)) // past the default 15 minutes
		return &mcp.ElicitResult{Action: "accept"}, nil
	}}
	cs, _ := ae.session(t, "user", "", el, nil)
	res, err := cs.CallTool(context.Background(), mineCall(8))
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(resultText(res), "Error E_APPROVAL_EXPIRED: ") || ae.runs.Load() != 0 {
		t.Fatalf("accept after expiry: %s, runs %d", resultText(res), ae.runs.Load())
	}
	if a := ae.approval(t, id); a.Status != registry.ApprovalExpired || a.DecidedBy != "" {
		t.Errorf("approval: %+v", a)
	}
}
