package fs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// env is a workspace with a directory beside it ("outside") that no call
// may ever touch, and an executor running the file tools.
type env struct {
	t       *testing.T
	tmp     string // holds ws/ and outside/
	base    string // the workspace
	outside string
	ws      *workspace.Workspace
	exec    *registry.Executor
}

const outsideSecret = "OUTSIDE-SECRET-4f1c"

func newEnv(t *testing.T, o Options, maxOutput int) *env {
	t.Helper()
	tmp := t.TempDir()
	e := &env{t: t, tmp: tmp, base: filepath.Join(tmp, "ws"), outside: filepath.Join(tmp, "outside")}
	ws, err := workspace.New(e.base, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.ws = ws
	mustWrite(t, filepath.Join(e.outside, "secret"), outsideSecret)
	mustWrite(t, filepath.Join(e.outside, "victim"), outsideSecret+" victim")
	mustWrite(t, filepath.Join(e.outside, "sub", "deep"), outsideSecret+" deep")
	o.Workspace = ws
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: maxOutput, ErrorMessageLimit: 1000}, Tools(o)...)
	if err != nil {
		t.Fatal(err)
	}
	e.exec = registry.NewExecutor(registry.Options{Registry: reg})
	return e
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// dir returns the directory of an instance key.
func (e *env) dir(key string) string {
	d, err := e.ws.Open(workspace.Owner{CallerID: registry.Anonymous().ID}, key)
	if err != nil {
		e.t.Fatal(err)
	}
	d.Close()
	return d.Path
}

func (e *env) call(key, tool string, args any) *registry.Result {
	e.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := e.exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{
		ToolName: tool, Arguments: raw, Context: registry.CallContext{InstanceKey: key},
	})
	if err != nil {
		e.t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// ok calls a tool that must succeed and decodes its output into out.
func (e *env) ok(key, tool string, args, out any) {
	e.t.Helper()
	res := e.call(key, tool, args)
	if res.Status != registry.StatusOK {
		e.t.Fatalf("%s %v: status %s, error %+v", tool, args, res.Status, res.Error)
	}
	if res.Truncated {
		e.t.Fatalf("%s %v: output was truncated by the executor (%d bytes): the tool must size its output", tool, args, res.OriginalBytes)
	}
	if out != nil {
		if err := json.Unmarshal(res.Output, out); err != nil {
			e.t.Fatalf("%s: output %s: %v", tool, res.Output, err)
		}
	}
}

// fail calls a tool that must fail and returns its error.
func (e *env) fail(key, tool string, args any) *registry.Error {
	e.t.Helper()
	res := e.call(key, tool, args)
	if res.Status != registry.StatusError || res.Error == nil {
		e.t.Fatalf("%s %v: want an error, got %s %s", tool, args, res.Status, res.Output)
	}
	if raw, _ := json.Marshal(args); !strings.Contains(string(raw), e.tmp) && (strings.Contains(res.Error.Message, e.tmp) || strings.Contains(res.Error.Suggestion, e.tmp)) {
		e.t.Errorf("%s %v: error reveals a host path: %+v", tool, args, res.Error)
	}
	return res.Error
}

// fileState is what a snapshot records of one file.
type fileState struct {
	kind, digest, link string
	mode               iofs.FileMode
	modTime            time.Time
}

// snapshot records every file under dir.
func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fileState{kind: typeName(fi.Mode()), mode: fi.Mode(), modTime: fi.ModTime()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			st.digest = hex.EncodeToString(sum[:])
		case fi.Mode()&iofs.ModeSymlink != 0:
			st.link, _ = os.Readlink(p)
		}
		out[p] = st
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameSnapshot(t *testing.T, what string, before, after map[string]fileState) {
	t.Helper()
	for p, b := range before {
		a, ok := after[p]
		if !ok {
			t.Errorf("%s: %s was removed", what, p)
			continue
		}
		if a != b {
			t.Errorf("%s: %s changed: %+v -> %+v", what, p, b, a)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared", what, p)
		}
	}
}
