package shell

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// TestMain makes the test binary the sandbox child, as cmd/toolsvc does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ChildCommand {
		err := sandbox.RunChild(os.Args[2:], sandbox.Entries{InterpreterEntry: RunInterpreter})
		fmt.Fprintln(os.Stderr, "sandbox child:", err)
		os.Exit(125)
	}
	os.Exit(m.Run())
}

type fixture struct {
	t    *testing.T
	dir  string // the workspace
	sb   *sandbox.Sandbox
	exec *registry.Executor
}

func newFixture(t *testing.T, mode sandbox.Mode, tweak func(*Options)) *fixture {
	t.Helper()
	return newFixtureWith(t, sandbox.Options{Mode: mode}, tweak)
}

// newFixtureWith is newFixture with the sandbox's options (the test
// binary is SelfExe).
func newFixtureWith(t *testing.T, so sandbox.Options, tweak func(*Options)) *fixture {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	so.SelfExe, so.KillGrace = exe, 200*time.Millisecond
	sb, err := sandbox.New(so)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(t.TempDir(), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Workspace: ws, Sandbox: sb, EnvAllow: []string{"GREETING"}, Timeout: 20 * time.Second}
	if raceEnabled {
		o.MemoryLimit = 64 << 30
	}
	if tweak != nil {
		tweak(&o)
	}
	tools, err := Tools(o)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	allowAll := registry.TierDefaults{registry.ReadOnly: registry.Allow, registry.SideEffecting: registry.Allow, registry.Privileged: registry.Allow}
	d, err := ws.Open(workspace.Owner{CallerID: registry.Anonymous().ID}, "")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	return &fixture{t: t, dir: d.Path, sb: sb, exec: registry.NewExecutor(registry.Options{Registry: reg, Policy: allowAll})}
}

func (f *fixture) call(args map[string]any, timeoutMs int64) *registry.Result {
	f.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		f.t.Fatal(err)
	}
	res, err := f.exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: ToolName, Arguments: raw, TimeoutMs: timeoutMs})
	if err != nil {
		f.t.Fatal(err)
	}
	return res
}

// run calls the tool with a command and wants an ok result.
func (f *fixture) run(command string) Output {
	f.t.Helper()
	res := f.call(map[string]any{"command": command}, 0)
	if res.Status != registry.StatusOK {
		f.t.Fatalf("%q: %s %+v", command, res.Status, res.Error)
	}
	var out Output
	if err := json.Unmarshal(res.Output, &out); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) write(name, content string) {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) exists(name string) bool {
	_, err := os.Lstat(filepath.Join(f.dir, name))
	return err == nil
}

func TestAllowedCommands(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	f.write("notes.txt", "alpha\nbeta\ngamma\n")
	f.write("sub/inner.txt", "inside\n")

	cases := []struct{ cmd, want string }{
		{"echo hi | tr a-z A-Z", "HI\n"},
		{"ls", "notes.txt\nsub\n"},
		{"cat notes.txt", "alpha\nbeta\ngamma\n"},
		{"grep -c a notes.txt", "3\n"},
		{"sort -r notes.txt | head -n 1", "gamma\n"},
		{"cat notes.txt | wc -l > count.txt && cat count.txt", "3\n"},
		{"for f in *.txt; do echo \"file: $f\"; done", "file: count.txt\nfile: notes.txt\n"},
		{"x=$(cat notes.txt | head -n 1); echo \"first=$x\"", "first=alpha\n"},
		{"cd sub && pwd && cat inner.txt", filepath.Join(f.dir, "sub") + "\ninside\n"},
		{"echo $HOME", f.dir + "\n"},
		{"echo oops >&2; echo fine > /dev/null; echo ok", "ok\n"},
		{"l() { ls sub; }; l", "inner.txt\n"},
		{"cat <<EOF\nhere $((1+2))\nEOF", "here 3\n"},
		{"command -v sh >/dev/null && echo found", "found\n"}, // a lookup, not a run
		{"echo $TMPDIR", f.dir + "\n"},
		{"d=$(mktemp -d) && [ \"${d#$TMPDIR/}\" != \"$d\" ] && echo inside", "inside\n"},
	}
	for _, c := range cases {
		out := f.run(c.cmd)
		if out.Stdout != c.want || out.ExitCode != 0 {
			t.Errorf("%q: exit %d stdout %q (want %q) stderr %q", c.cmd, out.ExitCode, out.Stdout, c.want, out.Stderr)
		}
	}
	out := f.run("echo oops >&2")
	if out.Stderr != "oops\n" {
		t.Errorf("stderr: %q", out.Stderr)
	}

	// A failing program is an exit code, not an error.
	out = f.run("ls does-not-exist")
	if out.ExitCode != 2 || !strings.Contains(out.Stderr, "does-not-exist") {
		t.Errorf("failing ls: %+v", out)
	}
	out = f.run("false")
	if out.ExitCode != 1 {
		t.Errorf("false: %+v", out)
	}

	// cwd, stdin and env arguments.
	res := f.call(map[string]any{"command": "cat; ls; echo \"$GREETING\"", "cwd": "sub", "stdin": "from stdin\n", "env": map[string]string{"GREETING": "hello"}}, 0)
	var o Output
	if res.Status != registry.StatusOK || json.Unmarshal(res.Output, &o) != nil || o.Stdout != "from stdin\ninner.txt\nhello\n" {
		t.Errorf("cwd/stdin/env: %s %s %+v", res.Status, res.Output, res.Error)
	}
	// Allowlisted variables reach programs; others do not.
	out = f.run("export GREETING=hi OTHER=x; date -d @0 -u +%Y >/dev/null; printf '%s\\n' \"$GREETING\"")
	if out.Stdout != "hi\n" {
		t.Errorf("env in script: %+v", out)
	}
}

func TestArgumentErrors(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	f.write("file.txt", "x")
	cases := []map[string]any{
		{"command": "echo hi", "cwd": "/etc"},
		{"command": "echo hi", "cwd": "../.."},
		{"command": "echo hi", "cwd": "missing"},
		{"command": "echo hi", "cwd": "file.txt"},
		{"command": "echo hi", "env": map[string]string{"LD_PRELOAD": "x.so"}},
		{"command": "echo hi", "env": map[string]string{"PATH": "/tmp"}},
		{"command": "echo 'unterminated"},
		{"command": ""},
		{"command": "echo hi", "extra": true},
	}
	for _, c := range cases {
		res := f.call(c, 0)
		if res.Code() != registry.CodeInvalidArguments {
			t.Errorf("%v: want E_INVALID_ARGUMENTS, got %s %+v", c, res.Status, res.Error)
		}
	}
	if _, err := Tools(Options{Workspace: nil}); err == nil {
		t.Error("Tools without workspace accepted")
	}
	ws, _ := workspace.New(t.TempDir(), workspace.Options{})
	if _, err := Tools(Options{Workspace: ws, Sandbox: f.sb, Allow: []string{"/bin/ls"}}); err == nil {
		t.Error("a path in the allowlist was accepted")
	}
	if _, err := Tools(Options{Workspace: ws, Sandbox: f.sb, EnvAllow: []string{"LD_PRELOAD"}}); err == nil {
		t.Error("LD_PRELOAD in the environment allowlist was accepted")
	}
}

func TestDisallowedProgramsAreRefused(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	// A script that would create the marker if it ever ran as a program.
	f.write("evil.sh", "sh -c 'touch pwned'\n")
	// A fake "cat" in the workspace, to try PATH tricks.
	f.write("bin/cat", "#!/bin/sh\ntouch pwned\n")
	if err := os.Chmod(filepath.Join(f.dir, "bin/cat"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cmd string
		// runtime: the refusal can only happen while running (E_TOOL);
		// otherwise the syntax check refuses before anything runs.
		runtime bool
	}{
		{"bash -c 'touch pwned'", false},
		{"sh -c 'touch pwned'", false},
		{"/bin/sh -c 'touch pwned'", false},
		{"/usr/bin/touch pwned", false},
		{"./bin/cat x", false},
		{"echo $(python3 -c 'open(\"pwned\", \"w\")')", false},
		{"echo `sh -c 'touch pwned'`", false},
		{"exec sh -c 'touch pwned'", false},
		{"command sh -c 'touch pwned'", false},
		{"f() { sh -c 'touch pwned'; }; f", false},
		{"xargs sh -c 'touch pwned' < /dev/null", false},
		{"env sh -c 'touch pwned'", false},
		{"echo x | sh", false},
		{"sort --compress-program=sh evil.sh", false},
		{"sort --co=sh evil.sh", false},
		{"eval 'sh -c \"touch pwned\"'", true},
		{"X=sh; $X -c 'touch pwned'", true},
		{"X=/bin/sh; $X -c 'touch pwned'", true},
		{"exec \"$(echo sh)\" -c 'touch pwned'", true},
		{"command $(echo sh) -c 'touch pwned'", true},
		{"\\sh -c 'touch pwned'", true},
		{"source evil.sh", true},
		{". ./evil.sh", true},
		{"X=sh; echo hi | $X", true},
		{"X=sh; $X -c 'touch pwned' & wait", true},
		{"X=bash; f() { $X -c 'touch pwned'; }; f", true},
	}
	for _, c := range cases {
		res := f.call(map[string]any{"command": c.cmd}, 0)
		want := registry.CodeInvalidArguments
		if c.runtime {
			want = registry.CodeTool
		}
		if res.Code() != want {
			t.Errorf("%q: want %s, got %s %s %+v", c.cmd, want, res.Status, res.Output, res.Error)
		} else if !strings.Contains(res.Error.Message, "refused") && !strings.Contains(res.Error.Message, "not allowed") {
			t.Errorf("%q: message does not say why: %q", c.cmd, res.Error.Message)
		} else if !strings.Contains(res.Error.Suggestion, "cat") && !strings.Contains(res.Error.Suggestion, "sort") {
			t.Errorf("%q: suggestion does not say what is allowed: %q", c.cmd, res.Error.Suggestion)
		}
		if f.exists("pwned") {
			t.Fatalf("%q: a refused program ran", c.cmd)
		}
	}

	// builtin runs builtins only: no program runs and the exit is non-zero.
	out := f.run("builtin sh -c 'touch pwned'")
	if out.ExitCode == 0 || f.exists("pwned") {
		t.Fatalf("builtin sh: %+v", out)
	}
	// PATH set by the script does not change where programs come from.
	out = f.run("PATH=$PWD/bin:$PATH; cat evil.sh >/dev/null; export PATH=$PWD/bin; cat evil.sh")
	if out.ExitCode != 0 || f.exists("pwned") || !strings.Contains(out.Stdout, "touch pwned") {
		t.Fatalf("PATH trick: %+v", out)
	}
}

func TestRedirectionsStayInside(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(f.dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "target.txt"), filepath.Join(f.dir, "filelink")); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(outside, "abs.txt")
	cases := []struct {
		cmd     string
		code    registry.Code // "" means: runs, but fails (exit code)
		created string
	}{
		{"echo x > " + abs, registry.CodeInvalidArguments, abs},
		{"echo x >> " + abs, registry.CodeInvalidArguments, abs},
		{"echo x > ../escape.txt", registry.CodeInvalidArguments, filepath.Join(filepath.Dir(f.dir), "escape.txt")},
		{"cat < /etc/passwd", registry.CodeInvalidArguments, ""},
		{"F=" + abs + "; echo x > $F", registry.CodeTool, abs},
		{"cd /tmp", registry.CodeTool, ""},
		{"cd ..", registry.CodeTool, ""},
		{"X=..; cd $X", registry.CodeTool, ""},
		{"echo x > link/through-dir.txt", "", filepath.Join(outside, "through-dir.txt")},
		{"echo x > filelink", "", filepath.Join(outside, "target.txt")},
	}
	for _, c := range cases {
		res := f.call(map[string]any{"command": c.cmd}, 0)
		if c.code != "" {
			if res.Code() != c.code {
				t.Errorf("%q: want %s, got %s %s %+v", c.cmd, c.code, res.Status, res.Output, res.Error)
			}
		} else {
			var out Output
			if res.Status != registry.StatusOK || json.Unmarshal(res.Output, &out) != nil || out.ExitCode == 0 {
				t.Errorf("%q: want a failing exit code, got %s %s %+v", c.cmd, res.Status, res.Output, res.Error)
			}
		}
		if c.created != "" {
			if _, err := os.Lstat(c.created); err == nil {
				t.Fatalf("%q created %s", c.cmd, c.created)
			}
		}
	}
	// Globs do not look outside the workspace.
	if out := f.run("echo /etc/pass*"); out.Stdout != "/etc/pass*\n" {
		t.Errorf("glob outside: %q", out.Stdout)
	}
	if out := f.run("[ -e /etc/passwd ] && echo yes || echo no"); out.Stdout != "no\n" {
		t.Errorf("test -e outside: %q", out.Stdout)
	}
}

func TestDevTCPIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	port := ln.Addr().(*net.TCPAddr).Port
	for _, cmd := range []string{
		fmt.Sprintf("echo hi > /dev/tcp/127.0.0.1/%d", port),
		fmt.Sprintf("cat < /dev/tcp/127.0.0.1/%d", port),
		fmt.Sprintf("P=/dev/tcp/127.0.0.1/%d; echo hi > $P", port),
	} {
		res := f.call(map[string]any{"command": cmd}, 0)
		if res.Status != registry.StatusError {
			t.Errorf("%q: %s %s", cmd, res.Status, res.Output)
		}
	}
	// Make sure a connection would have been seen: dial once ourselves.
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for accepted.Load() < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := accepted.Load(); n != 1 {
		t.Fatalf("listener saw %d connections, want exactly ours", n)
	}
}

// procsWithArg lists processes whose command line contains arg.
func procsWithArg(t *testing.T, arg string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(arg)) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func TestTimeoutStopsEverything(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	// The call's timeoutMs argument.
	res := f.call(map[string]any{"command": "sleep 30.2718 & sleep 30.2718", "timeoutMs": 1000}, 0)
	if res.Code() != registry.CodeTimeout {
		t.Fatalf("timeoutMs: want E_TIMEOUT, got %s %+v", res.Status, res.Error)
	}
	if left := procsWithArg(t, "30.2718"); len(left) > 0 {
		t.Fatalf("processes left behind: %q", left)
	}
	// The call request's timeout, enforced by the executor.
	res = f.call(map[string]any{"command": "sleep 30.3141 & sleep 30.3141"}, 1000)
	if res.Code() != registry.CodeTimeout {
		t.Fatalf("request timeout: want E_TIMEOUT, got %s %+v", res.Status, res.Error)
	}
	// The executor answers at the deadline without waiting for the
	// handler to finish stopping its programs, so give that a moment.
	var left []string
	for range 100 {
		if left = procsWithArg(t, "30.3141"); len(left) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(left) > 0 {
		t.Fatalf("processes left behind: %q", left)
	}
	// A pure shell loop stops at the deadline too.
	res = f.call(map[string]any{"command": "while :; do :; done", "timeoutMs": 500}, 0)
	if res.Code() != registry.CodeTimeout {
		t.Fatalf("busy loop: want E_TIMEOUT, got %s %+v", res.Status, res.Error)
	}
}

func TestBackgroundJobsStoppedAtEnd(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	out := f.run("sleep 33.1415 & echo started")
	if out.Stdout != "started\n" {
		t.Fatalf("%+v", out)
	}
	if left := procsWithArg(t, "33.1415"); len(left) > 0 {
		t.Fatalf("processes left behind: %q", left)
	}
}

func TestProcessLimit(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, func(o *Options) { o.MaxProcesses = 2 })
	res := f.call(map[string]any{"command": "sleep 34.5 & sleep 34.5 & sleep 34.5 & wait", "timeoutMs": 15000}, 0)
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "at the same time") {
		t.Fatalf("want a refusal, got %s %+v", res.Status, res.Error)
	}
	if left := procsWithArg(t, "34.5"); len(left) > 0 {
		t.Fatalf("processes left behind: %q", left)
	}
}

func TestInterpreterMemoryIsBounded(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	big := bytes.Repeat([]byte("0123456789abcdef\n"), 1<<20) // 17 MiB
	f.write("big.txt", string(big))
	cases := []struct{ cmd, want string }{
		// Variables growing in a loop.
		{"x=0123456789abcdef; while :; do x=$x$x; done", "variables"},
		// A program's output captured by $(...).
		{"x=$(seq 1 5000000)", "$(...)"},
		{"x=$(cat big.txt)", "$(...)"},
		// $(<file) is run as $(cat <file).
		{"x=$(<big.txt)", "$(...)"},
		// Builtins writing into $(...).
		{"a=$(printf '%01000d' 0); x=$(while :; do echo $a$a$a$a$a$a$a$a; done)", "$(...)"},
	}
	for _, c := range cases {
		res := f.call(map[string]any{"command": c.cmd}, 0)
		if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, c.want) {
			t.Errorf("%q: want a refusal about %s, got %s %+v", c.cmd, c.want, res.Status, res.Error)
		}
	}
	f.write("small.txt", "small\n")
	if out := f.run("x=$(<small.txt); echo \"[$x]\""); out.Stdout != "[small]\n" {
		t.Errorf("$(<file): %+v", out)
	}
}

func TestFloodIsTruncatedWithBoundedMemory(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, func(o *Options) { o.Allow = append(DefaultAllow(), "yes") })
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// 100 MB through a pipeline into the captured stdout, and 169 MB from
	// one program.
	res := f.call(map[string]any{"command": "yes | head -c 100000000; seq 1 20000000; echo done >&2"}, 0)
	runtime.ReadMemStats(&after)
	var out Output
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatal(err)
	}
	// Head and tail around the marker, which counts what was omitted
	// (no spill store here, so nothing is kept).
	const produced = 100000000 + 168888897
	head, rest, _ := strings.Cut(out.Stdout, "\n[output truncated: ")
	marker, tail, _ := strings.Cut(rest, "]\n")
	if !out.StdoutTruncated || len(head)+len(tail) != DefaultMaxOutputBytes || !strings.HasPrefix(head, "y\ny\n") || !strings.HasSuffix(tail, "\n19999999\n20000000\n") {
		t.Fatalf("truncated=%v len=%d head %q… tail …%q", out.StdoutTruncated, len(out.Stdout), head[:10], tail[max(0, len(tail)-30):])
	}
	if want := fmt.Sprintf("%d bytes total, %d omitted; the full output was not kept", produced, produced-len(head)-len(tail)); marker != want {
		t.Errorf("marker %q, want %q", marker, want)
	}
	if !res.Truncated || res.OriginalBytes != produced+5 || out.StdoutBytes != produced || out.StderrBytes != 5 {
		t.Errorf("truncated=%v originalBytes=%d stdoutBytes=%d stderrBytes=%d; produced %d+5", res.Truncated, res.OriginalBytes, out.StdoutBytes, out.StderrBytes, produced)
	}
	if out.Stderr != "done\n" || out.ExitCode != 0 {
		t.Fatalf("%+v", out.Stderr)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("about 269 MB of output; kept %d bytes; the Go heap allocated %d bytes in total during the call", len(out.Stdout), alloc)
	if alloc > 16<<20 {
		t.Fatalf("allocated %d bytes: memory is not bounded by the output limit", alloc)
	}
}

func TestLandlockConfinesAllowedPrograms(t *testing.T) {
	if sandbox.Probe().LandlockABI < 1 {
		t.Skip("kernel has no Landlock")
	}
	f := newFixture(t, sandbox.ModeRequired, nil)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.write("mine.txt", "mine")
	out := f.run("cat " + secret)
	if out.ExitCode == 0 || strings.Contains(out.Stdout, "secret") || !strings.Contains(out.Stderr, "Permission denied") {
		t.Fatalf("cat read outside the workspace: %+v", out)
	}
	for _, cmd := range []string{"cp mine.txt " + outside + "/copied.txt", "touch " + outside + "/touched.txt", "tee " + outside + "/teed.txt < mine.txt"} {
		out := f.run(cmd)
		if out.ExitCode == 0 {
			t.Errorf("%q succeeded: %+v", cmd, out)
		}
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("files were created outside the workspace: %v", entries)
	}
	// And the same program works inside.
	if out := f.run("cp mine.txt copy.txt && cat copy.txt"); out.Stdout != "mine" {
		t.Fatalf("inside: %+v", out)
	}
	if !strings.Contains(mustDescription(t, f), "no network") {
		t.Error("the description does not tell the model that programs have no network")
	}
}

func mustDescription(t *testing.T, f *fixture) string {
	tool, ok := f.exec.Registry().Lookup(ToolName)
	if !ok {
		t.Fatal("tool not registered")
	}
	return tool.Description
}

func TestDefinition(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	tool, _ := f.exec.Registry().Lookup(ToolName)
	if tool.Tier != registry.Privileged {
		t.Errorf("tier %s", tool.Tier)
	}
	var schema map[string]any
	if err := json.Unmarshal(tool.Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	if schema["additionalProperties"] != false {
		t.Error("schema allows extra properties")
	}
	for _, name := range []string{"ls", "cat", "grep"} {
		if !strings.Contains(tool.Description, name) {
			t.Errorf("description does not list %s", name)
		}
	}
	for _, name := range []string{"bash", "python3", "xargs", "env", "find", "sed", "awk"} {
		for _, allowed := range DefaultAllow() {
			if allowed == name {
				t.Errorf("default allowlist contains %s", name)
			}
		}
	}
}

// TestUninstalledProgramsAreNotOffered: an image without the allowed
// programs (FROM distroless, scratch) told the model "Only these programs
// can be run: cat, ls, …" and answered "command not found" for each.
func TestUninstalledProgramsAreNotOffered(t *testing.T) {
	var logged bytes.Buffer
	f := newFixture(t, sandbox.ModeBestEffort, func(o *Options) {
		o.Allow = []string{"cat", "no-such-program-x1"}
		o.Logger = slog.New(slog.NewJSONHandler(&logged, nil))
	})
	desc := mustDescription(t, f)
	if !strings.Contains(desc, "Only these programs can be run, by name: cat. ") {
		t.Errorf("description: %s", desc)
	}
	if !strings.Contains(logged.String(), `"missing":"no-such-program-x1"`) {
		t.Errorf("no warning at start naming the missing program: %s", logged.String())
	}
	res := f.call(map[string]any{"command": "no-such-program-x1"}, 0)
	if res.Error == nil || !strings.Contains(res.Error.Message, `program "no-such-program-x1" is not allowed`) || !strings.Contains(res.Error.Suggestion, "Use only these programs: cat,") {
		t.Errorf("calling it: %s %s %+v", res.Status, res.Output, res.Error)
	}
	none := newFixture(t, sandbox.ModeBestEffort, func(o *Options) { o.Allow = []string{"no-such-program-x1"} })
	if desc := mustDescription(t, none); !strings.Contains(desc, "No programs are installed for it: only shell builtins work.") {
		t.Errorf("description without programs: %s", desc)
	}
	res = none.call(map[string]any{"command": "no-such-program-x1"}, 0)
	if res.Error == nil || !strings.Contains(res.Error.Suggestion, "No programs are installed for this tool: use shell builtins") {
		t.Errorf("calling it without programs: %+v", res.Error)
	}
}
