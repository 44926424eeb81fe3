package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/custom"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// TestMain lets the test binary be the sandbox child, as toolsvc is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ChildCommand {
		err := sandbox.RunChild(os.Args[2:], nil)
		fmt.Fprintln(os.Stderr, "sandbox child:", err)
		os.Exit(125)
	}
	os.Exit(m.Run())
}

// executor loads the example resources in dir as toolsvc would.
func executor(t *testing.T, dir string, mode sandbox.Mode) (*registry.Executor, *workspace.Workspace) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Options{Mode: mode, SelfExe: exe})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := workspace.New(t.TempDir(), workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var tools []*registry.Tool
	for _, r := range rs {
		ts, err := custom.Tools(r, custom.Options{Workspace: ws, Sandbox: sb})
		if err != nil {
			t.Fatal(err)
		}
		tools = append(tools, ts...)
	}
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	return registry.NewExecutor(registry.Options{Registry: reg}), ws
}

func execute(t *testing.T, e *registry.Executor, name, args, instance string) *registry.Result {
	t.Helper()
	res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: name, Arguments: json.RawMessage(args), Context: registry.CallContext{InstanceKey: instance}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestWordsExample(t *testing.T) {
	if _, err := sandbox.LookPath("python3"); err != nil {
		t.Skipf("the example needs python3 in %s", sandbox.DefaultPath)
	}
	modes := []sandbox.Mode{sandbox.ModeOff, sandbox.ModeBestEffort}
	if sandbox.Probe().LandlockABI > 0 {
		modes = append(modes, sandbox.ModeRequired)
	}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			e, _ := executor(t, filepath.Join("..", "tools", "words.yaml"), mode)
			res := execute(t, e, "words__stats", `{"text": "the cat and the hat\nthe end\n", "top": 2}`, "")
			if res.Status != registry.StatusOK {
				t.Fatalf("%+v", res.Error)
			}
			var out struct {
				Lines, Words, Characters int
				Top                      []struct {
					Word  string
					Count int
				}
			}
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatalf("%s: %v", res.Output, err)
			}
			if out.Lines != 2 || out.Words != 7 || out.Characters != 28 || len(out.Top) != 2 || out.Top[0].Word != "the" || out.Top[0].Count != 3 {
				t.Errorf("output: %s", res.Output)
			}
			res = execute(t, e, "words__stats", `{"text": "!!! ???"}`, "")
			if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "the text has no words") {
				t.Errorf("error: %+v", res.Error)
			}
			res = execute(t, e, "words__stats", `{"text": "x", "top": 0}`, "")
			if res.Code() != registry.CodeInvalidArguments {
				t.Errorf("schema: %+v", res.Error)
			}
		})
	}
}

func TestNotesExample(t *testing.T) {
	ts := httptest.NewServer(newHandler("example-token"))
	defer ts.Close()
	// The example's YAML and token file, pointed at this backend.
	dir := t.TempDir()
	doc, err := os.ReadFile(filepath.Join("..", "tools", "notes.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "http://127.0.0.1:8181/invoke") {
		t.Fatal("notes.yaml no longer names the backend's default address")
	}
	doc = []byte(strings.Replace(string(doc), "http://127.0.0.1:8181", ts.URL, 1))
	token, err := os.ReadFile(filepath.Join("..", "tools", "notes.token"))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"notes.yaml": doc, "notes.token": token} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e, _ := executor(t, dir, sandbox.ModeOff)
	if res := execute(t, e, "notes__add", `{"text": "buy milk"}`, "conv-1"); res.Status != registry.StatusOK || string(res.Output) != `{"id":1,"saved":true}` {
		t.Fatalf("add: %s %+v", res.Output, res.Error)
	}
	execute(t, e, "notes__add", `{"text": "other conversation"}`, "conv-2")
	if res := execute(t, e, "notes__list", `{}`, "conv-1"); string(res.Output) != `{"notes":[{"id":1,"text":"buy milk"}]}` {
		t.Errorf("list: %s %+v", res.Output, res.Error)
	}
	if res := execute(t, e, "notes__list", `{"extra": 1}`, "conv-1"); res.Code() != registry.CodeInvalidArguments {
		t.Errorf("schema: %+v", res.Error)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.token"), []byte("Bearer wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e, _ = executor(t, dir, sandbox.ModeOff)
	if res := execute(t, e, "notes__list", `{}`, "conv-1"); res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "401 Unauthorized: missing or wrong bearer token") {
		t.Errorf("wrong token: %+v", res.Error)
	}
}
