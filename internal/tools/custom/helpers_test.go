package custom

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// TestMain lets the test binary be the sandbox child and the program of
// exec tools ("exec-helper <mode>").
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case sandbox.ChildCommand:
			err := sandbox.RunChild(os.Args[2:], nil)
			fmt.Fprintln(os.Stderr, "sandbox child:", err)
			os.Exit(125)
		case "exec-helper":
			os.Exit(execHelper(os.Args[2:]))
		}
	}
	os.Exit(m.Run())
}

// execHelper is an exec tool's program.
func execHelper(args []string) int {
	in, _ := io.ReadAll(os.Stdin)
	switch args[0] {
	case "echo": // the envelope, as JSON
		os.Stdout.Write(in)
	case "text":
		fmt.Print("plain text, not JSON")
	case "fail":
		fmt.Fprintln(os.Stderr, "cannot do that: the file is missing")
		return 3
	case "silent-fail":
		return 4
	case "stdout-fail": // the error as JSON on stdout, nothing on stderr
		fmt.Printf(`{"error": "quota exceeded", "detail": "%s THE-END"}`, strings.Repeat("x", 40000))
		return 1
	case "control-flood": // text that escapes to six times its length
		fmt.Print("HEAD-START " + strings.Repeat("\x01", controlFloodBytes) + " TAIL-END")
	case "log-then-fail": // 2,000 lines of log, then the error
		for i := range 2000 {
			fmt.Fprintf(os.Stderr, "INFO step %d of the work went fine\n", i)
		}
		fmt.Fprintln(os.Stderr, "ValueError: THE REAL ERROR at the end")
		return 1
	case "flood":
		chunk := strings.Repeat("x", 1<<16)
		for range 200 { // 12.5 MiB
			fmt.Print(chunk)
		}
	case "env":
		out := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = v
		}
		wd, _ := os.Getwd()
		out["PWD"] = wd
		json.NewEncoder(os.Stdout).Encode(out)
	case "read": // read a file named in the arguments
		var env Envelope
		_ = json.Unmarshal(in, &env)
		var a struct{ Path string }
		_ = json.Unmarshal(env.Arguments, &a)
		b, err := os.ReadFile(a.Path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		os.Stdout.Write(b)
	case "hang":
		time.Sleep(time.Hour)
	}
	return 0
}

// fixture is a workspace, a sandbox and a place for YAML.
type fixture struct {
	t    testing.TB
	dir  string // where YAML files go
	ws   *workspace.Workspace
	sb   *sandbox.Sandbox
	env  map[string]string
	opts Options
}

func newFixture(t testing.TB, mode sandbox.Mode) *fixture {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Options{Mode: mode, SelfExe: exe, KillGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(t.TempDir(), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dir: t.TempDir(), ws: ws, sb: sb, env: map[string]string{}}
	f.opts = Options{Workspace: ws, Sandbox: sb, UserAgent: "toolsvc-test",
		LookupEnv: func(name string) (string, bool) { v, ok := f.env[name]; return v, ok }}
	return f
}

// load writes doc to name in the fixture's directory and reads its tools.
func (f *fixture) load(name, doc string) ([]*registry.Tool, error) {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		f.t.Fatal(err)
	}
	rs, err := config.Load(p)
	if err != nil {
		return nil, err
	}
	var out []*registry.Tool
	for _, r := range rs {
		ts, err := Tools(r, f.opts)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	return out, nil
}

// executor loads doc and returns an executor that allows every tier.
func (f *fixture) executor(doc string) *registry.Executor {
	f.t.Helper()
	tools, err := f.load("tools.yaml", doc)
	if err != nil {
		f.t.Fatal(err)
	}
	reg, err := registry.New(registry.Defaults{Timeout: 20 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		f.t.Fatal(err)
	}
	return registry.NewExecutor(registry.Options{Registry: reg,
		Policy: registry.TierDefaults{registry.ReadOnly: registry.Allow, registry.SideEffecting: registry.Allow, registry.Privileged: registry.Allow}})
}

func call(t *testing.T, e *registry.Executor, ctx context.Context, c *registry.Call) *registry.Result {
	t.Helper()
	res, err := e.Execute(ctx, registry.Anonymous(), c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func helperTool(t testing.TB, name, mode, extra string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`apiVersion: toolsvc/v1
kind: Tool
metadata: {name: %s}
spec:
  tier: side_effecting
  exec:
    command: [%q, exec-helper, %s]
%s  exports:
    - name: run
      description: Run the helper.
      parameters:
        type: object
        properties:
          path: {type: string, maxLength: 4096, description: A path.}
          n: {type: integer, minimum: 0, maximum: 10}
        additionalProperties: false
`, name, exe, mode, extra)
}
