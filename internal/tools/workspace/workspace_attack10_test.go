package workspace

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// immutable makes path refuse new entries, even to root (chattr +i), until
// the test ends; it skips the test where chattr is not available.
func immutable(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("chattr +i is not available here (%v: %s); the test needs a directory no entry can be made in", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", path).Run() })
}

// readOnlyMount bind-mounts path read-only onto itself until the test
// ends; it skips the test where this process may not mount.
func readOnlyMount(t *testing.T, path string) {
	t.Helper()
	if err := unix.Mount(path, path, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount here (%v); the test needs a read-only mount", err)
	}
	t.Cleanup(func() { unix.Unmount(path, unix.MNT_DETACH) })
	if err := unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount read-only here: %v", err)
	}
}

// TestUnwritableWorkspaceRefused: a workspace the service's user cannot
// write (a root-owned volume in a container running as 65532, a missing
// volume under a read-only root file system) started, /readyz said 200,
// and every fs__list, fs__write and shell__exec then failed with E_TOOL
// "cannot open the workspace: workspace: callers: mkdirat callers:
// permission denied", which a model reads as a fault of the tool. New
// refuses it now, naming TOOLSVC_WORKSPACE, the user and the fix.
func TestUnwritableWorkspaceRefused(t *testing.T) {
	cases := []struct {
		name string
		// prepare makes base unwritable in some way and returns the
		// workspace directory to give New and the directory the message
		// must name.
		prepare func(t *testing.T, base string) (ws, named string)
		fix     string
	}{
		{"root", func(t *testing.T, base string) (string, string) {
			immutable(t, base)
			return base, base
		}, "chown -R "},
		{"callers", func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "callers"))
			immutable(t, filepath.Join(base, "callers"))
			return base, filepath.Join(base, "callers")
		}, "chown -R "},
		{"shared", func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "shared"))
			immutable(t, filepath.Join(base, "shared"))
			return base, filepath.Join(base, "shared")
		}, "chown -R "},
		{"missing beneath an unwritable parent", func(t *testing.T, base string) (string, string) {
			immutable(t, base)
			return filepath.Join(base, "workspace"), filepath.Join(base, "workspace")
		}, "chown -R "},
		{"read-only mount", func(t *testing.T, base string) (string, string) {
			readOnlyMount(t, base)
			return base, base
		}, "mount a writable volume at "},
		{"read-only mount, callers made before", func(t *testing.T, base string) (string, string) {
			mkdir(t, filepath.Join(base, "callers", "alice", "default"))
			mkdir(t, filepath.Join(base, emptyDir))
			readOnlyMount(t, base)
			return base, base
		}, "mount a writable volume at "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ws, named := c.prepare(t, t.TempDir())
			w, err := New(ws, Options{})
			if err == nil {
				w.Close()
				t.Fatal("New accepted a workspace it cannot write")
			}
			var nw *NotWritableError
			if !errors.As(err, &nw) || nw.Dir != ws {
				t.Fatalf("New: %v, want a *NotWritableError for %s", err, ws)
			}
			msg := err.Error()
			for _, want := range []string{"TOOLSVC_WORKSPACE " + ws + " cannot be written by this process (uid ", named, c.fix, "or set TOOLSVC_WORKSPACE"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the message lacks %q:\n%s", want, msg)
				}
			}
			if strings.Contains(msg, probeName) {
				t.Errorf("the message names the probe:\n%s", msg)
			}
		})
	}
}

// TestWritableWorkspaceLeavesNoProbe: New's probe directories are gone
// after it, and a probe a start left behind (killed between making and
// removing it) does not refuse a writable workspace.
func TestWritableWorkspaceLeavesNoProbe(t *testing.T) {
	base := t.TempDir()
	mkdir(t, filepath.Join(base, "shared"))
	mkdir(t, filepath.Join(base, "callers", probeName)) // left behind
	w, err := New(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, dir := range []string{".", "callers", "shared"} {
		if _, err := os.Lstat(filepath.Join(base, dir, probeName)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s/%s: %v, want it removed", dir, probeName, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(base, "callers")); err != nil || !fi.IsDir() {
		t.Errorf("callers/ not made: %v", err)
	}
}

// TestOpenNamesAnUnwritableDirectory: a directory of the workspace the
// service may no longer write (made by root before the service ran as
// another user) fails the call with a message that says it is the
// operator's to fix, not the caller's.
func TestOpenNamesAnUnwritableDirectory(t *testing.T) {
	base := t.TempDir()
	mkdir(t, filepath.Join(base, "callers"))
	w, err := New(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	immutable(t, filepath.Join(base, "callers"))
	_, err = w.Open(Owner{CallerID: "alice"}, "")
	if err == nil || !strings.Contains(err.Error(), "workspace: callers/alice: ") || !strings.Contains(err.Error(), "may not write this directory of the workspace, which an operator has to fix") {
		t.Errorf("Open: %v", err)
	}
	// Reading needs no new directory.
	d, err := w.Peek(Owner{CallerID: "alice"}, "")
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	d.Close()
}

func mkdir(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(path, 0o750); err != nil {
		t.Fatal(err)
	}
}
