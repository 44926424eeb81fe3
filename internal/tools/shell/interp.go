package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// InterpreterEntry is the sandbox entry (see sandbox.Entry) that
// interprets a command line; the main program passes RunInterpreter to
// sandbox.RunChild under this name.
const InterpreterEntry = "shell"

// interpConfig is what the tool hands the interpreter's process.
type interpConfig struct {
	Command string `json:"command"`
	// Home is the workspace's name (HOME, TMPDIR, $PWD); the process's
	// working directory is the workspace itself, opened by the parent.
	Home string `json:"home"`
	// Cwd is the working directory relative to the workspace.
	Cwd      string   `json:"cwd"`
	Allow    []string `json:"allow"`
	EnvAllow []string `json:"envAllow,omitempty"`
	// Env are the call's env argument as NAME=value, already allowlisted.
	Env      []string `json:"env,omitempty"`
	MaxProcs int      `json:"maxProcs"`
}

// interpReport is what the interpreter's process reports at the end.
type interpReport struct {
	ExitCode int             `json:"exitCode"`
	Refusal  *registry.Error `json:"refusal,omitempty"`
	Error    string          `json:"error,omitempty"`
}

// RunInterpreter is the interpreter's process: already confined by the
// sandbox (Landlock, rlimits, the memory ceiling, working directory from
// the opened workspace), it interprets the command line of args[0] (an
// interpConfig) with os.Stdin, os.Stdout and os.Stderr, runs the allowed
// programs itself through programs (which gives each the per-program
// limits), reports the outcome to the parent and returns the exit status.
func RunInterpreter(programs *sandbox.Programs, args []string) int {
	// A runtime fatal error (out of memory) prints one line, not every
	// goroutine's stack into the command's stderr.
	debug.SetTraceback("none")
	r := &reporter{}
	return r.send(interpret(programs, args, r))
}

// reporter sends the process's one report to the parent. A refusal in a
// background job reports from its own goroutine while the main one, its
// interpreter stopped by the same refusal, reports too: only the first
// is sent, so the parent never reads two.
type reporter struct {
	once   sync.Once
	status int
}

// send sends rep to the parent, the first time only, and returns the exit
// status. Programs still running are left to the parent, which kills the
// whole process group once this process has exited: this process could
// not signal them itself where Landlock scopes signals per thread (ABI < 8).
func (r *reporter) send(rep interpReport) int {
	r.once.Do(func() {
		b, err := json.Marshal(rep)
		if err == nil {
			err = sandbox.Report(b)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "toolsvc shell:", err)
			r.status = 125
		}
	})
	return r.status
}

// noTempDir is the interpreter's own directory for temporary files, where
// the library would make the named pipes of process substitution: a
// path that can never exist (/dev/null is no directory), so that <(...)
// reached where no handler looks (a trap) fails there instead of leaving
// pipes in the workspace. What the script and its programs see as TMPDIR
// is the workspace.
const noTempDir = "/dev/null/process-substitution-is-not-supported"

func interpret(programs *sandbox.Programs, args []string, r *reporter) interpReport {
	if len(args) != 1 {
		return interpReport{Error: "interpreter: want one configuration argument"}
	}
	var cfg interpConfig
	if err := json.Unmarshal([]byte(args[0]), &cfg); err != nil {
		return interpReport{Error: "interpreter: bad configuration: " + err.Error()}
	}
	t := &tool{allow: map[string]bool{}, allowList: cfg.Allow, envAllow: cfg.EnvAllow, maxProcs: max(cfg.MaxProcs, 1)}
	for _, name := range cfg.Allow {
		t.allow[name] = true
	}
	root, err := os.OpenRoot(".")
	if err != nil {
		return interpReport{Error: "interpreter: opening the workspace: " + err.Error()}
	}
	defer root.Close()
	env := []string{"PATH=" + sandbox.DefaultPath, "HOME=" + cfg.Home, "LANG=C.UTF-8", "TMPDIR=" + cfg.Home}
	c := &call{tool: t, dir: cfg.Home, root: root, slots: make(chan struct{}, t.maxProcs), env: env, programs: programs}
	// The runner takes its directory for temporary files from TMPDIR when
	// it is made; the prelude sets the script's TMPDIR afterwards.
	env = append([]string{"PATH=" + sandbox.DefaultPath, "HOME=" + cfg.Home, "LANG=C.UTF-8", "TMPDIR=" + noTempDir}, cfg.Env...)
	prelude, err := syntax.NewParser().Parse(strings.NewReader("TMPDIR="+syntaxQuote(cfg.Home)), "")
	if err != nil {
		return interpReport{Error: "interpreter: " + err.Error()}
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(cfg.Command), "")
	if err != nil {
		return interpReport{Error: err.Error()}
	}
	cwd := c.dir
	if cfg.Cwd != "" && cfg.Cwd != "." {
		cwd = c.dir + "/" + cfg.Cwd
	}
	if r := c.precheck(file, cwd); r != nil {
		return interpReport{Refusal: registry.ToolError(r.msg, r.suggestion)}
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c.abort = stop
	runner, err := interp.New(
		interp.Env(expand.ListEnviron(env...)),
		interp.Dir(cwd),
		interp.StdIO(os.Stdin, os.Stdout, os.Stderr),
		interp.ExecHandlers(c.execMiddleware),
		interp.CallHandler(c.callHandler),
		interp.OpenHandler(c.open),
		interp.StatHandler(c.stat),
		interp.ReadDirHandler2(c.readDir),
		interp.AccessHandler(c.access),
	)
	if err != nil {
		return interpReport{Error: "interpreter: " + err.Error()}
	}
	c.exit = func(rep interpReport) { os.Exit(r.send(rep)) }
	if err := runner.Run(ctx, prelude); err != nil {
		return interpReport{Error: "interpreter: " + err.Error()}
	}
	runErr := runner.Run(ctx, file)
	if r := c.firstRefusal(); r != nil {
		return interpReport{Refusal: r}
	}
	var rep interpReport
	if runErr != nil {
		var status interp.ExitStatus
		if !errors.As(runErr, &status) {
			return interpReport{Error: runErr.Error()}
		}
		rep.ExitCode = int(status)
	}
	return rep
}

// syntaxQuote quotes s as one shell word.
func syntaxQuote(s string) string {
	q, err := syntax.Quote(s, syntax.LangBash)
	if err != nil {
		// Only a NUL byte or invalid UTF-8 cannot be quoted; the
		// workspace's name has neither.
		return "''"
	}
	return q
}
