package deploy

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The runtime image is tested for real (TestContainerImage): the
// Dockerfile's build stage is followed to build both binaries, and its
// final stage becomes a Containerfile on scratch plus the few files
// distroless/static:nonroot has, so the image tested is the one the
// Dockerfile describes, line for line, without pulling a base image.
// Podman builds and runs it; without podman the test is skipped, unless
// TOOLSVC_TEST_CONTAINER=1 (set by .ci/run) makes that a failure.

// instruction is one Dockerfile instruction, its continuation lines joined.
type instruction struct {
	line int    // where it starts
	cmd  string // FROM, COPY, … in upper case
	args string // the rest, as written
}

func (in instruction) String() string { return fmt.Sprintf("line %d: %s %s", in.line, in.cmd, in.args) }

// parseDockerfile splits a Dockerfile into instructions, dropping
// comments (parser directives included) and joining lines that end with a
// backslash.
func parseDockerfile(src string) []instruction {
	var out []instruction
	var cur *instruction
	for i, raw := range strings.Split(src, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur == nil) {
			continue
		}
		cont := strings.HasSuffix(line, "\\")
		line = strings.TrimSpace(strings.TrimSuffix(line, "\\"))
		if cur == nil {
			cmd, args, _ := strings.Cut(line, " ")
			cur = &instruction{line: i + 1, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		} else if line != "" {
			cur.args += " " + line
		}
		if !cont {
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

// shellWords splits a command line as sh does for the forms Dockerfile
// RUN lines use here: blanks, single and double quotes, backslashes. It
// expands $NAME and ${NAME} outside single quotes through vars, and
// refuses anything it does not know.
func shellWords(s string, vars map[string]string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote byte
	expand := func(i int) (int, error) {
		j := i + 1
		var name string
		if j < len(s) && s[j] == '{' {
			end := strings.IndexByte(s[j:], '}')
			if end < 0 {
				return 0, fmt.Errorf("unterminated ${ in %q", s)
			}
			name, j = s[j+1:j+end], j+end+1
		} else {
			k := j
			for k < len(s) && (s[k] == '_' || s[k] >= 'A' && s[k] <= 'Z' || s[k] >= 'a' && s[k] <= 'z' || s[k] >= '0' && s[k] <= '9') {
				k++
			}
			name, j = s[j:k], k
		}
		v, ok := vars[name]
		if !ok {
			return 0, fmt.Errorf("variable %q has no value in the container test", name)
		}
		w.WriteString(v)
		return j, nil
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case quote == '\'':
			if c == '\'' {
				quote = 0
			} else {
				w.WriteByte(c)
			}
			i++
		case c == '$':
			n, err := expand(i)
			if err != nil {
				return nil, err
			}
			inWord, i = true, n
		case quote == '"':
			if c == '"' {
				quote = 0
			} else {
				w.WriteByte(c)
			}
			i++
		case c == '\'' || c == '"':
			quote, inWord = c, true
			i++
		case c == '\\' && i+1 < len(s):
			w.WriteByte(s[i+1])
			inWord, i = true, i+2
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, w.String()), false
				w.Reset()
			}
			i++
		case strings.ContainsRune("|;<>`()*?", rune(c)):
			return nil, fmt.Errorf("%q: the container test does not reproduce shell syntax %q", s, c)
		default:
			w.WriteByte(c)
			inWord = true
			i++
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// goBuild is one `go build` of the Dockerfile's build stage.
type goBuild struct {
	env  []string // NAME=value set for it
	args []string // after "go build", with -o as written
	out  string   // the -o path, under /out
}

// buildStage is what the build stage produces under /out: the go builds
// and the directories it makes.
type buildStage struct {
	builds []goBuild
	dirs   []string
}

// stages splits instructions at FROM: the global ARGs, then each stage.
func stages(ins []instruction) (global []instruction, st [][]instruction) {
	for _, in := range ins {
		if in.cmd == "FROM" {
			st = append(st, []instruction{in})
		} else if len(st) == 0 {
			global = append(global, in)
		} else {
			st[len(st)-1] = append(st[len(st)-1], in)
		}
	}
	return global, st
}

// readBuildStage reads the RUN lines of the stage named build: `go build`
// commands (each with CGO_ENABLED=0, as the runtime image has no C
// library) and `mkdir -p` of directories under /out.
func readBuildStage(ins []instruction, vars map[string]string) (buildStage, error) {
	var bs buildStage
	_, st := stages(ins)
	var build []instruction
	for _, s := range st {
		if strings.HasSuffix(strings.ToLower(s[0].args), " as build") {
			build = s
		}
	}
	if build == nil {
		return bs, errors.New("no stage named build")
	}
	for _, in := range build {
		if in.cmd != "RUN" {
			continue
		}
		words, err := shellWords(in.args, vars)
		if err != nil {
			return bs, fmt.Errorf("%s: %w", in, err)
		}
		for len(words) > 0 && strings.HasPrefix(words[0], "--") { // --mount=…
			words = words[1:]
		}
		for cmd := range splitWords(words, "&&") {
			var env []string
			for len(cmd) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(cmd[0]) {
				env, cmd = append(env, cmd[0]), cmd[1:]
			}
			switch {
			case len(cmd) >= 2 && cmd[0] == "go" && cmd[1] == "mod":
				// Downloads modules; the test's go has them.
			case len(cmd) >= 2 && cmd[0] == "go" && cmd[1] == "build":
				b := goBuild{env: env, args: cmd[2:]}
				if i := slices.Index(b.args, "-o"); i >= 0 && i+1 < len(b.args) {
					b.out = b.args[i+1]
				}
				if !strings.HasPrefix(b.out, "/out/") {
					return bs, fmt.Errorf("%s: a go build whose -o is not under /out: %q", in, cmd)
				}
				if !slices.Contains(env, "CGO_ENABLED=0") {
					return bs, fmt.Errorf("%s: %s is built without CGO_ENABLED=0, but the runtime image has no C library", in, b.out)
				}
				bs.builds = append(bs.builds, b)
			case len(cmd) >= 3 && cmd[0] == "mkdir" && cmd[1] == "-p":
				for _, d := range cmd[2:] {
					if !strings.HasPrefix(d, "/out/") {
						return bs, fmt.Errorf("%s: mkdir of %s, not under /out", in, d)
					}
					bs.dirs = append(bs.dirs, d)
				}
			default:
				return bs, fmt.Errorf("%s: the container test does not know how to reproduce %q; teach it (deploy/container_test.go)", in, strings.Join(cmd, " "))
			}
		}
	}
	if len(bs.builds) == 0 {
		return bs, errors.New("the build stage runs no go build")
	}
	return bs, nil
}

// splitWords yields the runs of words between separators.
func splitWords(words []string, sep string) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		start := 0
		for i, w := range words {
			if w == sep {
				if !yield(words[start:i]) {
					return
				}
				start = i + 1
			}
		}
		yield(words[start:])
	}
}

// distrolessBase is the runtime base the Dockerfile names by default, the
// one runtimeContainerfile knows how to stand in for.
var distrolessBase = regexp.MustCompile(`^gcr\.io/distroless/static(-debian\d+)?:nonroot(@sha256:[0-9a-f]+)?$`)

// standIn is what replaces `FROM ${RUNTIME_IMAGE}`: scratch plus the files
// of distroless/static:nonroot toolsvc can notice — the users and groups
// (nonroot is 65532), the CA certificates, nonroot's home and /tmp.
const standIn = `FROM scratch
COPY distroless/etc/ /etc/
COPY --chown=65532:65532 distroless/home/nonroot /home/nonroot
COPY distroless/tmp /tmp`

// runtimeContainerfile turns the Dockerfile's final stage into a
// Containerfile that podman builds from local files: FROM ${RUNTIME_IMAGE}
// (which must default to distroless/static:nonroot) becomes standIn, and
// `COPY --from=build /out/x` copies out/x, which must be something the
// build stage makes. Every other instruction is kept as written; one that
// cannot be reproduced on scratch (RUN, ADD, a COPY from elsewhere) is an
// error, so the test cannot drift from the Dockerfile unnoticed.
func runtimeContainerfile(ins []instruction, bs buildStage) (string, error) {
	global, st := stages(ins)
	if len(st) < 2 {
		return "", errors.New("no runtime stage after the build stage")
	}
	made := map[string]bool{}
	for _, b := range bs.builds {
		made[b.out] = true
	}
	for _, d := range bs.dirs {
		made[d] = true
	}
	var out strings.Builder
	for _, in := range st[len(st)-1] {
		switch in.cmd {
		case "FROM":
			ref, ok := strings.CutPrefix(in.args, "${")
			name, ok2 := strings.CutSuffix(ref, "}")
			if !ok || !ok2 {
				return "", fmt.Errorf("%s: the runtime stage should start FROM ${RUNTIME_IMAGE}", in)
			}
			base := ""
			for _, g := range global {
				if v, ok := strings.CutPrefix(g.args, name+"="); g.cmd == "ARG" && ok {
					base = v
				}
			}
			if !distrolessBase.MatchString(base) {
				return "", fmt.Errorf("%s: the runtime base %s=%q is not distroless/static:nonroot, which the container test stands in for; teach it", in, name, base)
			}
			out.WriteString(standIn + "\n")
		case "COPY":
			words := strings.Fields(in.args)
			var flags, paths []string
			from := ""
			for _, w := range words {
				if v, ok := strings.CutPrefix(w, "--from="); ok {
					from = v
				} else if strings.HasPrefix(w, "--") {
					flags = append(flags, w)
				} else {
					paths = append(paths, w)
				}
			}
			if from != "build" || len(paths) != 2 || !made[paths[0]] {
				return "", fmt.Errorf("%s: the container test reproduces only COPY --from=build of what the build stage makes under /out", in)
			}
			fmt.Fprintf(&out, "COPY %s\n", strings.Join(append(flags, strings.TrimPrefix(paths[0], "/"), paths[1]), " "))
		case "ARG", "LABEL", "ENV", "USER", "EXPOSE", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "ENTRYPOINT", "CMD", "WORKDIR":
			fmt.Fprintf(&out, "%s %s\n", in.cmd, in.args)
		default:
			return "", fmt.Errorf("%s: the container test cannot reproduce %s on scratch; teach it", in, in.cmd)
		}
	}
	return out.String(), nil
}

// documentedRunFlags returns the flags without a value (--init,
// --read-only, --rm) of the `docker run` line in the Dockerfile's header.
func documentedRunFlags(dockerfile string) []string {
	var run string
	in := false
	for _, line := range strings.Split(dockerfile, "\n") {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			break
		}
		text = strings.TrimSpace(text)
		if r, ok := strings.CutPrefix(text, "Run:"); ok {
			in, text = true, r
		}
		if !in {
			continue
		}
		run += " " + strings.TrimSuffix(text, "\\")
		if !strings.HasSuffix(text, "\\") {
			break
		}
	}
	var flags []string
	for _, w := range strings.Fields(run) {
		if slices.Contains([]string{"--init", "--read-only", "--rm"}, w) {
			flags = append(flags, w)
		}
	}
	return flags
}

// TestDockerfileRunLine pins the run line of the Dockerfile's header and
// of deploy/README.md: --init, because toolsvc as PID 1 does not reap
// orphans it did not start, and --read-only.
func TestDockerfileRunLine(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	flags := documentedRunFlags(string(b))
	for _, want := range []string{"--init", "--read-only"} {
		if !slices.Contains(flags, want) {
			t.Errorf("the Dockerfile's Run line has no %s (it has %v)", want, flags)
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	runs := regexp.MustCompile(`(?m)^docker run (?:.*\\\n)*.*`).FindAllString(string(readme), -1)
	if len(runs) == 0 {
		t.Error("deploy/README.md has no docker run line")
	}
	for _, r := range runs {
		if !strings.Contains(r, " --init ") || !strings.Contains(r, " --read-only ") {
			t.Errorf("deploy/README.md: %q lacks --init or --read-only", r)
		}
	}
}

// testBuildVars are the build arguments the container test builds with.
func testBuildVars() map[string]string {
	return map[string]string{"VERSION": "container-test", "TARGETOS": "linux", "TARGETARCH": runtime.GOARCH}
}

// TestRuntimeContainerfile checks the Dockerfile's stages read as the
// container test needs, and that what it cannot reproduce is refused
// rather than skipped.
func TestRuntimeContainerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	ins := parseDockerfile(string(b))
	bs, err := readBuildStage(ins, testBuildVars())
	if err != nil {
		t.Fatal(err)
	}
	var outs []string
	for _, b := range bs.builds {
		outs = append(outs, b.out)
		if !slices.Contains(b.args, "-trimpath") {
			t.Errorf("%s is built without -trimpath", b.out)
		}
	}
	if !slices.Equal(outs, []string{"/out/toolsvc", "/out/toolsvc-sandbox"}) {
		t.Errorf("the build stage builds %v", outs)
	}
	cf, err := runtimeContainerfile(ins, bs)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FROM scratch\n", "COPY out/toolsvc /usr/local/bin/toolsvc\n", "COPY --chown=65532:65532 out/data /data\n",
		"USER 65532:65532\n", `VOLUME ["/workspace", "/data"]` + "\n", `ENTRYPOINT ["/usr/local/bin/toolsvc"]` + "\n", "HEALTHCHECK "} {
		if !strings.Contains(cf, want) {
			t.Errorf("the Containerfile lacks %q:\n%s", want, cf)
		}
	}

	for _, tc := range []struct {
		name, old, new, err string
	}{
		{"a RUN in the runtime stage", "USER 65532:65532", "RUN adduser x\nUSER 65532:65532", "cannot reproduce RUN"},
		{"another base", "ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot", "ARG RUNTIME_IMAGE=debian:bookworm-slim", "not distroless"},
		{"a copy of what the build does not make", "COPY --from=build /out/toolsvc-sandbox", "COPY --from=build /out/toolsvc-helper", "only COPY --from=build"},
		{"a build with cgo", "CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags \"-s -w\"", "GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags \"-s -w\"", "without CGO_ENABLED=0"},
		{"a step the test does not know", "&& mkdir -p /out/workspace /out/data", "&& cp -r assets /out/assets", "does not know how to reproduce"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(b, []byte(tc.old)) {
				t.Fatalf("the Dockerfile has no %q", tc.old)
			}
			ins := parseDockerfile(strings.Replace(string(b), tc.old, tc.new, 1))
			bs, err := readBuildStage(ins, testBuildVars())
			if err == nil {
				_, err = runtimeContainerfile(ins, bs)
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("got %v, want an error with %q", err, tc.err)
			}
		})
	}
}

// podman returns the podman command, or skips the test (fails it under
// TOOLSVC_TEST_CONTAINER=1) when podman cannot run containers here.
func podman(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("podman")
	if err == nil {
		var out []byte
		if out, err = exec.Command(p, "info", "--format", "{{.Host.OCIRuntime.Name}}").CombinedOutput(); err != nil {
			err = fmt.Errorf("podman info: %v: %s", err, bytes.TrimSpace(out))
		}
	}
	if err != nil {
		msg := fmt.Sprintf("podman is not usable (%v): the runtime image is not tested (apt-get install podman runc; .ci/run does)", err)
		if os.Getenv("TOOLSVC_TEST_CONTAINER") == "1" {
			t.Fatal(msg + "; TOOLSVC_TEST_CONTAINER=1 requires it")
		}
		t.Skip(msg)
	}
	return p
}

// containerHost runs podman for one test and cleans up after it.
type containerHost struct {
	t      *testing.T
	podman string
	base   []string // flags of every podman run
}

// with returns h for subtest t.
func (h *containerHost) with(t *testing.T) *containerHost {
	c := *h
	c.t = t
	return &c
}

// run runs podman and returns its stdout; it fails the test on error.
func (h *containerHost) run(args ...string) string {
	h.t.Helper()
	out, err := h.try(args...)
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// try runs podman and returns its stdout, or an error with its stderr.
func (h *containerHost) try(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(h.podman, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("podman %s: %v: %s%s", strings.Join(args, " "), err, stdout.String(), quietStderr(stderr.String()))
	}
	return stdout.String(), nil
}

// quietStderr drops podman's complaints about systemd, which runs no
// health-check timers here.
func quietStderr(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if l != "" && !strings.Contains(l, "systemd") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// logs returns a container's output, for failure messages.
func (h *containerHost) logs(name string) string {
	var b bytes.Buffer
	cmd := exec.Command(h.podman, "logs", "--tail", "40", name)
	cmd.Stdout, cmd.Stderr = &b, &b
	cmd.Run()
	return quietStderr(b.String())
}

// start runs a container in the background with h.base, the flags given,
// and the image, and removes it when the test ends.
func (h *containerHost) start(name string, flags []string, image string) {
	h.t.Helper()
	h.t.Cleanup(func() { h.try("rm", "-f", "-v", "-t", "0", name) })
	h.run(slices.Concat([]string{"run", "-d", "--name", name}, h.base, flags, []string{image})...)
}

// waitReady polls /readyz until it answers 200, failing fast when the
// container has stopped.
func (h *containerHost) waitReady(name, base string) {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if state, _ := h.try("inspect", "--format", "{{.State.Status}}", name); strings.TrimSpace(state) != "running" || time.Now().After(deadline) {
			h.t.Fatalf("%s is not ready (%s, last %v):\n%s", name, strings.TrimSpace(state), err, h.logs(name))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// client makes authenticated JSON calls to one instance.
type client struct {
	t    *testing.T
	base string
	key  string
}

// do sends body (nil for none) and decodes the answer into a map.
func (c client) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	status, m, err := c.try(method, path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return status, m
}

func (c client) try(method, path string, body any) (int, map[string]any, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	raw, err := io.ReadAll(resp.Body)
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %d %s: %v", method, path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, m, nil
}

// call makes a tool call and returns the answer; it fails the test
// unless the call ends with status want.
func (c client) call(tool string, args map[string]any, want string) map[string]any {
	c.t.Helper()
	status, m := c.do("POST", "/calls", map[string]any{"toolName": tool, "arguments": args})
	if status != http.StatusOK || m["status"] != want {
		c.t.Fatalf("%s: %d %v, want status %s", tool, status, m, want)
	}
	return m
}

// field digs into decoded JSON: field(m, "output", "stdout").
func field(m any, path ...string) any {
	for _, p := range path {
		mm, _ := m.(map[string]any)
		m = mm[p]
	}
	return m
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// buildContext builds what the Dockerfile's build stage builds, the same
// way, into dir/out, adds the distroless stand-in's files and writes the
// Containerfile of the runtime stage.
func buildContext(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	ins := parseDockerfile(string(b))
	bs, err := readBuildStage(ins, testBuildVars())
	if err != nil {
		t.Fatal(err)
	}
	cf, err := runtimeContainerfile(ins, bs)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs.builds {
		args := slices.Clone(b.args)
		args[slices.Index(args, "-o")+1] = filepath.Join(dir, filepath.FromSlash(b.out))
		cmd := exec.Command("go", append([]string{"build"}, args...)...)
		cmd.Dir, cmd.Env = repo, append(os.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, d := range bs.dirs {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"distroless/etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
		"distroless/etc/group":  "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n",
		"Containerfile":         cf,
	}
	if certs, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files["distroless/etc/ssl/certs/ca-certificates.crt"] = string(certs)
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"distroless/home/nonroot", "distroless/tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "distroless/tmp"), 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
}

// buildProbe builds testdata/probe statically into dir (mounted in the
// containers at /probe) with an exec tool that runs it.
func buildProbe(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(dir, "probe"), "./testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build probe: %v\n%s", err, out)
	}
	tool := `apiVersion: toolsvc/v1
kind: Tool
metadata:
  name: orphan
spec:
  tier: read_only
  exec:
    command: [/probe/probe, orphan]
  exports:
    - name: start
      description: Start a program in a session of its own that outlives the call briefly.
`
	if err := os.WriteFile(filepath.Join(dir, "tools.yaml"), []byte(tool), 0o644); err != nil {
		t.Fatal(err)
	}
	// The container's user reads the mount.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestContainerImage builds the runtime image as the Dockerfile says and
// runs it as documented, hardened further (--cap-drop=ALL,
// no-new-privileges), configured by environment: it answers, runs file
// and shell tools, passes its HEALTHCHECK, runs as 65532 on a read-only
// root, stops cleanly on SIGTERM with a call in flight (answered and
// recorded), and, with --init, leaves no zombie behind.
func TestContainerImage(t *testing.T) {
	pm := podman(t)
	var rnd [4]byte
	rand.Read(rnd[:])
	id := "toolsvc-test-" + hex.EncodeToString(rnd[:])
	image := "localhost/" + id + ":latest"
	h := &containerHost{t: t, podman: pm, base: []string{
		// Host network, for the loopback port; explicit ulimits, without
		// which podman's runc could not start a container in CI's.
		"--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024",
		"--cap-drop=ALL", "--security-opt", "no-new-privileges",
		// As docker's --read-only: /tmp is the image's, read-only too.
		"--read-only-tmpfs=false",
	}}
	if _, err := exec.LookPath("runc"); err == nil {
		h.base = append(h.base, "--runtime", "runc")
	}
	dockerfile, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	h.base = append(h.base, documentedRunFlags(string(dockerfile))...)
	h.base = slices.DeleteFunc(h.base, func(f string) bool { return f == "--rm" }) // restarted below

	ctxDir, probeDir := t.TempDir(), t.TempDir()
	start := time.Now()
	buildContext(t, ctxDir)
	buildProbe(t, probeDir)
	t.Logf("go build: %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	t.Cleanup(func() { h.try("rmi", "-f", image) })
	h.run("build", "--format", "docker", "-q", "-t", image, "-f", filepath.Join(ctxDir, "Containerfile"), ctxDir)
	t.Logf("podman build: %v", time.Since(start).Round(time.Millisecond))
	var cfg []struct {
		Config      struct{ User string }
		Healthcheck struct{ Test []string }
	}
	if err := json.Unmarshal([]byte(h.run("image", "inspect", image)), &cfg); err != nil || len(cfg) != 1 {
		t.Fatalf("image inspect: %v", err)
	}
	if cfg[0].Config.User != "65532:65532" || len(cfg[0].Healthcheck.Test) == 0 {
		t.Errorf("image config: user %q, healthcheck %v", cfg[0].Config.User, cfg[0].Healthcheck.Test)
	}

	key := hex.EncodeToString(rnd[:]) + "-container-test-key"
	workspace, data := id+"-workspace", id+"-data"
	t.Cleanup(func() { h.try("volume", "rm", "-f", workspace, data) })
	port := freePort(t)
	name := id
	h.start(name, []string{
		"-v", workspace + ":/workspace", "-v", data + ":/data", "-v", probeDir + ":/probe:ro",
		"-e", "TOOLSVC_API_KEY=" + key, "-e", fmt.Sprintf("TOOLSVC_ADDR=127.0.0.1:%d", port),
		"-e", "TOOLSVC_SHUTDOWN_TIMEOUT=2s",
	}, image)
	c := client{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port), key: key}
	h.waitReady(name, c.base)

	t.Run("tools", func(t *testing.T) {
		c := c
		c.t = t
		c.call("fs__write", map[string]any{"path": "notes/a.txt", "content": "hello from the container\n"}, "ok")
		if got := field(c.call("fs__read", map[string]any{"path": "notes/a.txt"}, "ok"), "output", "content"); got != "hello from the container\n" {
			t.Errorf("fs__read: %v", got)
		}
		// shell__exec asks for approval by default; the interpreter reads
		// the file written above, in the sandbox.
		_, m := c.do("POST", "/calls", map[string]any{"toolName": "shell__exec", "arguments": map[string]any{"command": `read line < notes/a.txt; echo "$line $((6*7))"`}})
		apr, _ := field(m, "approval", "id").(string)
		callID, _ := m["toolCallId"].(string)
		if m["status"] != "pending_approval" || apr == "" {
			t.Fatalf("shell__exec: %v", m)
		}
		if status, m := c.do("POST", "/approvals/"+apr, map[string]any{"decision": "approve"}); status != http.StatusOK {
			t.Fatalf("approve: %d %v", status, m)
		}
		_, m = c.do("GET", "/calls/"+callID+"?wait=30s", nil)
		if m["status"] != "ok" || field(m, "output", "stdout") != "hello from the container 42\n" || field(m, "output", "exitCode") != 0.0 {
			t.Errorf("shell__exec: %v", m)
		}
	})

	t.Run("health", func(t *testing.T) {
		h := h.with(t)
		if out, err := h.try("exec", name, "/usr/local/bin/toolsvc", "health"); err != nil || strings.TrimSpace(out) != "ok" {
			t.Errorf("toolsvc health: %q %v", out, err)
		}
		// The image's own HEALTHCHECK.
		if _, err := h.try("healthcheck", "run", name); err != nil {
			t.Errorf("HEALTHCHECK: %v", err)
		}
	})

	t.Run("user and read-only root", func(t *testing.T) {
		h := h.with(t)
		top := h.run("top", name, "huser", "args")
		if !regexp.MustCompile(`(?m)^65532 +/usr/local/bin/toolsvc serve`).MatchString(top) {
			t.Errorf("toolsvc does not run as 65532:\n%s", top)
		}
		out := h.run("exec", name, "/probe/probe", "write", "/home/nonroot/x", "/etc/x", "/usr/local/bin/x", "/x", "/tmp/x", "/workspace/x", "/data/x")
		var r struct {
			UID, GID int
			Writes   []struct {
				Path, Error string
				ReadOnly    bool
			}
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if r.UID != 65532 || r.GID != 65532 {
			t.Errorf("exec runs as %d:%d", r.UID, r.GID)
		}
		for _, w := range r.Writes {
			volume := w.Path == "/workspace/x" || w.Path == "/data/x"
			if volume && w.Error != "" || !volume && !w.ReadOnly {
				t.Errorf("writing %s: %q (read-only file system: %v)", w.Path, w.Error, w.ReadOnly)
			}
		}
	})

	t.Run("SIGTERM with a call in flight", func(t *testing.T) {
		h := h.with(t)
		c := c
		c.t = t
		// A call that never ends by itself: the drain must cancel it.
		callID := "slow-" + hex.EncodeToString(rnd[:])
		type answer struct {
			status int
			m      map[string]any
			err    error
		}
		answered := make(chan answer, 1)
		go func() {
			status, m, err := c.try("POST", "/calls", map[string]any{"toolCallId": callID, "record": true, "toolName": "json__query",
				"arguments": map[string]any{"program": "last(repeat(1))", "input": nil}})
			answered <- answer{status, m, err}
		}()
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, m, _ := c.try("GET", "/calls/"+callID, nil); m["status"] == "running" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the call never ran:\n%s", h.logs(name))
			}
			time.Sleep(50 * time.Millisecond)
		}
		// SIGTERM; podman sends SIGKILL if it has not stopped after 30s.
		h.run("stop", "-t", "30", name)
		if code := strings.TrimSpace(h.run("inspect", "--format", "{{.State.ExitCode}}", name)); code != "0" {
			t.Errorf("exit code %s after SIGTERM:\n%s", code, h.logs(name))
		}
		var a answer
		select {
		case a = <-answered:
		case <-time.After(30 * time.Second):
			t.Fatal("the call in flight was never answered")
		}
		if a.err != nil || a.status != http.StatusOK || a.m["status"] != "error" || field(a.m, "error", "code") != "E_INTERRUPTED" {
			t.Errorf("the call in flight was answered %d %v %v", a.status, a.m, a.err)
		}
		// Started again on the same volumes: the call is on record, and
		// the file written before is still there.
		h.run("start", name)
		h.waitReady(name, c.base)
		if status, m := c.do("GET", "/calls/"+callID, nil); status != http.StatusOK || field(m, "error", "code") != "E_INTERRUPTED" {
			t.Errorf("the call's record: %d %v", status, m)
		}
		if got := field(c.call("fs__read", map[string]any{"path": "notes/a.txt"}, "ok"), "output", "content"); got != "hello from the container\n" {
			t.Errorf("fs__read after restart: %v", got)
		}
	})

	t.Run("no zombies", func(t *testing.T) {
		// Programs that leave a process in a session of its own, which
		// is re-parented to PID 1 when it exits after its parent. Without
		// the sandbox's process tracking (off), only PID 1 can reap it:
		// toolsvc does not, so the documented --init must.
		h := h.with(t)
		port := freePort(t)
		zname := id + "-zombies"
		t.Cleanup(func() { h.try("volume", "rm", "-f", zname+"-workspace", zname+"-data") })
		h.start(zname, []string{
			"-v", probeDir + ":/probe:ro", "-v", zname + "-workspace:/workspace", "-v", zname + "-data:/data",
			"-e", "TOOLSVC_AUTH=none", "-e", fmt.Sprintf("TOOLSVC_ADDR=127.0.0.1:%d", port),
			"-e", "TOOLSVC_SHELL_SANDBOX=off", "-e", "TOOLSVC_CONFIG=/probe/tools.yaml",
		}, image)
		zc := client{t: t, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
		h.waitReady(zname, zc.base)
		var orphans []string
		for range 3 {
			orphans = append(orphans, fmt.Sprint(field(zc.call("orphan__start", map[string]any{}, "ok"), "output")))
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			var left []string
			sc := bufio.NewScanner(strings.NewReader(h.run("top", zname, "pid", "ppid", "state", "args")))
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) > 0 && slices.Contains(orphans, f[0]) {
					left = append(left, sc.Text())
				}
			}
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the orphans %v were never reaped (run with %v):\n%s", orphans, h.base, strings.Join(left, "\n"))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}
