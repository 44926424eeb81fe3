package shell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/interp"
	"mvdan.cc/sh/v3/syntax"

	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// checkProgram decides whether the program name may run with args.
func (c *call) checkProgram(name string, args []string) *refusal {
	if strings.Contains(name, "/") {
		return &refusal{
			msg:        fmt.Sprintf("program %q is refused: run programs by name only, not by path", name),
			suggestion: fmt.Sprintf("Use the bare name, e.g. %q instead of %q. Allowed programs: %s.", filepath.Base(name), name, strings.Join(c.allowList, ", ")),
		}
	}
	if !c.allow[name] {
		use := "Use only these programs: " + strings.Join(c.allowList, ", ") + ", and shell builtins"
		if len(c.allowList) == 0 {
			use = "No programs are installed for this tool: use shell builtins"
		}
		return &refusal{
			msg:        fmt.Sprintf("program %q is not allowed", name),
			suggestion: use + " (echo, printf, test, cd, read, ...). Shells and interpreters cannot be run.",
		}
	}
	if name == "sort" {
		// GNU sort runs --compress-program (any unambiguous prefix from
		// --co) on its temporary files.
		for _, a := range args {
			if a == "--" {
				break
			}
			if strings.HasPrefix(a, "--co") {
				return &refusal{msg: "sort --compress-program is refused: it runs another program", suggestion: "Run sort without --compress-program."}
			}
		}
	}
	return nil
}

// execMiddleware runs every external program: it never calls next (the
// interpreter's default handler, which would exec anything on PATH).
func (c *call) execMiddleware(interp.ExecHandlerFunc) interp.ExecHandlerFunc {
	return func(ctx context.Context, args []string) error {
		hc := interp.HandlerCtx(ctx)
		if r := c.checkProgram(args[0], args[1:]); r != nil {
			fmt.Fprintf(hc.Stderr, "%s: %s\n", args[0], r.msg)
			return c.refuse(r)
		}
		if ctx.Err() != nil || !c.begin() {
			return ctx.Err()
		}
		defer c.running.Done()
		select {
		case c.slots <- struct{}{}:
			defer func() { <-c.slots }()
		default:
			return c.refuse(&refusal{
				msg:        fmt.Sprintf("more than %d programs would run at the same time", c.maxProcs),
				suggestion: "Start fewer background jobs (&) or use shorter pipelines.",
			})
		}
		stdout, stderr := hc.Stdout, hc.Stderr
		var subst *substWriter
		if sb, ok := stdout.(*strings.Builder); ok {
			// $(...) collects output in memory: bound it.
			subst = &substWriter{sb: sb}
			if stderr == stdout {
				stderr = subst // same writer, so exec serialises the writes
			}
			stdout = subst
		}
		code, err := c.start(ctx, hc, args, stdout, stderr)
		if subst != nil && subst.over {
			return c.refuse(substTooLarge())
		}
		switch {
		case errors.Is(err, sandbox.ErrNotFound):
			fmt.Fprintf(hc.Stderr, "%s: command not found\n", args[0])
			return interp.ExitStatus(127)
		case ctx.Err() != nil:
			return ctx.Err() // stop the interpreter
		case err != nil:
			return c.refuse(&refusal{msg: fmt.Sprintf("%s could not be started in the sandbox: %v", args[0], err), suggestion: "This is a problem of the service, not of the command; do not retry."})
		case code != 0:
			return interp.ExitStatus(uint8(min(code, 255)))
		}
		return nil
	}
}

// start runs one allowed program from the interpreter's process, which is
// already confined: the program inherits its Landlock domain, rlimits and
// process group (which the parent kills as a whole), and starts in the
// interpreter's working directory, named relative to the workspace the
// process is in.
func (c *call) start(ctx context.Context, hc interp.HandlerContext, args []string, stdout, stderr io.Writer) (int, error) {
	path, err := sandbox.LookPath(args[0])
	if err != nil {
		return 0, err
	}
	rel, ok := c.inside(hc.Dir, hc.Dir)
	if !ok {
		return 0, fmt.Errorf("the working directory %s is outside the workspace", hc.Dir)
	}
	cmd := exec.CommandContext(ctx, path)
	cmd.Args = args
	cmd.Dir = rel
	cmd.Env = append(slices.Clone(c.env), append(c.childEnv(hc.Env), "PWD="+hc.Dir)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = hc.Stdin, stdout, stderr
	cmd.WaitDelay = time.Second
	// Through the launcher, which gives the program the per-program
	// limits: this process's own are relative to what it holds.
	if err = c.programs.Start(cmd); err == nil {
		err = cmd.Wait()
	}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exitErr.ExitCode(), nil
	case errors.Is(err, exec.ErrWaitDelay):
		return 0, nil
	}
	return 0, err
}

// substWriter bounds what a program writes into a $(...) capture.
type substWriter struct {
	sb   *strings.Builder
	over bool
}

func (w *substWriter) Write(p []byte) (int, error) {
	if w.sb.Len()+len(p) > maxVariableBytes {
		w.over = true
		return 0, errSubstTooLarge
	}
	return w.sb.Write(p)
}

var errSubstTooLarge = errors.New("command substitution output too large")

func substTooLarge() *refusal {
	return &refusal{
		msg:        fmt.Sprintf("the output captured by $(...) is larger than %d bytes", maxVariableBytes),
		suggestion: "Redirect large output to a file in the workspace and read only what you need (e.g. with head or grep).",
	}
}

// childEnv passes the allowlisted variables the script has exported.
func (c *call) childEnv(env expand.Environ) []string {
	var out []string
	for _, name := range c.envAllow {
		if v := env.Get(name); v.IsSet() && v.Exported && v.Kind == expand.String {
			out = append(out, name+"="+v.Str)
		}
	}
	return out
}

// callHandler runs before every simple command, builtins and functions
// included: it keeps cd inside the workspace and the variables bounded.
func (c *call) callHandler(ctx context.Context, args []string) ([]string, error) {
	hc := interp.HandlerCtx(ctx)
	total := 0
	hc.Env.Each(func(_ string, v expand.Variable) bool {
		total += len(v.Str)
		for _, s := range v.List {
			total += len(s)
		}
		for k, s := range v.Map {
			total += len(k) + len(s)
		}
		return total <= maxVariableBytes
	})
	if total > maxVariableBytes {
		return nil, c.refuse(&refusal{
			msg:        fmt.Sprintf("the command line's variables hold more than %d bytes", maxVariableBytes),
			suggestion: "Write large data to a file in the workspace instead of keeping it in variables.",
		})
	}
	if sb, ok := hc.Stdout.(*strings.Builder); ok && sb.Len() > maxVariableBytes {
		return nil, c.refuse(substTooLarge()) // builtins writing into $(...)
	}
	// "command eval …" and "builtin eval …" run eval all the same.
	inner := args
	for len(inner) > 1 && (inner[0] == "command" || inner[0] == "builtin") {
		inner = inner[1:]
		for len(inner) > 1 && strings.HasPrefix(inner[0], "-") {
			inner = inner[1:]
		}
	}
	switch inner[0] {
	case "eval":
		if r := c.checkEval(strings.Join(inner[1:], " "), "eval"); r != nil {
			return nil, c.refuse(r)
		}
	case "trap":
		targs := inner[1:]
		if len(targs) > 0 && targs[0] == "--" {
			targs = targs[1:]
		}
		if len(targs) > 1 && !strings.HasPrefix(targs[0], "-") {
			if r := c.checkEval(targs[0], "trap"); r != nil {
				return nil, c.refuse(r)
			}
		}
	case "source", ".":
		if len(inner) > 1 {
			if r := c.checkSource(hc.Dir, inner[1]); r != nil {
				return nil, c.refuse(r)
			}
		}
	case "cd", "pushd":
		target := ""
		for _, a := range args[1:] {
			if !strings.HasPrefix(a, "-") || a == "-" {
				target = a
				break
			}
		}
		switch target {
		case "":
			target = c.dir // cd with no argument goes HOME, the workspace
		case "-":
			target = hc.Env.Get("OLDPWD").String()
		}
		if _, ok := c.inside(hc.Dir, target); !ok {
			return nil, c.refuse(&refusal{
				msg:        fmt.Sprintf("%s %s: the working directory must stay inside the workspace", args[0], target),
				suggestion: "Use directories inside the workspace, with relative paths.",
			})
		}
	}
	return args, nil
}

// checkEval refuses, before eval (or trap) takes it, code that the
// syntax check would have refused had it been written in the command line
// itself: process substitution and coproc (such code is parsed only when
// it runs). Code that does not parse is left to the builtin to report.
func (c *call) checkEval(code, builtin string) *refusal {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(code), "")
	if err != nil {
		return nil
	}
	return unsupportedIn(f, "in the code given to "+builtin)
}

// maxSourceCheck bounds the file checkSource reads to check it.
const maxSourceCheck = 1 << 20

// checkSource refuses to source a file outside the workspace, saying so
// (the open handler alone would speak of redirections), and a file in it
// that uses process substitution or coproc.
func (c *call) checkSource(cwd, name string) *refusal {
	rel, ok := c.inside(cwd, name)
	if !ok {
		return &refusal{
			msg:        fmt.Sprintf("source %s is refused: only files inside the workspace can be sourced", name),
			suggestion: "Source a script in the workspace by its relative path, e.g. source ./lib.sh.",
		}
	}
	f, err := c.root.Open(rel)
	if err != nil {
		return nil // source reports it (or finds the name in PATH, which open refuses)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSourceCheck+1))
	if err != nil || len(b) > maxSourceCheck {
		return nil // too large to check here: noTempDir stops <(...) all the same
	}
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(bytes.NewReader(b), name)
	if err != nil {
		return nil
	}
	return unsupportedIn(file, "in "+name)
}

// unsupportedIn refuses process substitution and coproc in f; where says
// where f comes from.
func unsupportedIn(f *syntax.File, where string) *refusal {
	var ref *refusal
	syntax.Walk(f, func(n syntax.Node) bool {
		if ref == nil {
			ref = unsupported(n)
		}
		return ref == nil
	})
	if ref != nil {
		ref.msg += " (" + where + ")"
	}
	return ref
}

// unsupported refuses the shell features this tool does not run: process
// substitution, whose named pipes the interpreter would make in the
// workspace and open itself, and coproc.
func unsupported(n syntax.Node) *refusal {
	switch n.(type) {
	case *syntax.ProcSubst:
		return &refusal{msg: "process substitution <(...) and >(...) is not supported", suggestion: "Use a pipe, or write to a file in the workspace first."}
	case *syntax.CoprocClause:
		return &refusal{msg: "coproc is not supported", suggestion: "Use a pipe or background job instead."}
	}
	return nil
}

// inside returns path relative to the workspace, and whether it is inside
// (lexically; symlinks are checked by os.Root when opening).
func (c *call) inside(cwd, path string) (string, bool) {
	if path == "" {
		return "", false
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(cwd, path)
	}
	rel, err := filepath.Rel(c.dir, filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// rwFile adapts a reader or writer to what the open handler returns.
type rwFile struct {
	io.Reader
	io.Writer
}

func (rwFile) Close() error { return nil }

// open serves every file the interpreter opens itself (redirections,
// source): /dev/null, /dev/stdin, /dev/stdout, /dev/stderr, and files inside
// the workspace through os.Root, which also refuses symlinks out.
func (c *call) open(ctx context.Context, path string, flag int, perm os.FileMode) (io.ReadWriteCloser, error) {
	hc := interp.HandlerCtx(ctx)
	switch path {
	case "/dev/null":
		return os.OpenFile(os.DevNull, flag, perm)
	case "/dev/stdin":
		return rwFile{Reader: orEmpty(hc.Stdin), Writer: io.Discard}, nil
	case "/dev/stdout":
		return rwFile{Reader: strings.NewReader(""), Writer: hc.Stdout}, nil
	case "/dev/stderr":
		return rwFile{Reader: strings.NewReader(""), Writer: hc.Stderr}, nil
	}
	rel, ok := c.inside(hc.Dir, path)
	if !ok {
		// A redirection or source (which may have found the name in PATH).
		return nil, c.refuse(&refusal{
			msg:        fmt.Sprintf("opening %s is refused: redirections and source may only name files inside the workspace (and /dev/null)", path),
			suggestion: "Use a relative path inside the workspace, e.g. > out.txt or source ./lib.sh.",
		})
	}
	return c.root.OpenFile(rel, flag, perm)
}

func orEmpty(r io.Reader) io.Reader {
	if r == nil {
		return strings.NewReader("")
	}
	return r
}

// stat serves tests (-e, -f, ...), cd and globbing: nothing outside the
// workspace exists for the script.
func (c *call) stat(ctx context.Context, path string, followSymlinks bool) (fs.FileInfo, error) {
	if path == "/dev/null" {
		return os.Stat(path)
	}
	rel, ok := c.inside(interp.HandlerCtx(ctx).Dir, path)
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: path, Err: fs.ErrNotExist}
	}
	if followSymlinks {
		return c.root.Stat(rel)
	}
	return c.root.Lstat(rel)
}

// readDir serves globbing, inside the workspace only.
func (c *call) readDir(ctx context.Context, path string) ([]fs.DirEntry, error) {
	rel, ok := c.inside(interp.HandlerCtx(ctx).Dir, path)
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: path, Err: fs.ErrNotExist}
	}
	f, err := c.root.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

// access serves -r, -w and -x and cd, inside the workspace only.
func (c *call) access(ctx context.Context, path string, mode interp.AccessMode) error {
	rel, ok := c.inside(interp.HandlerCtx(ctx).Dir, path)
	if !ok {
		return &fs.PathError{Op: "access", Path: path, Err: fs.ErrPermission}
	}
	fi, err := c.root.Stat(rel)
	if err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	need := os.FileMode(0)
	if mode&interp.AccessRead != 0 {
		need |= 0o444
	}
	if mode&interp.AccessWrite != 0 {
		need |= 0o222
	}
	if mode&interp.AccessExec != 0 {
		need |= 0o111
	}
	// Approximate: some permission class has each requested bit.
	for _, bits := range []os.FileMode{0o444, 0o222, 0o111} {
		if need&bits != 0 && perm&bits == 0 {
			return &fs.PathError{Op: "access", Path: path, Err: fs.ErrPermission}
		}
	}
	return nil
}

// precheck refuses, before anything runs, what can be seen in the syntax
// tree: programs named literally that are not allowed (also after exec,
// command and builtin and inside functions, $(...) and backticks),
// redirections to and source of literal paths outside the workspace, and
// process substitution. What is only known at run time (names from
// variables, eval, sourced files) is checked again by the handlers.
func (c *call) precheck(f *syntax.File, cwd string) *refusal {
	funcs := map[string]bool{}
	syntax.Walk(f, func(n syntax.Node) bool {
		if fd, ok := n.(*syntax.FuncDecl); ok && fd.Name != nil {
			funcs[fd.Name.Value] = true
		}
		return true
	})
	var ref *refusal
	syntax.Walk(f, func(n syntax.Node) bool {
		if ref != nil {
			return false
		}
		if ref = unsupported(n); ref != nil {
			return false
		}
		switch n := n.(type) {
		case *syntax.CmdSubst:
			// $(<file) would copy the whole file into memory without
			// any handler seeing it; run it as $(cat <file), bounded.
			if len(n.Stmts) == 1 && catShortcut(n.Stmts[0]) {
				if !c.allow["cat"] {
					ref = &refusal{msg: "$(<file) needs the cat program, which is not allowed", suggestion: "Read files with the allowed programs."}
				} else {
					n.Stmts[0].Cmd = &syntax.CallExpr{Args: []*syntax.Word{{Parts: []syntax.WordPart{&syntax.Lit{Value: "cat"}}}}}
				}
			}
		case *syntax.CallExpr:
			ref = c.precheckCall(n, funcs, cwd)
		case *syntax.Redirect:
			switch n.Op {
			case syntax.RdrOut, syntax.AppOut, syntax.RdrIn, syntax.RdrInOut, syntax.RdrClob, syntax.RdrAll, syntax.AppAll:
				if p, ok := literal(n.Word); ok && !specialDevice(p) {
					if _, in := c.inside(cwd, p); !in {
						ref = &refusal{
							msg:        fmt.Sprintf("redirection to %s is refused: only files inside the workspace (and /dev/null) can be opened", p),
							suggestion: "Use a relative path inside the workspace, e.g. > out.txt.",
						}
					}
				}
			}
		}
		return ref == nil
	})
	return ref
}

// catShortcut reports whether stmt is the "<file" of $(<file), as the
// interpreter recognises it.
func catShortcut(st *syntax.Stmt) bool {
	return st.Cmd == nil && !st.Negated && !st.Background && !st.Coprocess && !st.Disown &&
		len(st.Redirs) == 1 && st.Redirs[0].Op == syntax.RdrIn
}

// specialDevice reports whether a redirection target is one of the
// device names the open handler serves.
func specialDevice(p string) bool {
	switch p {
	case "/dev/null", "/dev/stdin", "/dev/stdout", "/dev/stderr":
		return true
	}
	return false
}

func (c *call) precheckCall(ce *syntax.CallExpr, funcs map[string]bool, cwd string) *refusal {
	var words []string
	for _, w := range ce.Args {
		s, ok := literal(w)
		if !ok {
			break
		}
		words = append(words, s)
	}
	if len(words) == 0 {
		return nil
	}
	// exec, command and builtin run their first operand.
	for len(words) > 0 && (words[0] == "exec" || words[0] == "command" || words[0] == "builtin") {
		wrapper := words[0]
		words = words[1:]
		for len(words) > 0 && strings.HasPrefix(words[0], "-") {
			if wrapper == "command" && (words[0] == "-v" || words[0] == "-V") {
				return nil // a lookup, not a run
			}
			words = words[1:]
		}
		if wrapper == "builtin" {
			return nil // builtin runs builtins only
		}
	}
	if len(words) == 0 {
		return nil
	}
	name := words[0]
	if (name == "source" || name == ".") && len(words) > 1 && !funcs[name] && strings.Contains(words[1], "/") {
		if _, in := c.inside(cwd, words[1]); !in {
			return &refusal{
				msg:        fmt.Sprintf("source %s is refused: only files inside the workspace can be sourced", words[1]),
				suggestion: "Source a script in the workspace by its relative path, e.g. source ./lib.sh.",
			}
		}
	}
	if funcs[name] || interp.IsBuiltin(name) {
		return nil
	}
	return c.checkProgram(name, words[1:])
}

// literal returns the value of a word made only of literal text and
// quotes without expansions.
func literal(w *syntax.Word) (string, bool) {
	if w == nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.Contains(p.Value, "\\") {
				return "", false // escapes: leave it to the run-time check
			}
			b.WriteString(p.Value)
		case *syntax.SglQuoted:
			if p.Dollar {
				return "", false
			}
			b.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok || strings.Contains(l.Value, "\\") {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}
