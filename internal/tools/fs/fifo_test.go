//go:build unix

package fs

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestSpecialFilesDoNotBlock puts a FIFO in the workspace: opening one for
// reading would block forever, so the tools must refuse or skip it.
func TestSpecialFilesDoNotBlock(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	if err := syscall.Mkfifo(filepath.Join(d, "pipe"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	mustWrite(t, filepath.Join(d, "a.txt"), "findme\n")
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs__read", map[string]any{"path": "pipe"}},
		{"fs__edit", map[string]any{"path": "pipe", "oldText": "a", "newText": "b"}},
		{"fs__write", map[string]any{"path": "pipe", "content": "x"}},
	} {
		if err := e.fail("", c.tool, c.args); err.Code != registry.CodeTool {
			t.Errorf("%s: %+v", c.tool, err)
		}
	}
	if err := e.fail("", "fs__read", map[string]any{"path": "pipe"}); !strings.Contains(err.Message, "not a regular file") {
		t.Errorf("read: %q", err.Message)
	}
	var r searchResult
	e.ok("", "fs__search", map[string]any{"pattern": "findme"}, &r)
	if len(r.Matches) != 1 {
		t.Errorf("search: %+v", r)
	}
	var s statResult
	e.ok("", "fs__stat", map[string]any{"path": "pipe"}, &s)
	if s.Type != "other" {
		t.Errorf("stat: %+v", s)
	}
}
