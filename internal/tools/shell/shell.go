// Package shell provides the shell__exec built-in tool: a command line in
// Bash syntax, parsed and interpreted in-process (mvdan.cc/sh; no /bin/sh),
// in which every external program is checked against an allowlist and run
// through the sandbox (own process group, scrubbed environment, bounded
// output, Landlock and rlimits where the kernel has them), and every file
// the interpreter itself opens for a redirection stays inside the
// workspace.
package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/stream"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// ToolName is the name of the tool.
const ToolName = "shell__exec"

// Defaults of Options.
const (
	DefaultMaxOutputBytes = 8 << 10
	DefaultMaxProcesses   = 32
	// maxVariableBytes bounds what the script's variables may hold, checked
	// before every command, so a loop cannot grow them without bound.
	maxVariableBytes = 16 << 20
	maxCommandBytes  = 16 << 10
	maxStdinBytes    = 1 << 20
	// DefaultMemoryLimit is the interpreter's memory ceiling when
	// Options.MemoryLimit is 0.
	DefaultMemoryLimit = 512 << 20
)

// DefaultAllow returns the conservative default allowlist: programs that
// read, compare, transform or manage files and cannot run other programs
// on request. Left out on purpose: shells and interpreters (sh, bash,
// python3, perl, awk, sed — GNU sed's e command runs a shell), programs
// that run other programs (env, xargs, find -exec, nice, nohup, timeout,
// setsid, split --filter, tar --to-command, git hooks), network clients
// (curl, wget, nc, ssh) and ln (links out of the workspace confuse other
// tools). sort is in, with its --compress-program option refused.
func DefaultAllow() []string {
	return []string{
		"base64", "basename", "cat", "cmp", "comm", "cp", "cut", "date", "diff", "dirname",
		"du", "echo", "expand", "false", "fold", "grep", "head", "join", "ls", "md5sum",
		"mkdir", "mktemp", "mv", "nl", "od", "paste", "printf", "pwd", "readlink", "realpath",
		"rev", "rm", "rmdir", "seq", "sha1sum", "sha256sum", "sha512sum", "sleep", "sort",
		"stat", "tac", "tail", "tee", "test", "touch", "tr", "true", "uniq", "unexpand", "wc",
	}
}

// Options configure the shell tool.
type Options struct {
	// Workspace maps a call's instance key to the directory it runs in.
	Workspace *workspace.Workspace
	// Sandbox runs each program. Required.
	Sandbox *sandbox.Sandbox
	// Allow lists the program names that may run; nil is DefaultAllow.
	Allow []string
	// EnvAllow lists the environment variable names a call may set (with
	// its env argument or in the command line) and programs receive.
	EnvAllow []string
	// MaxOutputBytes bounds each of stdout and stderr; 0 is
	// DefaultMaxOutputBytes.
	MaxOutputBytes int
	// MaxProcesses bounds the programs one call runs at the same time; 0
	// is DefaultMaxProcesses.
	MaxProcesses int
	// Timeout is the tool's timeout (and the largest timeoutMs a call may
	// ask for); 0 leaves the registry default.
	Timeout time.Duration
	// MemoryLimit is the memory ceiling (RLIMIT_DATA) of the process that
	// interprets the command line, which the programs it starts inherit;
	// 0 is DefaultMemoryLimit.
	MemoryLimit uint64
	// Logger may be nil.
	Logger *slog.Logger
}

// Tools returns the shell__exec tool. It fails when the options are
// unusable: no workspace or sandbox, a program name with a '/', or an
// environment variable name the sandbox refuses.
func Tools(o Options) ([]*registry.Tool, error) {
	if o.Workspace == nil || o.Sandbox == nil {
		return nil, errors.New("shell: Workspace and Sandbox are required")
	}
	if err := o.Sandbox.Usable(); err != nil {
		return nil, fmt.Errorf("shell: %w", err)
	}
	allow := o.Allow
	if allow == nil {
		allow = DefaultAllow()
	}
	t := &tool{
		ws:       o.Workspace,
		sb:       o.Sandbox,
		allow:    map[string]bool{},
		perOut:   o.MaxOutputBytes,
		maxProcs: o.MaxProcesses,
		log:      o.Logger,
	}
	if t.perOut <= 0 {
		t.perOut = DefaultMaxOutputBytes
	}
	if t.maxProcs <= 0 {
		t.maxProcs = DefaultMaxProcesses
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.memLimit = o.MemoryLimit
	if t.memLimit == 0 {
		t.memLimit = DefaultMemoryLimit
	}
	for _, name := range allow {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if strings.ContainsAny(name, "/\x00") {
			return nil, fmt.Errorf("shell: allowed program %q: give program names, not paths", name)
		}
		t.allow[name] = true
	}
	// A program allowed but not installed (an image without coreutils)
	// is left out of the allowlist, the description and the refusals'"'"'
	// suggestions: the model is told what it can run, not "command not
	// found" for what it was told it could.
	var missing []string
	for _, name := range sortedKeys(t.allow) {
		p, err := sandbox.LookPath(name)
		if err != nil {
			delete(t.allow, name)
			missing = append(missing, name)
			continue
		}
		t.allowList = append(t.allowList, name)
		deps, err := sandbox.ExecDeps(p)
		if err != nil {
			return nil, fmt.Errorf("shell: allowed program %s: %w", name, err)
		}
		for _, d := range append([]string{p}, deps...) {
			if !slices.Contains(t.execDeps, d) {
				t.execDeps = append(t.execDeps, d)
			}
		}
	}
	if len(missing) > 0 {
		t.log.Warn("shell: allowed programs that are not installed are left out of shell__exec; install them where toolsvc runs (its PATH) to offer them",
			"missing", strings.Join(missing, ","), "offered", len(t.allowList))
	}
	for _, name := range o.EnvAllow {
		if err := sandbox.CheckEnvName(name); err != nil {
			return nil, fmt.Errorf("shell: environment allowlist: %w", err)
		}
		if !slices.Contains(t.envAllow, name) {
			t.envAllow = append(t.envAllow, name)
		}
	}
	slices.Sort(t.envAllow)
	maxTimeout := o.Timeout
	if maxTimeout <= 0 {
		maxTimeout = 10 * time.Minute
	}
	def := registry.Definition{
		Name:        ToolName,
		Description: t.description(),
		Parameters:  t.schema(maxTimeout),
		OutputSchema: json.RawMessage(`{"type": "object", "required": ["exitCode", "stdoutTruncated", "stderrTruncated", "durationMs", "stdout", "stderr"],
  "properties": {"exitCode": {"type": "integer"}, "stdoutTruncated": {"type": "boolean"}, "stderrTruncated": {"type": "boolean"},
    "durationMs": {"type": "integer"}, "stdout": {"type": "string"}, "stderr": {"type": "string"}}}`),
		Tier:           registry.Privileged,
		Timeout:        o.Timeout,
		MaxOutputBytes: 2*t.perOut + 1024,
		Annotations: &registry.Annotations{
			Title:           "Run a shell command in the workspace",
			ReadOnlyHint:    ptr(false),
			DestructiveHint: ptr(true),
			IdempotentHint:  ptr(false),
			OpenWorldHint:   ptr(!o.Sandbox.Status().NetRules),
		},
		Tags: []string{"shell", "files"},
	}
	return []*registry.Tool{{Definition: def, Handler: registry.Func(t.run)}}, nil
}

func ptr[T any](v T) *T { return &v }

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

type tool struct {
	ws        *workspace.Workspace
	sb        *sandbox.Sandbox
	allow     map[string]bool
	allowList []string
	envAllow  []string
	perOut    int
	maxProcs  int
	log       *slog.Logger
	// execDeps are what the interpreter's process may execute: every
	// allowed program and its loader or interpreter.
	execDeps []string
	memLimit uint64
}

func (t *tool) description() string {
	var b strings.Builder
	b.WriteString("Run a command line in the workspace and return its exit code, stdout and stderr. ")
	b.WriteString("Bash syntax works (pipes, redirections, &&, ||, ;, variables, loops, functions, $(...)); it is interpreted by the service, not by a real shell. ")
	if len(t.allowList) > 0 {
		fmt.Fprintf(&b, "Only these programs can be run, by name: %s. ", strings.Join(t.allowList, ", "))
	} else {
		b.WriteString("No programs are installed for it: only shell builtins work. ")
	}
	b.WriteString("Shell builtins (echo, printf, test/[, cd, read, export, ...) are always available. ")
	b.WriteString("Other programs, shells and interpreters (sh, bash, python, ...), paths such as ./x or /bin/ls, and process substitution <(...) are refused. ")
	b.WriteString("Redirections may only name files inside the workspace (and /dev/null). ")
	st := t.sb.Status()
	switch {
	case st.FSRules && st.NetRules:
		b.WriteString("Programs cannot read files outside the workspace and the system directories, cannot write outside the workspace, and have no network. ")
	case st.FSRules:
		b.WriteString("Programs cannot read files outside the workspace and the system directories, nor write outside the workspace. ")
	}
	fmt.Fprintf(&b, "A non-zero exit code is reported in exitCode, not as an error. Each of stdout and stderr keeps at most %d bytes (less when it needs escaping in JSON), its beginning and its end around a marker that says how much was omitted and how to read the rest (stdoutTruncated/stderrTruncated and stdoutBytes/stderrBytes say so). A command line stopped by its timeout or by a refusal is an error whose message shows what it wrote until then. ", t.perOut)
	b.WriteString("Background jobs (&) are stopped when the command line finishes; use wait to wait for them.")
	return b.String()
}

func (t *tool) schema(maxTimeout time.Duration) json.RawMessage {
	props := map[string]any{
		"command": map[string]any{
			"type": "string", "minLength": 1, "maxLength": maxCommandBytes,
			"description": "The command line, in Bash syntax, e.g. \"ls -l | head -n 5\" or \"grep -c TODO notes.txt > count.txt\".",
		},
		"cwd": map[string]any{
			"type": "string", "maxLength": 1024,
			"description": "Working directory, relative to the workspace (default: the workspace itself). Must exist and stay inside the workspace.",
		},
		"stdin": map[string]any{
			"type": "string", "maxLength": maxStdinBytes,
			"description": "Text given to the command line on standard input.",
		},
		"timeoutMs": map[string]any{
			"type": "integer", "minimum": 1, "maximum": maxTimeout.Milliseconds(),
			"description": "Stop the command line (and every program it started) after this many milliseconds.",
		},
	}
	if len(t.envAllow) > 0 {
		props["env"] = map[string]any{
			"type":                 "object",
			"description":          "Environment variables to set, by name. Allowed names: " + strings.Join(t.envAllow, ", ") + ".",
			"propertyNames":        map[string]any{"enum": t.envAllow},
			"additionalProperties": map[string]any{"type": "string", "maxLength": 4096},
			"maxProperties":        len(t.envAllow),
		}
	}
	b, err := json.Marshal(map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             []string{"command"},
		"additionalProperties": false,
	})
	if err != nil {
		panic(err) // a literal map of strings and numbers always marshals
	}
	return b
}

// args are the tool's arguments.
type args struct {
	Command   string            `json:"command"`
	Cwd       string            `json:"cwd"`
	Stdin     string            `json:"stdin"`
	TimeoutMs int64             `json:"timeoutMs"`
	Env       map[string]string `json:"env"`
}

// Output is the tool's result. The stream fields come last, so a cut by
// the executor's output limit keeps the exit code and flags.
type Output struct {
	ExitCode        int   `json:"exitCode"`
	StdoutTruncated bool  `json:"stdoutTruncated"`
	StderrTruncated bool  `json:"stderrTruncated"`
	DurationMs      int64 `json:"durationMs"`
	// StdoutBytes and StderrBytes count what the command line wrote, kept
	// or not.
	StdoutBytes int64  `json:"stdoutBytes"`
	StderrBytes int64  `json:"stderrBytes"`
	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
}

func invalid(msg, suggestion string) *registry.Error {
	return &registry.Error{Code: registry.CodeInvalidArguments, Message: msg, Suggestion: suggestion}
}

func (t *tool) run(ctx context.Context, req *registry.Request) (any, error) {
	start := time.Now()
	var a args
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	if strings.ContainsRune(a.Command, 0) {
		return nil, invalid("command contains a NUL byte", "Remove the NUL byte from the command.")
	}
	var owner workspace.Owner
	if req.Caller != nil {
		owner = workspace.OwnerOf(req.Caller.ID, req.Caller.Workspace)
	}
	wd, err := t.ws.Open(owner, req.Context.InstanceKey)
	if errors.Is(err, workspace.ErrLink) {
		return nil, registry.ToolError("the workspace of this instanceKey cannot be opened: "+err.Error(),
			"Use another instanceKey; a symbolic link where a workspace directory belongs is never followed.")
	}
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	dir := wd.Path
	cwd, rerr := resolveCwd(wd.Root, dir, a.Cwd)
	if rerr != nil {
		return nil, rerr
	}
	var env []string
	for _, name := range sortedKeys(keysOf(a.Env)) {
		if !slices.Contains(t.envAllow, name) {
			return nil, invalid(fmt.Sprintf("environment variable %s may not be set", name), t.envSuggestion())
		}
		if strings.ContainsRune(a.Env[name], 0) {
			return nil, invalid(fmt.Sprintf("environment variable %s contains a NUL byte", name), "Remove the NUL byte.")
		}
		env = append(env, name+"="+a.Env[name])
	}

	// Parsed and checked here too, so what can be refused before anything
	// runs is refused without starting a process.
	file, perr := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(a.Command), "")
	if perr != nil {
		return nil, invalid("the command is not valid shell syntax: "+perr.Error(), "Fix the syntax; quote arguments that contain special characters.")
	}
	c := &call{tool: t, dir: dir}
	if err := c.precheck(file, cwd); err != nil {
		return nil, invalid(err.msg+"; nothing was run", err.suggestion)
	}

	if a.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, time.Duration(a.TimeoutMs)*time.Millisecond, errArgTimeout)
		defer cancel()
	}
	limit := t.perOut
	if req.MaxOutputBytes > 0 {
		limit = max(min(limit, (req.MaxOutputBytes-1024)/2), 256)
	}
	// The spills outlive a timeout: what was written before it is kept
	// with the error that says so.
	sctx := context.WithoutCancel(ctx)
	stdout, stderr := stream.New(sctx, req, "stdout", limit), stream.New(sctx, req, "stderr", limit)
	rel, _ := c.inside(dir, cwd)
	enc, err := json.Marshal(interpConfig{
		Command: a.Command, Home: dir, Cwd: rel, Allow: t.allowList, EnvAllow: t.envAllow, Env: env, MaxProcs: t.maxProcs,
	})
	if err != nil {
		return nil, err
	}
	wf, err := wd.File()
	if err != nil {
		return nil, err
	}
	defer wf.Close()
	var stdin io.Reader
	if a.Stdin != "" {
		stdin = strings.NewReader(a.Stdin)
	}
	// The interpreter itself runs in the confined child, under the memory
	// ceiling, and starts the programs from there: whatever the command
	// line does to the interpreter, it does to that process only.
	res, runErr := t.sb.Run(ctx, sandbox.Spec{
		Entry:     InterpreterEntry,
		Args:      []string{string(enc)},
		Workspace: dir,
		WorkDir:   wf,
		Stdin:     stdin,
		Stdout:    stdout,
		Stderr:    stderr,
		AllowExec: t.execDeps,
		DataBytes: t.memLimit,
	})
	streams := &outputs{ctx: sctx, req: req, stdout: stdout, stderr: stderr}
	if err := ctx.Err(); err != nil {
		switch {
		case errors.Is(context.Cause(ctx), errArgTimeout):
			return nil, &registry.Error{Code: registry.CodeTimeout,
				Message:    fmt.Sprintf("the command line did not finish within timeoutMs=%d and was stopped with every program it started.", a.TimeoutMs) + streams.sofar(),
				Suggestion: "Use a larger timeoutMs, or make the command do less (e.g. limit its input or add head)."}
		case errors.Is(err, context.DeadlineExceeded):
			within := "its timeout"
			if !req.Deadline.IsZero() {
				within = req.Deadline.Sub(start).Round(10 * time.Millisecond).String()
			}
			return nil, &registry.Error{Code: registry.CodeTimeout,
				Message:    fmt.Sprintf("tool %s did not finish within %s and was stopped with every program it started.", ToolName, within) + streams.sofar(),
				Suggestion: "Try a smaller or simpler command, or a larger timeoutMs."}
		}
		return nil, err // canceled: the executor reports E_CANCELED
	}
	if runErr != nil {
		t.log.Error("shell: the interpreter could not be started", "error", runErr)
		return nil, registry.ToolError("the command line could not be started in the sandbox: "+runErr.Error(),
			"This is a problem of the service, not of the command; do not retry.")
	}
	var rep interpReport
	if len(res.Report) == 0 || json.Unmarshal(res.Report, &rep) != nil {
		err := t.died(res, string(captured(stderr)))
		err.Message += streams.sofar()
		return nil, err
	}
	switch {
	case rep.Refusal != nil:
		return nil, registry.ToolError(rep.Refusal.Message+"; the command line was stopped there (commands before it may have run)."+streams.sofar(), rep.Refusal.Suggestion)
	case rep.Error != "":
		return nil, registry.ToolError("the command line failed: "+rep.Error+"."+streams.sofar(), "Check the command.")
	}
	out := Output{
		ExitCode:        rep.ExitCode,
		DurationMs:      res.Duration.Milliseconds(),
		StdoutTruncated: stdout.Truncated(),
		StderrTruncated: stderr.Truncated(),
		StdoutBytes:     stdout.Total(),
		StderrBytes:     stderr.Total(),
	}
	outLimit := req.MaxOutputBytes
	if outLimit <= 0 {
		outLimit = 2*t.perOut + 1024
	}
	streams.fit(&out, outLimit)
	if out.StdoutTruncated || out.StderrTruncated {
		req.ReportTruncated(out.StdoutBytes + out.StderrBytes)
	}
	return out, nil
}

// outputs are the streams of one call, read once each (reading a cut
// stream closes its spill) into the result or an error's message.
type outputs struct {
	ctx            context.Context
	req            *registry.Request
	stdout, stderr *stream.Stream
}

// fit sets out's Stdout and Stderr so that out, written as JSON, fits in
// limit bytes (the call's output limit): the fields besides the streams
// first, then each stream within what the other leaves it, escapes
// included (a control character takes six bytes), the one that needs
// less taking what it needs. A stream that does not fit keeps its
// beginning and end around a marker that says how to read all of it.
func (o *outputs) fit(out *Output, limit int) {
	fixed, err := json.Marshal(out)
	if err != nil {
		panic(err) // integers, booleans and strings always marshal
	}
	// The two empty strings are in fixed already; the budgets count the
	// quotes of their own.
	room := limit - (len(fixed) - 4)
	var cut bool
	bo, be := split(room, o.need(o.stdout, "stdout"), o.need(o.stderr, "stderr"))
	out.Stdout, cut = o.text(o.stdout, "stdout", bo)
	out.StdoutTruncated = out.StdoutTruncated || cut
	out.Stderr, cut = o.text(o.stderr, "stderr", be)
	out.StderrTruncated = out.StderrTruncated || cut
}

// errExcerptBytes bounds what an error's message shows of the streams,
// within the default error message limit of 1000 characters.
const errExcerptBytes = 600

// sofar says, for an error's message, what the command line wrote before
// it was stopped: each stream whole, or its beginning and end around a
// marker that says how to read all of it.
func (o *outputs) sofar() string {
	if o.stdout.Total() == 0 && o.stderr.Total() == 0 {
		return " It wrote nothing to stdout or stderr."
	}
	var b strings.Builder
	b.WriteString(" What it wrote before:")
	bo, be := split(errExcerptBytes, o.need(o.stdout, "stdout"), o.need(o.stderr, "stderr"))
	for _, s := range []struct {
		name   string
		st     *stream.Stream
		budget int
	}{{"stdout", o.stdout, bo}, {"stderr", o.stderr, be}} {
		if s.st.Total() == 0 {
			fmt.Fprintf(&b, "\n[%s: nothing]", s.name)
			continue
		}
		text, _ := o.text(s.st, s.name, s.budget)
		fmt.Fprintf(&b, "\n[%s, %d bytes:]\n%s", s.name, s.st.Total(), text)
	}
	return b.String()
}

// split shares room between two texts that need a and b: each gets half,
// and what one does not need goes to the other.
func split(room, a, b int) (int, int) {
	half := room / 2
	switch {
	case a <= half:
		return a, room - a
	case b <= room-half:
		return room - b, b
	}
	return half, room - half
}

// need is about what the stream takes as a JSON string when nothing
// bounds it (at least that for a cut one).
func (o *outputs) need(s *stream.Stream, name string) int {
	head, tail, omitted := s.Parts()
	n := registry.QuotedLen(string(head)) + registry.QuotedLen(string(tail)) - 2
	if omitted > 0 {
		// The longest marker: with a spill, kept in part.
		total := s.Total()
		spill := &registry.SpillInfo{ToolCallID: o.req.CallID, Stream: name, TotalBytes: total, StoredBytes: total - 1}
		n += registry.QuotedLen(registry.CutMarker(total, total, o.req.CallID, name, total, spill)) + 2
	}
	return n
}

// text returns the stream as text that takes at most budget bytes as a
// JSON string, and whether it was cut here. A stream its capture cut
// already is cut within the budget around its marker (see
// stream.TextWithin). One that was kept whole but escapes to more than
// the budget is spilled here, so the marker can say how to read all of
// it, and cut the same way.
func (o *outputs) text(s *stream.Stream, name string, budget int) (string, bool) {
	if s.Truncated() {
		return s.TextWithin(o.req, budget), false
	}
	whole := string(captured(s))
	if registry.QuotedLen(whole) <= budget {
		return whole, false
	}
	var spill *registry.SpillInfo
	if sink := o.req.SpillStream(o.ctx, name); sink != nil {
		_, _ = sink.Write([]byte(whole))
		spill, _ = sink.Close() // a failed spill is logged; the marker says it was not kept
	}
	mid := len(whole) / 2
	for mid > 0 && !utf8.RuneStart(whole[mid]) {
		mid--
	}
	return stream.Fit(o.req.CallID, name, whole[:mid], whole[mid:], int64(len(whole)), spill, budget), true
}

// captured is what the stream's capture holds: all of it when it was not
// cut.
func captured(s *stream.Stream) []byte {
	head, tail, _ := s.Parts()
	return append(head, tail...)
}

// died explains an interpreter that ended without reporting, naming the
// limit it ran into where its last words or its end say which: its
// memory ceiling (the Go runtime says "out of memory", or cannot start a
// thread, when RLIMIT_DATA or RLIMIT_AS refuses it more), its CPU time,
// or else its exit status.
func (t *tool) died(res sandbox.Result, stderr string) *registry.Error {
	// What the runtime said is the operator's to read, whatever the model
	// is told.
	t.log.Warn("shell: the interpreter ended without reporting", "exitCode", res.ExitCode, "stderr", clip(stderr, 2000))
	lim := t.sb.Limits()
	switch {
	case sandbox.ThreadFailure(stderr):
		msg := fmt.Sprintf("the command line's interpreter could not start another thread and was stopped: every program running at once holds one, and they used up its memory ceiling of TOOLSVC_TOOL_MEMORY_LIMIT (%d bytes beyond what it held at start)", t.memLimit)
		if lim.Processes > 0 {
			msg += fmt.Sprintf(" or the process limit TOOLSVC_SHELL_RLIMIT_NPROC (%d)", lim.Processes)
		}
		return registry.ToolError(msg+".", "Run fewer programs at the same time: fewer background jobs (&), shorter pipelines.")
	case sandbox.OutOfMemory(stderr):
		return registry.ToolError(
			fmt.Sprintf("the command line needed more memory than its interpreter's ceiling of TOOLSVC_TOOL_MEMORY_LIMIT (%d bytes beyond what it held at start) and was stopped.", t.memLimit),
			"Keep less in variables and expansions (large brace expansions, doubling strings, recursive functions or pipelines); write large data to files and process it with the allowed programs.")
	case lim.CPUSeconds > 0 && res.ExitCode == 128+int(syscall.SIGXCPU):
		return registry.ToolError(
			fmt.Sprintf("the command line's interpreter used up its CPU time limit of %d seconds (TOOLSVC_SHELL_RLIMIT_CPU_SECONDS) and was stopped.", lim.CPUSeconds), cpuFix)
	case res.ExitCode == 128+int(syscall.SIGKILL):
		msg := "the command line's interpreter was killed (SIGKILL)"
		if lim.CPUSeconds > 0 {
			msg += fmt.Sprintf(": the kernel does that when it has used its CPU time limit of %d seconds (TOOLSVC_SHELL_RLIMIT_CPU_SECONDS), or when the machine runs out of memory", lim.CPUSeconds)
		}
		return registry.ToolError(msg+".", cpuFix)
	}
	return registry.ToolError(fmt.Sprintf("the command line's interpreter stopped unexpectedly (exit status %d).", res.ExitCode),
		"Check the command for runaway recursion or expansions.")
}

// cpuFix is the suggestion for an interpreter stopped for its CPU time.
const cpuFix = "Do the work with the allowed programs rather than in long shell loops, or split it into several calls."

// errArgTimeout is the cause when the call's own timeoutMs expires.
var errArgTimeout = errors.New("timeoutMs expired")

func keysOf(m map[string]string) map[string]bool {
	out := make(map[string]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func (t *tool) envSuggestion() string {
	if len(t.envAllow) == 0 {
		return "Do not pass env: no environment variables may be set."
	}
	return "Only these names may be set: " + strings.Join(t.envAllow, ", ") + "."
}

// resolveCwd checks the cwd argument: relative, existing, a directory,
// inside the workspace (also through symlinks).
func resolveCwd(root *os.Root, dir, cwd string) (string, *registry.Error) {
	if cwd == "" || cwd == "." {
		return dir, nil
	}
	const fix = "Give cwd as a path relative to the workspace, e.g. \"src\", or leave it out."
	if filepath.IsAbs(cwd) || strings.ContainsRune(cwd, 0) {
		return "", invalid(fmt.Sprintf("cwd %q must be relative to the workspace", cwd), fix)
	}
	clean := filepath.Clean(cwd)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", invalid(fmt.Sprintf("cwd %q leaves the workspace", cwd), fix)
	}
	fi, err := root.Stat(clean)
	if err != nil {
		return "", invalid(fmt.Sprintf("cwd %q: %v", cwd, unwrapPathError(err)), fix+" Create the directory first if needed.")
	}
	if !fi.IsDir() {
		return "", invalid(fmt.Sprintf("cwd %q is not a directory", cwd), fix)
	}
	return filepath.Join(dir, clean), nil
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// refusal is a command line doing something the tool does not allow.
type refusal struct {
	msg, suggestion string
}

func (r *refusal) Error() string { return r.msg }

// call is the state of one shell__exec call.
type call struct {
	*tool
	dir   string
	root  *os.Root
	slots chan struct{}
	// env is the base environment of the programs the script runs.
	env []string
	// abort stops the whole command line, background jobs included.
	abort context.CancelFunc
	// exit, in the interpreter's process, reports and ends the process.
	exit func(interpReport)
	// programs starts the programs, in the interpreter's process.
	programs *sandbox.Programs

	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup
	refused *registry.Error
}

// refuse records the first refusal and stops the whole command line (a
// fatal error in a background job or pipeline stage would not stop the
// rest), and returns the error that stops the interpreter.
func (c *call) refuse(r *refusal) error {
	c.mu.Lock()
	if c.refused == nil {
		c.refused = registry.ToolError(r.msg, r.suggestion)
	}
	c.mu.Unlock()
	if c.abort != nil {
		c.abort()
	}
	if c.exit != nil {
		// Stop here: report the refusal and leave every program still
		// running to the parent's process-group kill.
		c.exit(interpReport{Refusal: c.firstRefusal()})
	}
	return r
}

func (c *call) firstRefusal() *registry.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.refused
}

// begin registers a program about to run; false once the call is over.
func (c *call) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.running.Add(1)
	return true
}

func (c *call) closeAndWait() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.running.Wait()
}
