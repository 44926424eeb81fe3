package fs

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// TestWorkspaceReserve: writes and new instance directories that would
// eat into the space kept free for the service are refused, saying so,
// and change nothing; reading goes on.
func TestWorkspaceReserve(t *testing.T) {
	base := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(base, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	open := func(reserve int64) *registry.Executor {
		ws, err := workspace.New(base, workspace.Options{Reserve: reserve})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ws.Close() })
		reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, Tools(Options{Workspace: ws})...)
		if err != nil {
			t.Fatal(err)
		}
		return registry.NewExecutor(registry.Options{Registry: reg})
	}
	call := func(e *registry.Executor, key, tool string, args map[string]any) *registry.Result {
		raw, _ := json.Marshal(args)
		res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: tool, Arguments: raw, Context: registry.CallContext{InstanceKey: key}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	roomy := open(1)
	if res := call(roomy, "", "fs__write", map[string]any{"path": "a.txt", "content": "hello"}); res.Status != registry.StatusOK {
		t.Fatalf("write with room: %+v", res.Error)
	}
	full := open(free + 1<<30) // more than the file system has free
	for _, c := range []struct {
		key, tool string
		args      map[string]any
		outcome   string
	}{
		{"", "fs__write", map[string]any{"path": "b.txt", "content": "x"}, "nothing was written"},
		{"", "fs__write", map[string]any{"path": "a.txt", "content": "hello!"}, "this needs 1 more"},
		{"", "fs__write", map[string]any{"path": "a.txt", "content": "!", "mode": "append"}, "nothing was written"},
		{"", "fs__write", map[string]any{"path": "d1/d2/d3/c.txt", "content": ""}, "this needs 16384 more"}, // three directories and the file
		{"", "fs__edit", map[string]any{"path": "a.txt", "oldText": "hello", "newText": "hello, world"}, "nothing was changed"},
		{"new-instance", "fs__write", map[string]any{"path": "x.txt", "content": "x"}, "the directory of this instanceKey was not made"},
	} {
		res := call(full, c.key, c.tool, c.args)
		if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "TOOLSVC_WORKSPACE_RESERVE") || !strings.Contains(res.Error.Message, c.outcome) {
			t.Errorf("%s in %q without room: %+v", c.tool, c.key, res.Error)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(base, "callers", "anonymous", "default", "a.txt")); string(b) != "hello" {
		t.Errorf("a.txt after the refused edit: %q", b)
	}
	for _, p := range []string{"callers/anonymous/default/b.txt", "callers/anonymous/default/d1", "callers/anonymous/instances/new-instance"} {
		if _, err := os.Lstat(filepath.Join(base, p)); !os.IsNotExist(err) {
			t.Errorf("%s exists after a refused call: %v", p, err)
		}
	}
	if res := call(full, "", "fs__read", map[string]any{"path": "a.txt"}); res.Status != registry.StatusOK {
		t.Errorf("read without room: %+v", res.Error)
	}
	// Reading makes no directory, so it needs no room either.
	if res := call(full, "new-instance", "fs__list", map[string]any{"path": "."}); res.Status != registry.StatusOK {
		t.Errorf("fs__list of a new instance without room: %+v", res.Error)
	}
	// A write or an edit that does not grow the file needs no room.
	if res := call(full, "", "fs__edit", map[string]any{"path": "a.txt", "oldText": "hello", "newText": "HELLO"}); res.Status != registry.StatusOK {
		t.Errorf("same-size edit without room: %+v", res.Error)
	}
	if res := call(full, "", "fs__write", map[string]any{"path": "a.txt", "content": "hi"}); res.Status != registry.StatusOK {
		t.Errorf("shrinking overwrite without room: %+v", res.Error)
	}
}
