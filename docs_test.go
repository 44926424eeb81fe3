package toolsvc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDocs runs every console block of README.md and docs/*.md against a
// real toolsvc, so the documentation cannot drift from what the service
// does. The convention (also in docs/README.md):
//
//   - A line starting with "$ " is a command (a trailing "\" or an open
//     single quote continues it);
//     the lines until the next command are its expected output.
//   - "..." alone on a line matches any number of lines; "…" inside a line
//     matches any text.
//   - The blocks of a file run in order against one instance started on
//     its defaults from the repository root; localhost:8080 and
//     127.0.0.1:8080 are rewritten to its address, and "go run ./cmd/toolsvc"
//     to the binary the test built.
//   - <!-- docs: env K=V … --> right before a block runs that block against
//     its own instance started with those settings.
//   - A block that starts programs itself ("… &") runs in a scratch copy
//     of the repository and its own process group (see block.run).
//   - <!-- docs: skip REASON --> skips a block that needs what the machine
//     may lack (Docker, kubectl, an identity provider); the reason is
//     logged, and its commands are only checked to parse (bash -n).
//
// Workspace and data live in temporary directories, so nothing is left in
// the tree.
func TestDocs(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "jq", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the docs examples need %s, which is not installed", tool)
		}
	}
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md"}, files...)
	bin := filepath.Join(t.TempDir(), "toolsvc")
	build := exec.Command("go", "build", "-o", bin, "./cmd/toolsvc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// A block's `go run` of an example prints "go: downloading …" for each
	// module the example needs that is not in the module cache yet, which
	// the documented output does not show. `go test ./...` has them all
	// before any test runs; run alone, this package has only its own.
	if out, err := exec.Command("go", "mod", "download").CombinedOutput(); err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			blocks, err := parseBlocks(string(src))
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var shared *instance
			for _, b := range blocks {
				if b.skip != "" {
					// Not run, but still read by bash: a skipped
					// block cannot rot into something no shell takes.
					for _, c := range b.commands {
						if out, err := exec.Command("bash", "-n", "-c", c.text).CombinedOutput(); err != nil {
							t.Errorf("%s:%d: skipped block's command does not parse: %v\n%s", file, c.line, err, out)
						}
					}
					t.Logf("%s:%d: skipped (checked by bash -n only): %s", file, b.line, b.skip)
					continue
				}
				inst := shared
				switch {
				case b.startsToolsvc():
					inst = nil
				case b.env != nil:
					inst = startInstance(t, bin, b.env)
				case shared == nil:
					shared = startInstance(t, bin, nil)
					inst = shared
				}
				b.run(t, file, bin, inst)
			}
		})
	}
}

// block is one console block.
type block struct {
	line     int
	env      []string
	skip     string
	commands []*command
}

type command struct {
	line int
	text string
	want []string
}

var directive = regexp.MustCompile(`^<!-- docs: (env|skip) (.*) -->$`)

// parseBlocks reads the console blocks of a Markdown file and the
// directives right before them.
func parseBlocks(src string) ([]*block, error) {
	var blocks []*block
	lines := strings.Split(src, "\n")
	var pending []string // env or skip of the next block
	var pendingKind string
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], " \t")
		if m := directive.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			pendingKind, pending = m[1], strings.Fields(m[2])
			if m[1] == "skip" {
				pending = []string{m[2]}
			}
			continue
		}
		if strings.TrimSpace(l) != "```console" {
			if strings.TrimSpace(l) != "" {
				pendingKind, pending = "", nil
			}
			continue
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " "))]
		b := &block{line: i + 1}
		switch pendingKind {
		case "env":
			b.env = pending
		case "skip":
			b.skip = pending[0]
		}
		pendingKind, pending = "", nil
		var cur *command
		for i++; ; i++ {
			if i >= len(lines) {
				return nil, fmt.Errorf("line %d: console block is not closed", b.line)
			}
			l := strings.TrimPrefix(strings.TrimRight(lines[i], " \t"), indent)
			if l == "```" {
				break
			}
			if strings.HasPrefix(l, "$ ") {
				cur = &command{line: i + 1, text: strings.TrimPrefix(l, "$ ")}
				for (strings.HasSuffix(cur.text, "\\") || strings.Count(cur.text, "'")%2 == 1) && i+1 < len(lines) {
					i++
					cur.text += "\n" + strings.TrimPrefix(strings.TrimRight(lines[i], " \t"), indent)
				}
				b.commands = append(b.commands, cur)
				continue
			}
			if cur == nil {
				if l != "" {
					return nil, fmt.Errorf("line %d: output before the first command", i+1)
				}
				continue
			}
			if l != "" {
				cur.want = append(cur.want, l)
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// background reports whether a command leaves a program running (it
// ends with "&").
func (c *command) background() bool {
	return strings.HasSuffix(strings.TrimSpace(c.text), "&")
}

// startsToolsvc reports whether the block starts its own toolsvc in the
// background, in which case it gets no instance from the test.
func (b *block) startsToolsvc() bool {
	for _, c := range b.commands {
		if c.background() && strings.Contains(c.text, "go run ./cmd/toolsvc") {
			return true
		}
	}
	return false
}

// instance is a toolsvc started for the docs.
type instance struct {
	addr string
	dir  string
	// bin is the binary the test built, which "go run ./cmd/toolsvc" in
	// a command stands for.
	bin string
}

// startInstance starts the binary from the repository root on its
// defaults, with workspace and data in a temporary directory, plus env,
// on a port the kernel picks.
func startInstance(t *testing.T, bin string, env []string) *instance {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LANG=C.UTF-8",
		"TOOLSVC_ADDR=127.0.0.1:0",
		"TOOLSVC_WORKSPACE=" + filepath.Join(dir, "workspace"),
		"TOOLSVC_DATA_DIR=" + filepath.Join(dir, "data"),
	}, env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	addr := make(chan string, 1)
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			var line struct{ Msg, Addr string }
			if !sent && json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "toolsvc listening" {
				addr <- line.Addr
				sent = true
			}
		}
		if !sent {
			close(addr)
		}
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			t.Fatalf("toolsvc %v did not start:\n%s", env, log.String())
		}
		return &instance{addr: a, dir: dir, bin: bin}
	case <-time.After(60 * time.Second):
		t.Fatalf("toolsvc %v did not listen within 60s", env)
	}
	return nil
}

// run runs the commands of b in one bash and compares each output.
//
// The bash gets its own TOOLSVC_ADDR (a free port), TOOLSVC_WORKSPACE and
// TOOLSVC_DATA_DIR, so a toolsvc the block starts itself listens there
// and keeps its files in a temporary directory; "localhost:8080" then
// means that toolsvc, and the next command runs once it answers
// /healthz. A block that starts programs in the background runs in a
// scratch copy of the repository (what it builds or writes vanishes with
// it) and in its own process group, which is killed when it ends.
func (b *block) run(t *testing.T, file, bin string, inst *instance) {
	t.Helper()
	const marker = "@@docs-command-done@@"
	own := freeAddr(t)
	addr := own
	if inst != nil {
		addr = inst.addr
	}
	dir := t.TempDir()
	var script strings.Builder
	script.WriteString("set -o pipefail\n")
	fmt.Fprintf(&script, "export TOOLSVC_ADDR=%s TOOLSVC_WORKSPACE=%s TOOLSVC_DATA_DIR=%s\n",
		own, filepath.Join(dir, "workspace"), filepath.Join(dir, "data"))
	cwd, background := "", false
	for _, c := range b.commands {
		text := strings.NewReplacer("localhost:8080", addr, "127.0.0.1:8080", addr, "go run ./cmd/toolsvc", bin).Replace(c.text)
		if c.background() {
			// What it prints from now on would land in the middle of
			// the next commands' output; it goes to a log shown when the
			// block fails.
			text = fmt.Sprintf("( %s ) >>%s 2>&1", text, filepath.Join(dir, "background.log"))
		}
		fmt.Fprintf(&script, "%s\n", text)
		if c.background() {
			background = true
			if strings.Contains(c.text, "go run ./cmd/toolsvc") {
				// Wait for it as a person would, up to a minute.
				fmt.Fprintf(&script, "for _ in $(seq 600); do curl -sf -o /dev/null http://%s/healthz && break; sleep 0.1; done\n", own)
			}
		}
		fmt.Fprintf(&script, "printf '\\n%s\\n'\n", marker)
	}
	if background {
		cwd = scratchCopy(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = cwd
	cmd.Env = os.Environ()
	// Its own process group, killed at the end with whatever the block
	// left running in the background.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// Output to a file, not a pipe: programs left in the background hold
	// it open, and the block is done when bash is.
	outFile, err := os.CreateTemp(dir, "output")
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	err = cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	out, rerr := os.ReadFile(outFile.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	bg, _ := os.ReadFile(filepath.Join(dir, "background.log"))
	if err != nil {
		t.Errorf("%s:%d: the block failed: %v\n%s\nprograms in the background:\n%s", file, b.line, err, out, bg)
		return
	}
	parts := strings.Split(string(out), "\n"+marker+"\n")
	for i, c := range b.commands {
		if i >= len(parts) {
			t.Errorf("%s:%d: no output for %q", file, c.line, c.text)
			continue
		}
		var got []string
		for l := range strings.SplitSeq(parts[i], "\n") {
			if l = strings.TrimRight(l, " \t\r"); l != "" {
				got = append(got, l)
			}
		}
		if !matchLines(c.want, got) {
			t.Errorf("%s:%d: $ %s\nwant:\n%s\ngot:\n%s\nprograms in the background:\n%s", file, c.line, c.text, strings.Join(c.want, "\n"), strings.Join(got, "\n"), bg)
		}
	}
}

// freeAddr returns a loopback address with a port the kernel picked and
// nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// scratchCopy copies the files git tracks (and those not yet added) into
// a temporary directory and returns it.
func scratchCopy(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := t.TempDir()
	for name := range strings.SplitSeq(strings.TrimRight(string(out), "\x00"), "\x00") {
		src, err := os.Stat(name)
		if err != nil || !src.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, src.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// matchLines matches output lines against expected lines with "..."
// lines and "…" in-line wildcards.
func matchLines(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if want[0] == "..." {
		for i := 0; i <= len(got); i++ {
			if matchLines(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && matchLine(want[0], got[0]) && matchLines(want[1:], got[1:])
}

func matchLine(want, got string) bool {
	if !strings.Contains(want, "…") {
		return want == got
	}
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got)
}

// TestDocsMatcher pins the wildcard rules the docs rely on.
func TestDocsMatcher(t *testing.T) {
	cases := []struct {
		want, got []string
		ok        bool
	}{
		{[]string{"a", "b"}, []string{"a", "b"}, true},
		{[]string{"a"}, []string{"a", "b"}, false},
		{[]string{"a", "...", "d"}, []string{"a", "b", "c", "d"}, true},
		{[]string{"a", "...", "d"}, []string{"a", "d"}, true},
		{[]string{"..."}, nil, true},
		{[]string{`{"id":"…","n":1}`}, []string{`{"id":"x1","n":1}`}, true},
		{[]string{`{"id":"…","n":1}`}, []string{`{"id":"x1","n":2}`}, false},
	}
	for _, c := range cases {
		if got := matchLines(c.want, c.got); got != c.ok {
			t.Errorf("matchLines(%q, %q) = %v", c.want, c.got, got)
		}
	}
	blocks, err := parseBlocks("<!-- docs: env A=1 B=2 -->\n```console\n$ echo a \\\n  b\na b\n...\n```\n")
	if err != nil || len(blocks) != 1 || strings.Join(blocks[0].env, " ") != "A=1 B=2" || len(blocks[0].commands) != 1 ||
		blocks[0].commands[0].text != "echo a \\\n  b" || strings.Join(blocks[0].commands[0].want, "|") != "a b|..." {
		t.Errorf("parseBlocks: %+v %v", blocks, err)
	}
}

// TestReadmeTestCommandIsWhatCIRuns keeps the README's test command with
// PostgreSQL and .ci/run in step: CI runs exactly that command (with
// -count=1, so that no cached result stands in for a run).
func TestReadmeTestCommandIsWhatCIRuns(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for l := range strings.SplitSeq(string(readme), "\n") {
		if strings.HasPrefix(l, "TOOLSVC_TEST_POSTGRES_URL=") && strings.Contains(l, "go test") {
			want = l
		}
	}
	if want == "" {
		t.Fatal("README.md shows no test command with TOOLSVC_TEST_POSTGRES_URL")
	}
	for l := range strings.SplitSeq(string(ci), "\n") {
		if strings.ReplaceAll(strings.TrimSpace(l), " -count=1", "") == want {
			return
		}
	}
	t.Errorf(".ci/run does not run the README's test command\n%s", want)
}
