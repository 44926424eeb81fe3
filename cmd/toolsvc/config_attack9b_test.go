package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// validateWithin runs toolsvc validate with environ, failing the test when it
// has not returned after a minute (a read that blocks).
func validateWithin(t *testing.T, environ ...string) error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		done <- run(context.Background(), []string{"toolsvc", "validate"}, environ, io.Discard, io.Discard)
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("toolsvc validate still runs after a minute")
		return nil
	}
}

func putFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

const agentCaller = "apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: agent}\nspec:\n  tokenSha256: eb47b9ce4840a5b3ea138b8691253b78035b9289d9014409067e9844c272ef99\n  scopes: [call]\n"

// evilCaller is what a caller with the call scope could write with
// fs__write: a Caller of its own, with every scope.
const evilCaller = "apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: evil}\nspec:\n  tokenSha256: 0000000000000000000000000000000000000000000000000000000000000001\n  scopes: [call, approve, admin]\n"

// TestValidateRefusesConfigAroundWorkspace: TOOLSVC_CONFIG may neither
// contain the workspace, where callers write files, nor lie inside it;
// nor hold the embedded store's data directory.
func TestValidateRefusesConfigAroundWorkspace(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putFile(t, filepath.Join(root, "callers.yaml"), agentCaller)
	putFile(t, filepath.Join(root, "ws", "callers", "agent", "default", "evil.yaml"), evilCaller)
	data := "TOOLSVC_DATA_DIR=" + t.TempDir()
	for _, c := range []struct {
		name    string
		environ []string
		want    []string // none: valid
	}{
		{"directory holds the workspace", []string{"TOOLSVC_CONFIG=" + root, "TOOLSVC_WORKSPACE=" + filepath.Join(root, "ws"), data},
			[]string{"TOOLSVC_CONFIG entry " + `"` + root + `"`, "contains TOOLSVC_WORKSPACE " + filepath.Join(root, "ws"), "Set TOOLSVC_WORKSPACE to a directory outside " + root, "name the configuration's files in TOOLSVC_CONFIG"}},
		{"a file inside the workspace", []string{"TOOLSVC_CONFIG=" + filepath.Join(root, "ws", "callers", "agent", "default", "evil.yaml"), "TOOLSVC_WORKSPACE=" + filepath.Join(root, "ws"), data},
			[]string{"lies inside TOOLSVC_WORKSPACE " + filepath.Join(root, "ws"), "Move the configuration out of"}},
		{"directory holds the data directory", []string{"TOOLSVC_CONFIG=" + root, "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + filepath.Join(root, "data")},
			[]string{"contains TOOLSVC_DATA_DIR " + filepath.Join(root, "data")}},
		{"the files named", []string{"TOOLSVC_CONFIG=" + filepath.Join(root, "callers.yaml"), "TOOLSVC_WORKSPACE=" + filepath.Join(root, "ws"), "TOOLSVC_DATA_DIR=" + filepath.Join(root, "data")}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validateWithin(t, c.environ...)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("validate: no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestValidateRefusesCurrentDirectory is the case as reported:
// TOOLSVC_CONFIG=. with the default workspace, ./workspace.
func TestValidateRefusesCurrentDirectory(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putFile(t, filepath.Join(dir, "callers.yaml"), agentCaller)
	t.Chdir(dir)
	err = validateWithin(t, "TOOLSVC_CONFIG=.")
	if err == nil || !strings.Contains(err.Error(), `TOOLSVC_CONFIG entry "." (`+dir+") contains TOOLSVC_WORKSPACE "+filepath.Join(dir, "workspace")) {
		t.Errorf("TOOLSVC_CONFIG=. and the default workspace: %v", err)
	}
	if err := validateWithin(t, "TOOLSVC_CONFIG=callers.yaml"); err != nil {
		t.Errorf("TOOLSVC_CONFIG=callers.yaml and the default workspace: %v", err)
	}
}

// TestReloadRefusesFileInWorkspace: a reload reads no file of the
// workspace, here one a caller wrote (a Policy that allows every
// privileged call) reached through a link the operator put in the
// configuration directory; the running configuration stays.
func TestReloadRefusesFileInWorkspace(t *testing.T) {
	c := newConfigDir(t)
	c.write("policy.yaml", "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: base}\nspec: {}\n", 0o644)
	rl, _, _, ws := testReloader(t, c.dir)
	running := rl.cur
	evil := filepath.Join(ws, "callers", "agent", "default", "evil.yaml")
	putFile(t, evil, "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: evil}\nspec:\n  tierDefaults: {privileged: allow}\n") // as fs__write would
	if err := os.Symlink(evil, filepath.Join(c.dir, "more.yaml")); err != nil {
		t.Fatal(err)
	}
	err := rl.Reload()
	if err == nil || !strings.Contains(err.Error(), "more.yaml, which resolves to "+evil+" and lies inside TOOLSVC_WORKSPACE") {
		t.Fatalf("reload with a file of the workspace: %v", err)
	}
	if rl.cur != running {
		t.Error("the refused reload replaced the running configuration")
	}
}

// TestValidateRefusesSpecialFiles: a named pipe or a device named by the
// configuration fails validate with the path and what it is, instead of
// blocking it (or filling memory, /dev/zero) for good.
func TestValidateRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("cannot make a named pipe:", err)
	}
	jwks, err := filepath.Abs("../../examples/identity/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	ws := "TOOLSVC_WORKSPACE=" + t.TempDir()
	for _, c := range []struct{ name, config, want string }{
		{"config", fifo, fifo + " is a named pipe (FIFO), not a regular file"},
		{"zero", "https://rp2.alfred511.top/hf/dev/zero", "https://rp2.alfred511.top/hf/dev/zero is a character device, not a regular file"},
		{"tokenFile", "apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: a}\nspec:\n  tokenFile: " + fifo + "\n  scopes: [call]\n",
			"tokenFile: " + fifo + " is a named pipe"},
		{"header", "apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: h}\nspec:\n  tier: read_only\n  http:\n    url: http://127.0.0.1:18750/\n    headers:\n      A: {valueFrom: {file: pipe}}\n  exports:\n    - name: x\n      description: X.\n",
			fifo + " is a named pipe"},
		{"jwksFile", "apiVersion: toolsvc/v1\nkind: Issuer\nmetadata: {name: i}\nspec:\n  issuer: https://idp.example.test\n  audience: toolsvc\n  jwksFile: pipe\n",
			"jwksFile: " + fifo + " is a named pipe"},
		{"jwksFile that is a device", "apiVersion: toolsvc/v1\nkind: Issuer\nmetadata: {name: i}\nspec:\n  issuer: https://idp.example.test\n  audience: toolsvc\n  jwksFile: /dev/zero\n",
			"jwksFile: /dev/zero is a character device"},
		{"jwksFile that is good", "apiVersion: toolsvc/v1\nkind: Issuer\nmetadata: {name: i}\nspec:\n  issuer: https://idp.example.test\n  audience: toolsvc\n  jwksFile: " + jwks + "\n  algorithms: [ES256]\n",
			""},
	} {
		t.Run(c.name, func(t *testing.T) {
			config := c.config
			if strings.HasPrefix(config, "apiVersion") {
				config = filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
				putFile(t, config, c.config)
			}
			err := validateWithin(t, "TOOLSVC_CONFIG="+config, ws)
			if err != nil && strings.Contains(err.Error(), "https://rp2.alfred511.top/hf/dev/zero: no such file") {
				t.Skip(err)
			}
			if c.want == "" {
				if err != nil {
					t.Errorf("validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("validate: %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestValidateEmptyConfigEntry: a stray comma in TOOLSVC_CONFIG is named.
func TestValidateEmptyConfigEntry(t *testing.T) {
	f := filepath.Join(t.TempDir(), "a.yaml")
	putFile(t, f, agentCaller)
	for _, v := range []string{f + ",", f + ",," + f} {
		err := validateWithin(t, "TOOLSVC_CONFIG="+v, "TOOLSVC_WORKSPACE="+t.TempDir())
		if err == nil || !strings.Contains(err.Error(), `TOOLSVC_CONFIG "`+v+`": entry 2 of`) || !strings.Contains(err.Error(), "is empty") {
			t.Errorf("TOOLSVC_CONFIG=%s: %v", v, err)
		}
	}
}

// TestValidateRefusesTokenFileInWorkspace: a Caller's tokenFile (or an
// Issuer's jwksFile) inside the workspace could be replaced by a caller
// with fs__write, which would then know that Caller's token (or choose
// the keys that sign tokens): refused, as configuration files there are.
func TestValidateRefusesTokenFileInWorkspace(t *testing.T) {
	ws, cfgDir := t.TempDir(), t.TempDir()
	token := filepath.Join(ws, "callers", "anonymous", "default", "ops.token")
	putFile(t, token, "s3cret\n")
	jwks, err := filepath.Abs("../../examples/identity/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	jwksInWS := filepath.Join(ws, "jwks.json")
	b, err := os.ReadFile(jwks)
	if err != nil {
		t.Fatal(err)
	}
	putFile(t, jwksInWS, string(b))
	for _, c := range []struct{ name, yaml, path string }{
		{"tokenFile", "apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: ops}\nspec:\n  tokenFile: " + token + "\n  scopes: [call, approve, admin]\n", token},
		{"jwksFile", "apiVersion: toolsvc/v1\nkind: Issuer\nmetadata: {name: i}\nspec:\n  issuer: https://idp.example.test\n  audience: toolsvc\n  jwksFile: " + jwksInWS + "\n  algorithms: [ES256]\n", jwksInWS},
	} {
		t.Run(c.name, func(t *testing.T) {
			config := filepath.Join(cfgDir, c.name+".yaml")
			putFile(t, config, c.yaml)
			err := validateWithin(t, "TOOLSVC_CONFIG="+config, "TOOLSVC_WORKSPACE="+ws)
			if err == nil || !strings.Contains(err.Error(), "lies inside TOOLSVC_WORKSPACE") || !strings.Contains(err.Error(), c.path) {
				t.Errorf("validate: %v; want the %s refused as lying inside TOOLSVC_WORKSPACE", err, c.name)
			}
		})
	}
}
