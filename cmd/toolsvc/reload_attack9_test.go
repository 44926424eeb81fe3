package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// slowMCPServer is an MCP server over HTTP that answers nothing until
// release is called: a reload that adds it waits for its first answer
// (up to TOOLSVC_MCP_CONNECT_TIMEOUT), as a reload waits on a slow volume.
// arrived receives once it was asked.
func slowMCPServer(t *testing.T) (doc string, arrived <-chan struct{}, release func()) {
	t.Helper()
	asked := make(chan struct{}, 1)
	gate := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- struct{}{}:
		default:
		}
		select {
		case <-gate:
		case <-r.Context().Done():
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release) // before srv.Close, which waits for the handler
	return "apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: slow}\nspec:\n  http: {url: \"" + srv.URL + "/mcp\"}\n", asked, release
}

// slowReloader is testReloader with a connect timeout long enough for a
// reload that adds slowMCPServer to wait until it is released.
func slowReloader(t *testing.T, dir string) (*reloader, *registry.Executor, *logtest.Buffer) {
	t.Helper()
	cfg, _ := testEnviron(t, dir, "TOOLSVC_MCP_CONNECT_TIMEOUT=120s")
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, nil))
	mgr := newMCPManager(cfg, log, make(chan struct{}, 1))
	t.Cleanup(mgr.Close)
	a, err := build(cfg, log, mgr, nil)
	if err != nil {
		t.Fatal(err)
	}
	exec := registry.NewExecutor(registry.Options{Registry: a.registry, Policy: a.policy})
	return newReloader(cfg, log, exec, nil, mgr, prometheus.NewRegistry(), a), exec, logs
}

func waitLog(t *testing.T, logs *logtest.Buffer, what string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(logs.String(), what) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%q not logged %d times:\n%s", what, n, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func denyTransform(name string) string {
	return "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: " + name + "}\nspec:\n  rules:\n" +
		"    - {name: no-transform, tools: [text__transform], decision: deny, reason: not today}\n"
}

func emptyPolicy(name string) string {
	return "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: " + name + "}\nspec: {}\n"
}

const transformCall = `{"toolName":"text__transform","arguments":{"operation":"upper","text":"x"}}`

// TestStopDoesNotWaitForASlowReload: before, stopping waited for the
// reload in progress without end: a reload blocked reading a FIFO in the
// configuration directory kept the process alive after "stopped" until
// SIGKILL, and a slow one was applied after "stopped".
func TestStopDoesNotWaitForASlowReload(t *testing.T) {
	c := newConfigDir(t)
	c.write("policy.yaml", emptyPolicy("p"), 0o644)
	rl, _, logs := slowReloader(t, c.dir)
	doc, arrived, release := slowMCPServer(t)
	hup := make(chan os.Signal, 1)
	stop := rl.start(context.Background(), hup, nil)
	c.write("mcp.yaml", doc, 0o644)
	hup <- syscall.SIGHUP
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the reload never asked the MCP server:\n%s", logs)
	}

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatalf("stop waited for the reload in progress:\n%s", logs)
	}
	waitLog(t, logs, "stopping with a configuration reload still reading its files", 1)

	// The reload ends after the stop: nothing of it is applied.
	release()
	waitLog(t, logs, "it was not applied", 1)
	if strings.Contains(logs.String(), "configuration reloaded") || testutil.ToFloat64(rl.reloads.WithLabelValues("ok")) != 0 {
		t.Errorf("a reload was applied after the stop:\n%s", logs)
	}
	rl.mu.Lock()
	servers := rl.cur.mcp.Servers()
	rl.mu.Unlock()
	if len(servers) != 0 {
		t.Errorf("the running configuration took the reload's MCP servers: %v", servers)
	}
	if err := rl.Reload(); err == nil || !strings.Contains(err.Error(), "the service is stopping") {
		t.Errorf("a reload after the stop: %v", err)
	}
}

// TestSIGHUPDuringASlowReloadIsQueued: before, a SIGHUP that came while a
// reload ran was dropped without a word (after the one the signal channel
// held). Now each is logged, and together they come to one more reload
// after the running one, which reads what changed meanwhile.
func TestSIGHUPDuringASlowReloadIsQueued(t *testing.T) {
	c := newConfigDir(t)
	c.write("policy.yaml", emptyPolicy("p"), 0o644)
	rl, exec, logs := slowReloader(t, c.dir)
	doc, arrived, release := slowMCPServer(t)
	hup := make(chan os.Signal, 1)
	stop := rl.start(context.Background(), hup, nil)
	defer stop()
	c.write("mcp.yaml", doc, 0o644)
	hup <- syscall.SIGHUP
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatalf("the reload never asked the MCP server:\n%s", logs)
	}
	c.write("policy.yaml", denyTransform("p"), 0o644)
	for i := range 3 {
		hup <- syscall.SIGHUP
		waitLog(t, logs, "SIGHUP while a configuration reload is running; another reload follows when it ends", i+1)
	}
	release()
	deadline := time.Now().Add(30 * time.Second)
	for testutil.ToFloat64(rl.reloads.WithLabelValues("ok")) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the queued reload did not run:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "changes came during the last reload: reloading the configuration"); n != 1 {
		t.Errorf("%d reloads after the slow one for 3 SIGHUPs during it; want 1:\n%s", n, logs)
	}
	res, err := exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "text__transform", Arguments: []byte(`{"operation":"upper","text":"x"}`)})
	if err != nil || res.Code() != registry.CodePolicyDenied {
		t.Errorf("the rule written during the slow reload is not in force: %v %+v", err, res)
	}
}

// TestWatchRefusesAnEmptiedFile: before, a policy file truncated in place
// (`: > policy.yaml`, or an editor or copy between truncating and
// writing) was reloaded as it was, and its deny rule was gone.
func TestWatchRefusesAnEmptiedFile(t *testing.T) {
	c := newConfigDir(t)
	c.write("policy.yaml", denyTransform("p"), 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_WATCH=true")
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })
	if _, r := in.as("", "POST", "/calls", transformCall); r.code() != "E_POLICY_DENIED" {
		t.Fatalf("before: %s", r.code())
	}
	if err := os.WriteFile(filepath.Join(c.dir, "policy.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	in.waitFor("the refused reload", func() bool {
		return strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="error"} 1`)
	})
	if !strings.Contains(in.logs.String(), `"level":"WARN","msg":"configuration reload refused; the running configuration stays","file":"`+filepath.Join(c.dir, "policy.yaml")) ||
		!strings.Contains(in.logs.String(), "held 1 resource and now holds none") {
		t.Errorf("refusal not logged with the file:\n%s", in.logs)
	}
	if _, r := in.as("", "POST", "/calls", transformCall); r.code() != "E_POLICY_DENIED" {
		t.Errorf("the deny rule of the emptied file is gone: %s", r.code())
	}
	// Deleting the file removes its resources.
	if err := os.Remove(filepath.Join(c.dir, "policy.yaml")); err != nil {
		t.Fatal(err)
	}
	in.waitFor("the reload", func() bool {
		return strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="ok"} 1`)
	})
	if _, r := in.as("", "POST", "/calls", transformCall); r.Status != "ok" {
		t.Errorf("after the file was deleted: %s", r.code())
	}
}

// TestWatchRereadsAFileBeingWritten: before, the watcher reloaded a file
// once 300 ms passed without an event, so a writer that paused longer
// got half its file loaded: here the policy without its deny rule. Now
// the changed files are read until two reads agree.
func TestWatchRereadsAFileBeingWritten(t *testing.T) {
	c := newConfigDir(t)
	full := emptyPolicy("a") + "---\n" + denyTransform("b")
	c.write("policy.yaml", full, 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_WATCH=true", "TOOLSVC_LOG_LEVEL=debug")
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })
	// Written again in place, in two parts, with a pause between them
	// that outlasts the quiet period: the first part has no deny rule.
	f, err := os.OpenFile(filepath.Join(c.dir, "policy.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	half := emptyPolicy("a") + "---\n"
	if _, err := f.WriteString(half); err != nil {
		t.Fatal(err)
	}
	in.waitFor("the first read", func() bool {
		logs := in.logs.String()
		return strings.Contains(logs, "reading them again after a quiet period") || strings.Contains(logs, "configuration reloaded")
	})
	if _, err := f.WriteString(full[len(half):]); err != nil {
		t.Fatal(err)
	}
	in.waitFor("the reload of the whole file", func() bool {
		_, r := in.as("", "POST", "/calls", transformCall)
		return r.code() == "E_POLICY_DENIED" && strings.Contains(in.logs.String(), "configuration reloaded")
	})
	if n := strings.Count(in.logs.String(), "configuration reloaded"); n != 1 {
		t.Errorf("%d reloads; want 1, of the whole file:\n%s", n, in.logs)
	}
}

// TestWatchFollowsTheDirectoryReplaced: before, removing and recreating
// the configuration directory (rsync --delete, Ansible, CI) lost its
// watch for good: one reload failed "no such file", and no edit after
// was reloaded.
func TestWatchFollowsTheDirectoryReplaced(t *testing.T) {
	c := newConfigDir(t)
	c.write("policy.yaml", emptyPolicy("p"), 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_WATCH=true")
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })
	if err := os.RemoveAll(c.dir); err != nil {
		t.Fatal(err)
	}
	in.waitFor("the warning", func() bool { return strings.Contains(in.logs.String(), "a configuration directory is gone") })
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	c.write("policy.yaml", denyTransform("p"), 0o644)
	in.waitFor("the reload of the new directory", func() bool {
		_, r := in.as("", "POST", "/calls", transformCall)
		return r.code() == "E_POLICY_DENIED"
	})
	// Watched again: a later edit reloads.
	c.write("policy.yaml", emptyPolicy("p"), 0o644)
	in.waitFor("the reload of an edit", func() bool {
		_, r := in.as("", "POST", "/calls", transformCall)
		return r.Status == "ok"
	})
	if strings.Contains(in.get("/metrics"), `toolsvc_config_reloads_total{result="error"} 1`) {
		t.Errorf("a reload failed while the directory was gone:\n%s", in.logs)
	}
}

// TestWatchIgnoresOtherFiles: before, any write in a watched directory
// reloaded, so a workspace inside it reloaded without end (16 reloads in
// 5 s of an idle service). Files that are not configuration files (and
// hidden ones, which config.Load skips) change nothing.
func TestWatchIgnoresOtherFiles(t *testing.T) {
	c := newConfigDir(t)
	c.write("policy.yaml", emptyPolicy("p"), 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_WATCH=true")
	in.waitFor("the watcher", func() bool { return strings.Contains(in.logs.String(), "watching the configuration") })
	for name, content := range map[string]string{
		"notes.txt": "hello", "ws/callers/anonymous/default/out.json": "{}", ".policy.yaml.swp": "x", ".hidden/x.yaml": emptyPolicy("h"),
	} {
		p := filepath.Join(c.dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(c.dir, "ws")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // five quiet periods: time for a reload that should not come
	if strings.Contains(in.logs.String(), "configuration files changed") {
		t.Fatalf("writes of other files reloaded:\n%s", in.logs)
	}
	c.write("policy.yaml", denyTransform("p"), 0o644)
	in.waitFor("the reload of the policy", func() bool {
		_, r := in.as("", "POST", "/calls", transformCall)
		return r.code() == "E_POLICY_DENIED"
	})
}
