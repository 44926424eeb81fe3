//go:build unix

package fs

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

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

// TestSpecialFilesNamed: fs__read and fs__write refuse a socket, and
// fs__write a FIFO nobody reads, in words a model can act on. Opening
// these fails (ENXIO on Linux) before the tools see the file's type, and
// the bare errno ("no such device or address") used to be the answer.
func TestSpecialFilesNamed(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	if err := syscall.Mkfifo(filepath.Join(d, "pipe"), 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	// A socket path must be short (sun_path), so the socket is bound in
	// a short directory and moved into the workspace.
	short, err := os.MkdirTemp("", "s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(short, "sock"), Net: "unix"})
	if err != nil {
		t.Skipf("listen unix: %v", err)
	}
	ln.SetUnlinkOnClose(false)
	t.Cleanup(func() { ln.Close() })
	if err := os.Rename(filepath.Join(short, "sock"), filepath.Join(d, "sock")); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "sock", filepath.Join(d, "link-to-sock"))
	// The type of a file outside the workspace is not looked up.
	if err := syscall.Mkfifo(filepath.Join(e.outside, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join(e.outside, "pipe"), filepath.Join(d, "outside-pipe"))
	before := snapshot(t, e.base)

	for _, c := range []struct {
		tool, path, mode, want string
	}{
		{"fs__read", "sock", "", `"sock" is not a regular file (a socket)`},
		{"fs__read", "link-to-sock", "", `"link-to-sock" is not a regular file (a socket)`},
		{"fs__read", "pipe", "", `"pipe" is not a regular file (a named pipe)`},
		{"fs__write", "sock", "overwrite", `"sock" is not a regular file (a socket)`},
		{"fs__write", "sock", "append", `"sock" is not a regular file (a socket)`},
		{"fs__write", "pipe", "overwrite", `"pipe" is not a regular file (a named pipe)`},
		{"fs__write", "pipe", "append", `"pipe" is not a regular file (a named pipe)`},
		{"fs__write", "sock", "create", `"sock" already exists`},
		{"fs__read", "outside-pipe", "", `"outside-pipe" leads outside the workspace (through a symbolic link), so it cannot be used`},
		{"fs__write", "outside-pipe", "append", `"outside-pipe" leads outside the workspace (through a symbolic link), so it cannot be used`},
		{"fs__edit", "sock", "", `"sock" is not a regular file (a socket)`},
		{"fs__edit", "pipe", "", `"pipe" is not a regular file (a named pipe)`},
	} {
		args := map[string]any{"path": c.path}
		switch c.tool {
		case "fs__write":
			args["content"], args["mode"] = "x", c.mode
		case "fs__edit":
			args["oldText"], args["newText"] = "x", "y"
		}
		err := e.fail("", c.tool, args)
		if err.Code != registry.CodeTool || err.Message != c.want || err.Suggestion == "" {
			t.Errorf("%s %s %s: %s %q (suggestion %q); want E_TOOL %q with a suggestion", c.tool, c.path, c.mode, err.Code, err.Message, err.Suggestion, c.want)
		}
	}
	sameSnapshot(t, "refused calls", before, snapshot(t, e.base))

	// A device, where the test may make one: its open fails too (ENXIO
	// without a driver, EPERM where a container forbids it) or succeeds.
	if err := syscall.Mknod(filepath.Join(d, "dev"), syscall.S_IFCHR|0o600, int(unix.Mkdev(511, 0))); err == nil {
		for _, c := range []struct {
			tool string
			args map[string]any
		}{
			{"fs__read", map[string]any{"path": "dev"}},
			{"fs__write", map[string]any{"path": "dev", "content": "x"}},
		} {
			if err := e.fail("", c.tool, c.args); err.Message != `"dev" is not a regular file (a character device)` {
				t.Errorf("%s on a device: %+v", c.tool, err)
			}
		}
	}
}
