package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// startConfined starts the binary with env, on a kernel with Landlock.
func startConfined(t *testing.T, env ...string) *proc {
	t.Helper()
	if sandbox.Probe().LandlockABI < 1 {
		t.Skip("kernel has no Landlock")
	}
	return startBinary(t, env...)
}

// callTool posts a call, approved by the caller, as the caller with token
// ("" for none) in the instance key, and returns the HTTP status, the
// Retry-After header and the result.
func callTool(p *proc, token, tool, key string, args any) (int, string, result) {
	p.t.Helper()
	b, _ := json.Marshal(map[string]any{"toolName": tool, "arguments": args, "context": map[string]any{"instanceKey": key},
		"approval": map[string]any{"granted": true, "by": "test"}})
	a := p.sendAs(token, "POST", "/calls", string(b))
	return a.status, a.header.Get("Retry-After"), a.res
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// confineConfig writes callers alice and bob (own trees), carol and dave
// (sharing "team"), a policy that allows everything, and an exec tool
// that lists its working directory.
func confineConfig(t *testing.T) string {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("apiVersion: toolsvc/v1\nkind: Policy\nmetadata:\n  name: open\nspec:\n  tierDefaults: {read_only: allow, side_effecting: allow, privileged: allow}\n")
	for _, c := range []struct{ name, ws string }{{"alice", ""}, {"bob", ""}, {"carol", "team"}, {"dave", "team"}} {
		fmt.Fprintf(&b, "---\napiVersion: toolsvc/v1\nkind: Caller\nmetadata:\n  name: %s\nspec:\n  tokenSha256: %s\n", c.name, digest(c.name+"-token"))
		if c.ws != "" {
			fmt.Fprintf(&b, "  workspace: %s\n", c.ws)
		}
	}
	b.WriteString(`---
apiVersion: toolsvc/v1
kind: Tool
metadata:
  name: probe
spec:
  tier: privileged
  timeout: 10s
  exec:
    command: [/usr/bin/ls, -a]
  exports:
    - name: ls
      description: List the workspace.
      parameters: {type: object}
`)
	if err := os.WriteFile(filepath.Join(dir, "c.yaml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBinaryWorkspaceEscape: a link planted as an instance directory
// never takes a call out of the workspace, programs cannot plant one, and
// callers cannot reach each other's files.
func TestBinaryWorkspaceEscape(t *testing.T) {
	p := startConfined(t, "TOOLSVC_CONFIG="+confineConfig(t))
	const alice = "alice-token"
	// Programs may not make symbolic links at all (Landlock make-symlink).
	_, _, r := callTool(p, alice, "shell__exec", "", map[string]any{"command": "cp -P /proc/self/root cache; echo rc=$?"})
	if r.Status != "ok" || !strings.Contains(string(r.Output), "rc=1") {
		t.Fatalf("cp -P of a link: %s", r)
	}
	aliceDefault := filepath.Join(p.ws, "callers", "alice", "default")
	if _, err := os.Lstat(filepath.Join(aliceDefault, "cache")); err == nil {
		t.Fatal("a sandboxed program created a symbolic link")
	}
	// A link that got there anyway (planted from outside) is refused
	// wherever the layout expects a directory.
	inst := filepath.Join(p.ws, "callers", "alice", "instances")
	if err := os.MkdirAll(inst, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(inst, "cache")); err != nil {
		t.Fatal(err)
	}
	probe := "toolsvc-escape-probe-" + strconv.Itoa(os.Getpid())
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"fs__read", map[string]any{"path": "etc/hostname"}},
		{"fs__write", map[string]any{"path": probe, "content": "x"}},
		{"fs__delete", map[string]any{"path": "tmp"}},
		{"fs__list", map[string]any{"path": "etc"}},
		{"shell__exec", map[string]any{"command": "ls; cat etc/hostname; echo x > " + probe}},
		{"probe__ls", map[string]any{}},
	}
	for _, c := range calls {
		_, _, r := callTool(p, alice, c.tool, "cache", c.args)
		if r.Status == "ok" || r.Error == nil || !strings.Contains(r.Error.Message, "symbolic links are not followed") {
			t.Errorf("%s with instanceKey cache -> /: %s", c.tool, r)
		}
	}
	if _, err := os.Lstat("/" + probe); err == nil {
		os.Remove("/" + probe)
		t.Error("a call wrote to /")
	}
	// Callers are partitioned by caller, unless they share a workspace.
	write := func(token string) result {
		_, _, r := callTool(p, token, "fs__write", "k", map[string]any{"path": "secret.txt", "content": token})
		return r
	}
	read := func(token, path string) result {
		_, _, r := callTool(p, token, "fs__read", "k", map[string]any{"path": path})
		return r
	}
	if r := write(alice); r.Status != "ok" {
		t.Fatalf("alice write: %s", r)
	}
	if r := read("bob-token", "secret.txt"); r.Status == "ok" {
		t.Errorf("bob read alice's file by instanceKey: %s", r)
	}
	if r := read("bob-token", "../../../alice/instances/k/secret.txt"); r.Status == "ok" {
		t.Errorf("bob read alice's file by path: %s", r)
	}
	_, _, r = callTool(p, "bob-token", "shell__exec", "k", map[string]any{"command": "cat " + filepath.Join(p.ws, "callers/alice/instances/k/secret.txt")})
	if r.Status == "ok" && strings.Contains(string(r.Output), alice) {
		t.Errorf("bob's shell read alice's file: %s", r)
	}
	if r := write("carol-token"); r.Status != "ok" {
		t.Fatalf("carol write: %s", r)
	}
	if r := read("dave-token", "secret.txt"); r.Status != "ok" || !strings.Contains(string(r.Output), "carol-token") {
		t.Errorf("dave does not share carol's workspace: %s", r)
	}
}

// memoryMargin is what the service's own RSS may add to the ceiling while
// a bomb runs (its heap, the Go runtime, the store).
const memoryMargin = 128 << 20

// TestBinaryShellBombs: memory bombs in the shell interpreter end as
// E_TOOL naming the ceiling (or E_TIMEOUT at timeoutMs), the service's RSS
// stays within the ceiling plus memoryMargin, /healthz answers
// throughout, and CPU falls to idle within a second of the answer.
func TestBinaryShellBombs(t *testing.T) {
	const limit = 256 << 20
	p := startConfined(t, "TOOLSVC_TOOL_MEMORY_LIMIT=256MiB")
	pid := p.pid()
	bombs := map[string]string{
		"doubling": "a=x; for i in {1..40}; do a=$a$a; done; echo ${#a}",
		// As filed the command line ends at once and its background
		// jobs with it; without & the recursion is a bomb.
		"fork bomb":     "f(){ f | f & }; f",
		"pipeline bomb": "f(){ f | f; }; f",
		"braces":        "echo " + strings.Repeat("{a,b}", 3000),
	}
	for name, cmd := range bombs {
		t.Run(name, func(t *testing.T) {
			stop := watch(p, 100*time.Millisecond)
			start := time.Now()
			_, _, r := callTool(p, "", "shell__exec", "", map[string]any{"command": cmd, "timeoutMs": 8000})
			took := time.Since(start)
			seen := stop()
			switch {
			case r.Error != nil && r.Error.Code == "E_TOOL" && strings.Contains(r.Error.Message, "TOOLSVC_TOOL_MEMORY_LIMIT"):
			case r.Error != nil && r.Error.Code == "E_TIMEOUT" && took < 12*time.Second:
			case name == "fork bomb" && r.Status == "ok":
			default:
				t.Fatalf("%s: want E_TOOL naming the limit or E_TIMEOUT, got %s (%+v)", name, r, r.Error)
			}
			t.Logf("%s: %s after %v; service max RSS %d MiB", name, r, took.Round(time.Millisecond), seen.peakSelf>>20)
			if seen.peakSelf > limit+memoryMargin {
				t.Errorf("service RSS reached %d MiB, over the ceiling plus margin", seen.peakSelf>>20)
			}
			if len(seen.failures) > 0 {
				t.Errorf("/healthz failed while the bomb ran: %v", seen.failures)
			}
			time.Sleep(time.Second)
			// The service's own CPU, not that of the children it reaps.
			_, t0, _ := stat(pid, false)
			time.Sleep(time.Second)
			_, t1, _ := stat(pid, false)
			if t1-t0 > 20 { // ticks (1/100 s) in one second: idle is ~0
				t.Errorf("service still busy a second after the answer: %d ticks/s", t1-t0)
			}
			if kids := children(pid); len(kids) > 0 {
				t.Errorf("processes left behind: %v", kids)
			}
		})
	}
}

// TestSandboxUnavailableLeavesProcessToolsOut: with Landlock unavailable
// and mode required (the default), shell and exec tools are not served
// and the readiness details say why; best-effort is an explicit opt-in.
func TestSandboxUnavailableLeavesProcessToolsOut(t *testing.T) {
	noLandlock := func() sandbox.ProbeResult { return sandbox.ProbeResult{Err: fmt.Errorf("forced by the test")} }
	for _, mode := range []string{"", "best-effort"} {
		cfg, err := loadConfig([]string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_CONFIG=" + confineConfig(t), "TOOLSVC_SHELL_SANDBOX=" + mode})
		if err != nil {
			t.Fatal(err)
		}
		cfg.probe = noLandlock
		a, err := build(cfg, newLogger(cfg, io.Discard), nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range a.registry.List(registry.Anonymous(), registry.Filter{}) {
			names = append(names, tool.Name)
		}
		served := slices.Contains(names, "shell__exec") || slices.Contains(names, "probe__ls")
		st := a.sandbox.Status()
		if mode == "" {
			if served {
				t.Errorf("mode required without Landlock serves process tools: %v", names)
			}
			if !strings.Contains(st.Unavailable, "Landlock unavailable") || !strings.Contains(st.Unavailable, "best-effort") {
				t.Errorf("readiness does not say why: %+v", st)
			}
			if !slices.Contains(names, "fs__read") {
				t.Errorf("file tools went missing too: %v", names)
			}
		} else if !served || st.Unavailable != "" {
			t.Errorf("best-effort opt-in does not serve process tools: %v %+v", names, st)
		}
	}
}

// TestBinaryExecOverload: 200 concurrent 2 s exec calls under the
// defaults derived from the CPU count: the excess is answered 429 with
// Retry-After at once, and /healthz keeps answering. The old defaults
// (256 at once, no per-tool bound) run for comparison; both p99s are
// logged, and only a generous bound is asserted.
func TestBinaryExecOverload(t *testing.T) {
	dir := t.TempDir()
	tool := `apiVersion: toolsvc/v1
kind: Tool
metadata:
  name: slow
spec:
  tier: read_only
  timeout: 30s
  exec:
    command: [/usr/bin/sleep, "2"]
  exports:
    - name: run
      description: Sleep two seconds.
      parameters: {type: object}
`
	if err := os.WriteFile(filepath.Join(dir, "slow.yaml"), []byte(tool), 0o600); err != nil {
		t.Fatal(err)
	}
	before := overload(t, "TOOLSVC_CONFIG="+dir, "TOOLSVC_MAX_CONCURRENCY=256", "TOOLSVC_PROCESS_TOOL_CONCURRENCY=256")
	after := overload(t, "TOOLSVC_CONFIG="+dir)
	t.Logf("old defaults: %s", before)
	t.Logf("new defaults: %s", after)
	if after.statuses[429] == 0 || after.statuses[200]+after.statuses[429] != 200 {
		t.Errorf("want 200s and 429s only, with some 429s: %v", after.statuses)
	}
	if after.missingRetry > 0 {
		t.Errorf("%d answers 429 without Retry-After", after.missingRetry)
	}
	if len(after.health.failures) > 0 || len(after.health.latencies) < 10 {
		t.Errorf("/healthz failed %d times (%d answers)", len(after.health.failures), len(after.health.latencies))
	}
	if p := after.health.p(99); p > 3*time.Second { // generous: a shared machine is noisy
		t.Errorf("/healthz p99 %v", p)
	}
}

// overloadStats is what overload saw.
type overloadStats struct {
	statuses     map[int]int
	missingRetry int
	took         time.Duration
	health       watchStats
}

func (s overloadStats) String() string {
	return fmt.Sprintf("statuses %v in %v; /healthz %d answers, p50 %v, p99 %v, %d failures",
		s.statuses, s.took.Round(time.Millisecond), len(s.health.latencies), s.health.p(50).Round(time.Millisecond),
		s.health.p(99).Round(time.Millisecond), len(s.health.failures))
}

// overload sends 200 concurrent calls of slow__run to a new instance
// while polling /healthz.
func overload(t *testing.T, env ...string) overloadStats {
	p := startConfined(t, env...)
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	s := overloadStats{statuses: map[int]int{}}
	stop := watch(p, 20*time.Millisecond)
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, retry, _ := callTool(p, "", "slow__run", "", map[string]any{})
			mu.Lock()
			defer mu.Unlock()
			s.statuses[status]++
			if status == 429 && retry == "" {
				s.missingRetry++
			}
		}()
	}
	wg.Wait()
	s.took = time.Since(start)
	s.health = stop()
	return s
}
