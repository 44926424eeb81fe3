package custom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"golang.org/x/sys/unix"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/stream"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// stderrLimit bounds the stderr kept for an error message, its first
// quarter from the beginning and the rest from the end, where a program's
// error usually is; the executor cuts the message further to the tool's
// errorMessageLimit, also keeping its beginning and end.
const stderrLimit = 16 << 10

// defaultOutputLimit bounds stdout when a request carries no limit.
const defaultOutputLimit = 1 << 20

type execBackend struct {
	argv      []string
	dir       string
	env       []string
	allowExec []string
	readOnly  []string
	sb        *sandbox.Sandbox
	ws        *workspace.Workspace
	prop      propagation.TextMapPropagator
	log       *slog.Logger
}

func newExec(r *config.Resource, s *ExecSpec, o Options) (*execBackend, error) {
	if o.Sandbox == nil || o.Workspace == nil {
		return nil, r.Errorf("exec tools need the sandbox and the workspace (a wiring error)")
	}
	if err := o.Sandbox.Usable(); err != nil {
		return nil, fmt.Errorf("%s: %w", r.Source(), err)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return nil, r.Errorf("exec.command is empty: give argv, e.g. [./tool.py, --json]")
	}
	b := &execBackend{sb: o.Sandbox, ws: o.Workspace, prop: o.Propagator, log: o.Logger}
	base := r.Dir()
	prog, err := resolveProgram(s.Command[0], base)
	if err != nil {
		return nil, r.Errorf("exec.command: %v", err)
	}
	b.argv = append([]string{prog}, s.Command[1:]...)
	deps, err := sandbox.ExecDeps(prog)
	if err != nil {
		return nil, r.Errorf("exec.command: %v", err)
	}
	b.allowExec = deps
	for _, name := range s.AllowExec {
		p, err := resolveProgram(name, base)
		if err != nil {
			return nil, r.Errorf("exec.allowExec: %v", err)
		}
		deps, err := sandbox.ExecDeps(p)
		if err != nil {
			return nil, r.Errorf("exec.allowExec: %v", err)
		}
		for _, d := range append([]string{p}, deps...) {
			if !slices.Contains(b.allowExec, d) {
				b.allowExec = append(b.allowExec, d)
			}
		}
	}
	if s.Dir != "" {
		d := absFrom(base, s.Dir)
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, r.Errorf("exec.dir %s is not a directory", d)
		}
		b.dir = d
		b.readOnly = append(b.readOnly, d)
	}
	for _, p := range s.ReadPaths {
		a := absFrom(base, p)
		if _, err := os.Stat(a); err != nil {
			return nil, r.Errorf("exec.readPaths: %v", err)
		}
		b.readOnly = append(b.readOnly, a)
	}
	env, err := config.Environ(s.Env, o.LookupEnv)
	if err != nil {
		return nil, r.Errorf("exec.env: %v", err)
	}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if err := sandbox.CheckEnvName(name); err != nil {
			return nil, r.Errorf("exec.env: %v", err)
		}
	}
	b.env = env
	return b, nil
}

// resolveProgram finds a program: a name in DefaultPath, an absolute
// path, or a path relative to base (the YAML file's directory).
func resolveProgram(name, base string) (string, error) {
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(base, name)
	}
	return sandbox.LookPath(name)
}

func absFrom(base, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(base, p)
}

func (b *execBackend) run(ctx context.Context, req *registry.Request, export string) (any, error) {
	in, err := envelope(req, export)
	if err != nil {
		return nil, err
	}
	var owner workspace.Owner
	if req.Caller != nil {
		owner = workspace.OwnerOf(req.Caller.ID, req.Caller.Workspace)
	}
	wd, err := b.ws.Open(owner, req.Context.InstanceKey)
	if errors.Is(err, workspace.ErrLink) {
		return nil, registry.ToolError("the workspace of this instanceKey cannot be opened: "+err.Error(),
			"Use another instanceKey; a symbolic link where a workspace directory belongs is never followed.")
	}
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	wf, err := wd.File()
	if err != nil {
		return nil, err
	}
	defer wf.Close()
	env := slices.Clone(b.env)
	carrier := propagation.MapCarrier{}
	b.prop.Inject(ctx, carrier)
	for _, k := range carrier.Keys() {
		env = append(env, strings.ToUpper(k)+"="+carrier.Get(k))
	}
	limit := req.MaxOutputBytes
	if limit <= 0 {
		limit = defaultOutputLimit
	}
	stderr := sandbox.NewHeadTail(stderrLimit, stderrLimit/4)
	// A cut output is returned as a JSON string: TextWithin fits what is
	// kept, escapes and marker, to the limit.
	stdout := stream.New(ctx, req, "stdout", max(limit, 256))
	res, err := b.sb.Run(ctx, sandbox.Spec{
		Args:           b.argv,
		Workspace:      wd.Path,
		WorkDir:        wf,
		Dir:            b.dir,
		Env:            env,
		Stdin:          bytes.NewReader(in),
		Stdout:         stdout,
		Stderr:         stderr,
		MaxOutputBytes: limit,
		AllowExec:      b.allowExec,
		ReadOnly:       b.readOnly,
	})
	switch {
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrSetup):
		b.log.Error("custom tool: program could not be started", "tool", req.Name, "error", err)
		return nil, backendError("the tool's program could not be started: %v", err)
	case err != nil:
		return nil, err // the context ended: the executor reports timeout or cancellation
	case res.ExitCode != 0:
		text := stderrText(stderr)
		if strings.TrimSpace(text) == "" && stdout.Total() > 0 {
			// A program that reports its error on stdout (as JSON, say)
			// and exits non-zero: that is all it said.
			head, tail, omitted := stdout.Parts()
			return nil, exitError(res.ExitCode, "", headTail(head, tail, omitted, "stdout", stderrLimit))
		}
		return nil, exitError(res.ExitCode, text, "")
	}
	out := []byte(stdout.TextWithin(req, limit))
	if stdout.Truncated() {
		req.ReportTruncated(stdout.Total())
	}
	return output(out, stdout.Truncated()), nil
}

// stderrText is what the program wrote to stderr: all of it, or its
// beginning and end with what was left out between them said.
func stderrText(c *sandbox.Capture) string {
	head, tail, omitted := c.Parts()
	return headTail(head, tail, omitted, "stderr", stderrLimit)
}

// headTail is a text of which head and tail were kept and omitted bytes
// between them were not, cut further to at most limit bytes, a quarter
// from its beginning and the rest from its end, where a program's or a
// backend's error usually is; what is left out is said, naming the text
// (name).
func headTail(head, tail []byte, omitted int64, name string, limit int) string {
	if over := len(head) + len(tail) - limit; over > 0 {
		keepHead := min(len(head), limit/4)
		keepTail := min(len(tail), limit-keepHead)
		h := registry.TrimPartialRune(head[:keepHead])
		t := tail[len(tail)-keepTail:]
		for i := 0; i < utf8.UTFMax-1 && len(t) > 0 && !utf8.RuneStart(t[0]); i++ {
			t = t[1:]
		}
		omitted += int64(len(head) - len(h) + len(tail) - len(t))
		head, tail = h, t
	}
	if omitted == 0 {
		return string(head) + string(tail)
	}
	return fmt.Sprintf("%s … [%d bytes of %s omitted] … %s", head, omitted, name, tail)
}

// exitError is the error of a program that exited with code, saying what
// it wrote to stderr, or, when that is nothing, to stdout.
func exitError(code int, stderr, stdout string) error {
	what := fmt.Sprintf("the program exited with status %d", code)
	if code > 128 && code < 128+65 {
		// The shell's convention: a program killed by signal n, or one
		// that exited with 128+n itself, which nobody can tell apart.
		sig := syscall.Signal(code - 128)
		name := unix.SignalName(sig)
		if name == "" {
			name = fmt.Sprintf("signal %d", code-128)
		}
		what = fmt.Sprintf("the program ended with status %d: killed by %s (%s), or it exited with that status itself", code, name, sig)
	}
	msg := strings.TrimSpace(stderr)
	switch out := strings.TrimSpace(stdout); {
	case msg != "":
		msg = what + ": " + msg
	case out != "":
		msg = what + " and wrote nothing to stderr; it wrote to stdout: " + out
	default:
		msg = what + " and wrote nothing to stderr"
	}
	return &registry.Error{Code: registry.CodeTool, Message: msg}
}
