package shell

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// TestManyProgramsUnderTheAddressSpaceLimit: the per-program address-space
// limit (TOOLSVC_SHELL_RLIMIT_AS_BYTES) is the programs', not the
// interpreter's, which holds more than 1 GiB of address space at rest and
// a thread for every program running. Under the default 2 GiB the
// interpreter of a cgo build died after a dozen background jobs, and
// under 1 GiB at once, with an error blaming TOOLSVC_TOOL_MEMORY_LIMIT.
func TestManyProgramsUnderTheAddressSpaceLimit(t *testing.T) {
	for _, as := range []uint64{2 << 30, 1 << 30} {
		f := newFixtureWith(t, sandbox.Options{Mode: sandbox.ModeBestEffort, Limits: sandbox.Limits{AddressSpaceBytes: as}}, nil)
		if out := f.run("echo hi"); out.Stdout != "hi\n" {
			t.Fatalf("as=%d: echo: %+v", as, out)
		}
		res := f.call(map[string]any{"command": "for i in $(seq 1 30); do sleep 0.5 & done; wait; echo ok"}, 0)
		var out Output
		if res.Status != registry.StatusOK || json.Unmarshal(res.Output, &out) != nil || out.Stdout != "ok\n" {
			t.Fatalf("as=%d: 30 background jobs: %s %s %+v", as, res.Status, res.Output, res.Error)
		}
	}
}

// TestDiedNamesTheLimit: an interpreter that dies without reporting is
// explained by the limit its last words or its end point to.
func TestDiedNamesTheLimit(t *testing.T) {
	f := newFixtureWith(t, sandbox.Options{Mode: sandbox.ModeBestEffort, Limits: sandbox.Limits{CPUSeconds: 60, Processes: 500}}, nil)
	tl := &tool{sb: f.sb, memLimit: 512 << 20, log: slog.New(slog.DiscardHandler)}
	cases := []struct {
		exit          int
		stderr        string
		want, wantFix string
		notWant       string
	}{
		{2, "fatal error: out of memory\n", "TOOLSVC_TOOL_MEMORY_LIMIT (536870912 bytes beyond what it held at start)", "variables", "thread"},
		{2, "runtime/cgo: pthread_create failed: Resource temporarily unavailable\nSIGABRT: abort\n", "could not start another thread", "fewer programs", ""},
		{2, "runtime: failed to create new OS thread (have 40 already; errno=11)\n", "TOOLSVC_SHELL_RLIMIT_NPROC (500)", "fewer programs", ""},
		{128 + 24, "", "CPU time limit of 60 seconds (TOOLSVC_SHELL_RLIMIT_CPU_SECONDS)", "allowed programs", "memory"},
		{128 + 9, "", "SIGKILL", "allowed programs", "TOOLSVC_TOOL_MEMORY_LIMIT"},
		{3, "my own words: out of memory\n", "exit status 3", "", "TOOLSVC_TOOL_MEMORY_LIMIT"},
	}
	for _, c := range cases {
		err := tl.died(sandbox.Result{ExitCode: c.exit}, c.stderr)
		if !strings.Contains(err.Message, c.want) || !strings.Contains(err.Suggestion, c.wantFix) || (c.notWant != "" && strings.Contains(err.Message, c.notWant)) {
			t.Errorf("exit %d, stderr %q: %q (%q)", c.exit, c.stderr, err.Message, err.Suggestion)
		}
	}
}

// TestProcessSubstitutionRefusedAtRunTime: <(...) reached through eval or
// source is refused as the literal one is, and no named pipe is left in
// the workspace whatever reaches it.
func TestProcessSubstitutionRefusedAtRunTime(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	f.write("lib.sh", "cat <(echo from-lib)\n")
	for _, cmd := range []string{
		"eval 'cat <(echo hi)'",
		"eval 'echo <(true)'",
		"p='<(echo hi)'; eval \"cat $p\"",
		"source lib.sh",
		". ./lib.sh",
		"eval 'coproc cat'",
		"trap 'cat <(echo in-trap)' EXIT; echo done",
		"command eval 'cat <(echo hi)'",
		"builtin eval 'cat <(echo hi)'",
		"command -p eval 'cat <(echo hi)'",
		"trap -- 'cat <(echo in-trap)' EXIT; echo done",
	} {
		res := f.call(map[string]any{"command": cmd}, 0)
		if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "not supported") {
			t.Errorf("%q: want a refusal, got %s %s %+v", cmd, res.Status, res.Output, res.Error)
		}
	}
	// Where no check looks (a sourced file too large to check first),
	// the library cannot make its pipe.
	f.write("big.sh", strings.Repeat("# padding\n", maxSourceCheck/10+1)+"cat <(echo from-big)\necho done\n")
	res := f.call(map[string]any{"command": "source big.sh"}, 0)
	var out Output
	if res.Status != registry.StatusOK || json.Unmarshal(res.Output, &out) != nil || out.Stdout != "done\n" || !strings.Contains(out.Stderr, "cannot create fifo") {
		t.Errorf("process substitution in a large sourced file: %s %s %+v", res.Status, res.Output, res.Error)
	}
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "sh-interp-") {
			t.Errorf("a named pipe was left in the workspace: %s", filepath.Join(f.dir, e.Name()))
		}
	}
}

// TestSourceOutsideIsRefusedAsSource: source names what was refused.
func TestSourceOutsideIsRefusedAsSource(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	for _, c := range []struct {
		cmd  string
		code registry.Code
	}{
		{"source /etc/profile", registry.CodeInvalidArguments},
		{". ../../other/x.sh", registry.CodeInvalidArguments},
		{"f=/etc/profile; source $f", registry.CodeTool},
		{"f=/etc/profile; . $f", registry.CodeTool},
	} {
		res := f.call(map[string]any{"command": c.cmd}, 0)
		if res.Code() != c.code || !strings.Contains(res.Error.Message, "only files inside the workspace can be sourced") || strings.Contains(res.Error.Message, "redirection") {
			t.Errorf("%q: want %s about source, got %s %+v", c.cmd, c.code, res.Status, res.Error)
		}
	}
	// A name found in PATH is refused where it is opened.
	res := f.call(map[string]any{"command": "source ls"}, 0)
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "redirections and source may only name files inside the workspace") {
		t.Errorf("source ls: %s %+v", res.Status, res.Error)
	}
}
