package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// callerApprovalConfig is a policy that lets the caller approve writes
// under notes/ themselves, and two callers: agent (calls) and oncall
// (approves).
const callerApprovalConfig = `apiVersion: toolsvc/v1
kind: Policy
metadata: {name: people}
spec:
  rules:
    - name: notes-ask-the-user
      tools: ["fs__write"]
      condition: 'args.path.startsWith("notes/")'
      decision: ask
      callerMayApprove: true
      reason: writes the user's notes
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: agent}
spec:
  tokenSha256: eb47b9ce4840a5b3ea138b8691253b78035b9289d9014409067e9844c272ef99 # "agent-token"
  scopes: [call]
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: oncall}
spec:
  tokenSha256: d46538dc7de07d04913624720ec6ad07c7f42b1f0f8a00bff24261fd770620f4 # "oncall-token"
  scopes: [call, approve]
`

type tokenTransport string

func (tok tokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(tok))
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPCallerApproval runs the binary's wiring with a policy file that
// sets callerMayApprove: a Go SDK client at 2026-07-28 that answers the
// elicitation approves (the file is written once, the approval request
// says agent decided it via MCP) or declines (E_APPROVAL_DENIED, nothing
// written); a client that cannot answer gets the pending result.
func TestMCPCallerApproval(t *testing.T) {
	dir, ws := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(callerApprovalConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	in := start(t, "TOOLSVC_CONFIG="+dir, "TOOLSVC_WORKSPACE="+ws)
	var (
		mu     sync.Mutex
		action string
		ids    []string
	)
	answer := func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, regexp.MustCompile(`Approval id: (apr_\w+)`).FindStringSubmatch(req.Params.Message)[1])
		if !strings.Contains(req.Params.Message, "Tool: fs__write") || !strings.Contains(req.Params.Message, "people/notes-ask-the-user") {
			t.Errorf("elicitation: %s", req.Params.Message)
		}
		return &mcp.ElicitResult{Action: action}, nil
	}
	connect := func(o *mcp.ClientOptions) *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "approval-test", Version: "1"}, o).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: in.base + "/mcp", HTTPClient: &http.Client{Transport: tokenTransport("agent-token")}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	text := func(r *mcp.CallToolResult) string {
		if len(r.Content) == 0 {
			return ""
		}
		return r.Content[0].(*mcp.TextContent).Text
	}
	approval := func(id string) registry.Approval {
		req, _ := http.NewRequest("GET", in.base+"/approvals/"+id, nil)
		req.Header.Set("Authorization", "Bearer oncall-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var a registry.Approval
		if resp.StatusCode != 200 || json.Unmarshal(b, &a) != nil {
			t.Fatalf("GET /approvals/%s: %d %s", id, resp.StatusCode, b)
		}
		return a
	}
	notes := filepath.Join(ws, "callers", "agent", "default", "notes")
	cs := connect(&mcp.ClientOptions{ElicitationHandler: answer})
	ctx := context.Background()

	action = "accept"
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fs__write", Arguments: map[string]any{"path": "notes/a.txt", "content": "yes"}})
	if err != nil || res.IsError {
		t.Fatalf("accepted write: %v %s\n%s", err, text(res), in.logs)
	}
	if got := readFile(t, filepath.Join(notes, "a.txt")); got != "yes" {
		t.Errorf("notes/a.txt = %q", got)
	}
	if a := approval(ids[0]); a.Status != registry.ApprovalApproved || a.DecidedBy != "agent" || a.DecisionReason != "via MCP" {
		t.Errorf("approval after accept: %+v", a)
	}

	action = "decline"
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fs__write", Arguments: map[string]any{"path": "notes/b.txt", "content": "no"}})
	if err != nil || !res.IsError || !strings.HasPrefix(text(res), "Error E_APPROVAL_DENIED: ") {
		t.Fatalf("declined write: %v %s", err, text(res))
	}
	if _, err := os.Stat(filepath.Join(notes, "b.txt")); !os.IsNotExist(err) {
		t.Errorf("a declined write wrote notes/b.txt: %v", err)
	}
	if a := approval(ids[1]); a.Status != registry.ApprovalDenied || a.DecidedBy != "agent" {
		t.Errorf("approval after decline: %+v", a)
	}

	// Without the elicitation capability: the pending result.
	res, err = connect(nil).CallTool(ctx, &mcp.CallToolParams{Name: "fs__write", Arguments: map[string]any{"path": "notes/c.txt", "content": "later"}})
	m := regexp.MustCompile(`Approval id: (apr_\w+)`).FindStringSubmatch(text(res))
	if err != nil || !res.IsError || m == nil || !strings.Contains(text(res), "has not run yet") {
		t.Fatalf("client without elicitation: %v %s", err, text(res))
	}
	if a := approval(m[1]); a.Status != registry.ApprovalPending || len(ids) != 2 {
		t.Errorf("pending approval: %+v, %d elicitations", a, len(ids))
	}
}

// TestCallerMayApproveNeedsAsk: callerMayApprove on a rule that does not
// ask stops start-up with the file, line and rule.
func TestCallerMayApproveNeedsAsk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	bad := strings.Replace(callerApprovalConfig, "decision: ask", "decision: deny", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"toolsvc", "validate"}, []string{"TOOLSVC_CONFIG=" + path, "TOOLSVC_WORKSPACE=" + t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "p.yaml:6") || !strings.Contains(err.Error(), `"notes-ask-the-user"`) ||
		!strings.Contains(err.Error(), "callerMayApprove is set, but the decision is deny") {
		t.Errorf("validate: %v", err)
	}
}
