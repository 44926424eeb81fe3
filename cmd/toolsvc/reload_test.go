package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// mcpStdioServer is an MCP server over stdio for the tests: the test
// binary runs as one when its first argument is "mcp-stdio-server".
func mcpStdioServer() int {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "1"}, nil)
	type in struct {
		Message string `json:"message"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Echo a message.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + a.Message}}}, nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "pid", Description: "The server's process id.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, a struct{}) (*mcp.CallToolResult, map[string]int, error) {
			return nil, map[string]int{"pid": os.Getpid()}, nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// configDir is a directory of resources for a test.
type configDir struct {
	t   *testing.T
	dir string
}

func newConfigDir(t *testing.T) *configDir { return &configDir{t: t, dir: t.TempDir()} }

func (c *configDir) write(name, content string, mode os.FileMode) {
	c.t.Helper()
	// Write and rename, as editors and deployments do, so a reader never
	// sees half a file.
	tmp := filepath.Join(c.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), mode); err != nil {
		c.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, name)); err != nil {
		c.t.Fatal(err)
	}
}

func lookSh(t *testing.T) string {
	t.Helper()
	sh, err := sandbox.LookPath("sh")
	if err != nil {
		t.Skip("no sh in", sandbox.DefaultPath)
	}
	return sh
}

// demoTool declares demo__{exports}, each running the script ./{export}.sh.
func demoTool(exports ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: demo}\nspec:\n  tier: read_only\n  exec:\n    command: [./run.sh]\n    allowExec: [sleep]\n  exports:\n")
	for _, e := range exports {
		fmt.Fprintf(&b, "    - name: %s\n      description: The %s export.\n", e, e)
	}
	return b.String()
}

// runScript answers by export: hello and bye print their version, wait
// marks that it started and waits for the file "go" in its workspace.
func runScript(sh, version string) string {
	return "#!" + sh + `
read -r envelope
case "$envelope" in
  *'"export":"wait"'*)
    : > started
    while [ ! -e go ]; do sleep 0.02; done
    echo '"waited"' ;;
  *'"export":"hello"'*) echo '"hello ` + version + `"' ;;
  *) echo '"bye ` + version + `"' ;;
esac
`
}

func testEnviron(t *testing.T, dir string, extra ...string) (Config, string) {
	t.Helper()
	ws := t.TempDir()
	cfg, err := loadConfig(append([]string{"TOOLSVC_CONFIG=" + dir, "TOOLSVC_WORKSPACE=" + ws}, extra...))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, ws
}

func execCall(t *testing.T, e *registry.Executor, name string) *registry.Result {
	t.Helper()
	res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: name})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// testReloader builds the service of the configuration in dir as serve
// does, with its executor and reloader; logs collects what it logs, and
// ws is its workspace.
func testReloader(t *testing.T, dir string) (rl *reloader, exec *registry.Executor, logs *logtest.Buffer, ws string) {
	t.Helper()
	cfg, ws := testEnviron(t, dir)
	logs = &logtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	mgr := newMCPManager(cfg, log, make(chan struct{}, 1))
	t.Cleanup(mgr.Close)
	a, err := build(cfg, log, mgr, nil)
	if err != nil {
		t.Fatal(err)
	}
	exec = registry.NewExecutor(registry.Options{Registry: a.registry, Policy: a.policy})
	return newReloader(cfg, log, exec, nil, mgr, prometheus.NewRegistry(), a), exec, logs, ws
}

// TestReload drives a reload directly, as SIGHUP and file watching do.
func TestReload(t *testing.T) {
	sh := lookSh(t)
	c := newConfigDir(t)
	c.write("run.sh", runScript(sh, "v1"), 0o755)
	c.write("tools.yaml", demoTool("hello", "wait"), 0o644)
	rl, exec, logs, ws := testReloader(t, c.dir)

	if res := execCall(t, exec, "demo__hello"); string(res.Output) != `"hello v1"` {
		t.Fatalf("before reload: %s %+v", res.Output, res.Error)
	}

	// A call that runs across reloads.
	inflight := make(chan *registry.Result, 1)
	go func() { inflight <- execCall(t, exec, "demo__wait") }()
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(ws, "callers/anonymous/default", "started")); err == nil {
			break
		}
		if i > 1500 {
			t.Fatal("the waiting call never started")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A broken configuration: the running one stays.
	c.write("broken.yaml", "apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: broken}\nspec:\n  tier: read_only\n  exec: {command: [./run.sh]}\n  exprots: []\n", 0o644)
	err := rl.Reload()
	if err == nil || !strings.Contains(err.Error(), "broken.yaml") || !strings.Contains(err.Error(), "line 7") {
		t.Fatalf("broken configuration: %v", err)
	}
	if got := testutil.ToFloat64(rl.reloads.WithLabelValues("error")); got != 1 {
		t.Errorf("error reloads counted: %v", got)
	}
	if !strings.Contains(logs.String(), "the running configuration stays") {
		t.Errorf("the failed reload is not logged:\n%s", logs)
	}
	if res := execCall(t, exec, "demo__hello"); string(res.Output) != `"hello v1"` {
		t.Errorf("after a failed reload: %s %+v", res.Output, res.Error)
	}

	// A good one: new script, demo__bye added, demo__wait removed.
	if err := os.Remove(filepath.Join(c.dir, "broken.yaml")); err != nil {
		t.Fatal(err)
	}
	c.write("run.sh", runScript(sh, "v2"), 0o755)
	c.write("tools.yaml", demoTool("hello", "bye"), 0o644)
	if err := rl.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(rl.reloads.WithLabelValues("ok")); got != 1 {
		t.Errorf("ok reloads counted: %v", got)
	}
	if res := execCall(t, exec, "demo__bye"); string(res.Output) != `"bye v2"` {
		t.Errorf("new export: %s %+v", res.Output, res.Error)
	}
	if res := execCall(t, exec, "demo__wait"); res.Code() != registry.CodeToolNotFound {
		t.Errorf("removed export: %+v", res.Error)
	}
	// The call that started before the reloads finishes on its definition.
	if err := os.WriteFile(filepath.Join(ws, "callers/anonymous/default", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res := <-inflight; res.Status != registry.StatusOK || string(res.Output) != `"waited"` {
		t.Errorf("in-flight call across reloads: %s %+v", res.Output, res.Error)
	}
}

// getTools returns the names in GET /tools and its ETag.
func (in *instance) getTools() ([]string, string) {
	in.t.Helper()
	resp, err := http.Get(in.base + "/tools")
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	var cat struct{ Tools []struct{ Name string } }
	if err := json.NewDecoder(resp.Body).Decode(&cat); err != nil {
		in.t.Fatal(err)
	}
	var names []string
	for _, t := range cat.Tools {
		names = append(names, t.Name)
	}
	return names, resp.Header.Get("ETag")
}

func (in *instance) get(path string) string {
	in.t.Helper()
	resp, err := http.Get(in.base + path)
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (in *instance) waitFor(what string, cond func() bool) {
	in.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			in.t.Fatalf("timed out waiting for %s\n%s", what, in.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func mcpServerDoc(name string) string {
	exe, _ := os.Executable()
	return fmt.Sprintf("apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: %s}\nspec:\n  stdio:\n    command: %q\n    args: [mcp-stdio-server]\n", name, exe)
}

func (in *instance) mcpPid() float64 {
	in.t.Helper()
	_, res := in.post("/calls", `{"toolName":"local__pid","arguments":{}}`)
	out, _ := res["output"].(map[string]any)
	pid, _ := out["pid"].(float64)
	if pid == 0 {
		in.t.Fatalf("local__pid: %v", res)
	}
	return pid
}

// TestSIGHUP reloads a serving instance with a real SIGHUP, sent to this
// test process. The test listens for SIGHUP itself first, so the signal
// can never take the default action (ending the process).
func TestSIGHUP(t *testing.T) {
	sh := lookSh(t)
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, syscall.SIGHUP)
	defer signal.Stop(mine)

	c := newConfigDir(t)
	c.write("run.sh", runScript(sh, "v1"), 0o755)
	c.write("tools.yaml", demoTool("hello"), 0o644)
	c.write("mcp.yaml", mcpServerDoc("local"), 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir)
	names, etag1 := in.getTools()
	if !contains(names, "demo__hello") || !contains(names, "local__echo") || contains(names, "demo__bye") {
		t.Fatalf("catalog: %v", names)
	}
	if _, res := in.post("/calls", `{"toolName":"local__echo","arguments":{"message":"hi"}}`); res["output"] != "echo: hi" {
		t.Errorf("MCP tool: %v", res)
	}
	pid := in.mcpPid()

	c.write("tools.yaml", demoTool("hello", "bye"), 0o644)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var etag2 string
	in.waitFor("the reload", func() bool {
		names, etag2 = in.getTools()
		return contains(names, "demo__bye")
	})
	if etag2 == etag1 || etag2 == "" {
		t.Errorf("ETag did not change: %s -> %s", etag1, etag2)
	}
	if !strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="ok"} 1`) {
		t.Error("the reload is not counted")
	}
	if p := in.mcpPid(); p != pid {
		t.Errorf("the unchanged MCP server was restarted: pid %v, was %v", p, pid)
	}
	if ready := in.get("/readyz"); !strings.Contains(ready, `"local":{"state":"connected","transport":"stdio","tools":2`) {
		t.Errorf("readyz: %s", ready)
	}
}

func TestWatchReloads(t *testing.T) {
	sh := lookSh(t)
	c := newConfigDir(t)
	c.write("run.sh", runScript(sh, "v1"), 0o755)
	c.write("tools.yaml", demoTool("hello"), 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_WATCH=true")
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })

	c.write("tools.yaml", demoTool("hello", "bye"), 0o644)
	in.waitFor("the reload", func() bool { names, _ := in.getTools(); return contains(names, "demo__bye") })

	// A broken edit is refused, counted, and the catalog stays.
	c.write("tools.yaml", demoTool("hello", "bye")+"  bogus: true\n", 0o644)
	in.waitFor("the failed reload", func() bool {
		return strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="error"} 1`)
	})
	if names, _ := in.getTools(); !contains(names, "demo__bye") {
		t.Errorf("catalog after a broken edit: %v", names)
	}
}

func TestUnreachableMCPServerDoesNotStopTheService(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newConfigDir(t)
	c.write("mcp.yaml", "apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: down}\nspec:\n  http: {url: \"http://"+addr+"/mcp\"}\n", 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_MCP_CONNECT_TIMEOUT=2s")
	resp, err := http.Get(in.base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct {
		Status  string
		Details struct {
			MCP map[string]struct{ State, Error string }
		}
	}
	_ = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != 200 || ready.Details.MCP["down"].State != "unreachable" || ready.Details.MCP["down"].Error == "" {
		t.Errorf("readyz: %d %+v", resp.StatusCode, ready)
	}
	if names, _ := in.getTools(); contains(names, "down__echo") || !contains(names, "text__transform") {
		t.Errorf("catalog: %v", names)
	}
}

func TestValidateCustomResources(t *testing.T) {
	sh := lookSh(t)
	c := newConfigDir(t)
	c.write("run.sh", runScript(sh, "v1"), 0o755)
	c.write("tools.yaml", demoTool("hello", "bye"), 0o644)
	c.write("mcp.yaml", mcpServerDoc("local"), 0o644)
	var out strings.Builder
	env := []string{"TOOLSVC_CONFIG=" + c.dir, "TOOLSVC_WORKSPACE=" + t.TempDir()}
	if err := run(context.Background(), []string{"toolsvc", "validate"}, env, &out, io.Discard); err != nil || out.String() != "configuration OK: 16 tools and 1 MCP servers (not contacted)\n" {
		t.Errorf("validate: %v %q", err, out.String())
	}
	c.write("clash.yaml", mcpServerDoc("demo"), 0o644)
	err := run(context.Background(), []string{"toolsvc", "validate"}, env, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "the name demo is also used by the resource at") {
		t.Errorf("name clash: %v", err)
	}
}

func callerDoc(name, sha string) string {
	return "apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: " + name + "}\nspec:\n  tokenSha256: " + sha + "\n  scopes: [call]\n"
}

// TestReloadCallers: a reload replaces the callers, and refuses to turn
// authentication off.
func TestReloadCallers(t *testing.T) {
	const agent = "eb47b9ce4840a5b3ea138b8691253b78035b9289d9014409067e9844c272ef99"  // "agent-token"
	const oncall = "d46538dc7de07d04913624720ec6ad07c7f42b1f0f8a00bff24261fd770620f4" // "oncall-token"
	c := newConfigDir(t)
	c.write("callers.yaml", callerDoc("agent", agent), 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_WATCH=true")
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })
	if status, _ := in.as("agent-token", "GET", "/tools", ""); status != 200 {
		t.Fatalf("agent before the reload: %d", status)
	}
	c.write("callers.yaml", callerDoc("oncall", oncall), 0o644)
	in.waitFor("the new callers", func() bool { status, _ := in.as("oncall-token", "GET", "/tools", ""); return status == 200 })
	if status, _ := in.as("agent-token", "GET", "/tools", ""); status != 401 {
		t.Errorf("removed caller after the reload: %d", status)
	}
	// No caller left (a policy instead: a file emptied is refused for that).
	c.write("callers.yaml", "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: p}\nspec: {}\n", 0o644)
	in.waitFor("the refused reload", func() bool {
		return strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="error"} 1`)
	})
	if !strings.Contains(in.logs.String(), "turns authentication off") {
		t.Errorf("refusal not logged:\n%s", in.logs)
	}
	if status, _ := in.as("", "GET", "/tools", ""); status != 401 {
		t.Errorf("anonymous request after a refused reload: %d", status)
	}
}

// TestMCPChangesArePaced: changes of the MCP servers' tools that come
// without pause are rebuilt into the catalog at a pace: the first at
// once, the ones that came meanwhile as one rebuild after it.
func TestMCPChangesArePaced(t *testing.T) {
	rl, _, logs, _ := testReloader(t, newConfigDir(t).dir)
	signals := make(chan struct{})
	stop := rl.start(context.Background(), nil, signals)
	defer stop()
	sent := time.Now()
	for range 20 {
		signals <- struct{}{}
	}
	if d := time.Since(sent); d > 500*time.Millisecond {
		t.Skipf("sending the changes took %s, as long as the pace: the machine is too busy to tell", d)
	}
	rebuilds := func() int { return strings.Count(logs.String(), "MCP tools changed; catalog rebuilt") }
	for i := 0; rebuilds() < 2; i++ {
		if i > 500 {
			t.Fatalf("%d rebuilds after 20 changes; want 2 (the first, then the rest as one)", rebuilds())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(1500 * time.Millisecond) // the pace after the second
	if n := rebuilds(); n != 2 {
		t.Errorf("%d rebuilds for 20 changes at once; want 2", n)
	}
}
