//go:build linux

package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func writeScript(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecDeps(t *testing.T) {
	dir := t.TempDir()
	sh, err := LookPath("sh")
	if err != nil {
		t.Skip("no sh in", DefaultPath)
	}
	env, err := LookPath("env")
	if err != nil {
		t.Skip("no env in", DefaultPath)
	}
	plain := writeScript(t, dir, "plain.sh", "#!"+sh+"\necho hi\n")
	got, err := ExecDeps(plain)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0] != sh {
		t.Fatalf("ExecDeps(#!%s) = %v", sh, got)
	}
	viaEnv := writeScript(t, dir, "env.sh", "#!"+env+" -S sh -e\necho hi\n")
	got, err = ExecDeps(viaEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got, env) || !slices.Contains(got, sh) {
		t.Fatalf("ExecDeps(#!env -S sh) = %v, want both %s and %s", got, env, sh)
	}
	if got, err := ExecDeps(sh); err != nil || slices.Contains(got, sh) || len(got) > 1 {
		t.Fatalf("an ELF program needs at most its loader: %v %v", got, err)
	}
	for name, body := range map[string]string{
		"relative.sh": "#!sh\n",
		"missing.sh":  "#!/no/such/interpreter\n",
		"unknown.sh":  "#!" + env + " no-such-program-xyz\n",
		"empty.sh":    "#!\n",
	} {
		if _, err := ExecDeps(writeScript(t, dir, name, body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestScriptRunsWithItsInterpreterAllowed(t *testing.T) {
	needLandlock(t)
	sh, err := LookPath("sh")
	if err != nil {
		t.Skip("no sh in", DefaultPath)
	}
	dir := t.TempDir()
	script := writeScript(t, dir, "hello.sh", "#!"+sh+"\nread line; echo \"got $line\"\n")
	s := newSandbox(t, ModeRequired, Limits{})
	ctx := context.Background()
	res, err := s.Run(ctx, Spec{Args: []string{script}, Workspace: t.TempDir(), Stdin: strings.NewReader("x\n")})
	if err == nil && res.ExitCode == 0 {
		t.Fatalf("a script ran although its interpreter may not be executed: %+v", res)
	}
	interps, err := ExecDeps(script)
	if err != nil {
		t.Fatal(err)
	}
	res, err = s.Run(ctx, Spec{Args: []string{script}, Workspace: t.TempDir(), Stdin: strings.NewReader("x\n"), AllowExec: interps})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "got x\n" {
		t.Fatalf("script with its interpreter allowed: %+v %v", res, err)
	}
}

func TestSpecReadOnly(t *testing.T) {
	needLandlock(t)
	data := t.TempDir()
	file := filepath.Join(data, "data.txt")
	if err := os.WriteFile(file, []byte("shared data"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSandbox(t, ModeRequired, Limits{})
	ctx := context.Background()
	ws := t.TempDir()
	res, err := s.Run(ctx, Spec{Args: []string{"cat", file}, Workspace: ws})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("read outside the workspace allowed: %+v %v", res, err)
	}
	res, err = s.Run(ctx, Spec{Args: []string{"cat", file}, Workspace: ws, ReadOnly: []string{data}})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != "shared data" {
		t.Fatalf("read of a Spec.ReadOnly path: %+v %v", res, err)
	}
	res, err = s.Run(ctx, Spec{Args: []string{"touch", filepath.Join(data, "new")}, Workspace: ws, ReadOnly: []string{data}})
	if err != nil || res.ExitCode == 0 {
		t.Fatalf("write to a read-only path allowed: %+v %v", res, err)
	}
	if _, err := s.Run(ctx, Spec{Args: []string{"true"}, Workspace: ws, ReadOnly: []string{"relative/dir"}}); !errors.Is(err, ErrSetup) {
		t.Fatalf("relative readable path: %v", err)
	}
}
