package workspace

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenStaysInside(t *testing.T) {
	w, err := New(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"conv-42", "..", ".", "../x", "a/b", "/etc", `a\b`, "x\x00y", strings.Repeat("k", 300), "_kdeadbeef", "ünï", ""}
	seen := map[string]string{}
	owner := Owner{CallerID: "../alice"}
	for _, k := range keys {
		d, err := w.Open(owner, k)
		if err != nil {
			t.Fatalf("Open(%q): %v", k, err)
		}
		d.Close()
		if !strings.HasPrefix(d.Path, w.Base()+"/callers/") {
			t.Errorf("Open(%q) = %q, not beneath %q/callers", k, d.Path, w.Base())
		}
		if fi, err := os.Lstat(d.Path); err != nil || !fi.IsDir() {
			t.Errorf("Open(%q): %q is not a directory: %v", k, d.Path, err)
		}
		if prev, dup := seen[d.Path]; dup {
			t.Errorf("keys %q and %q share %q", prev, k, d.Path)
		}
		seen[d.Path] = k
	}
	if got := SanitizeKey("conv-42"); got != "conv-42" {
		t.Errorf("plain key changed: %q", got)
	}
}

func TestCallersArePartitioned(t *testing.T) {
	w, err := New(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := Owner{CallerID: "alice"}, Owner{CallerID: "bob"}
	team1, team2 := Owner{CallerID: "carol", Shared: "team"}, Owner{CallerID: "dave", Shared: "team"}
	if w.Path(a, "k") == w.Path(b, "k") || w.Path(a, "") == w.Path(b, "") {
		t.Error("two callers share a directory")
	}
	if w.Path(team1, "k") != w.Path(team2, "k") {
		t.Error("callers of one shared workspace do not share it")
	}
	if w.Path(Owner{}, "") != filepath.Join(w.Base(), "callers", "anonymous", "default") {
		t.Errorf("anonymous default: %s", w.Path(Owner{}, ""))
	}
}

func TestOpenRefusesLinks(t *testing.T) {
	base := t.TempDir()
	w, err := New(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	owner := Owner{CallerID: "alice"}
	// A link at each level of the layout: instance, instances, caller, callers.
	for _, rel := range []string{"callers/alice/instances/cache", "callers/alice/instances", "callers/alice", "callers"} {
		t.Run(rel, func(t *testing.T) {
			_ = os.RemoveAll(filepath.Join(base, "callers"))
			if err := os.MkdirAll(filepath.Dir(filepath.Join(base, rel)), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(base, rel)); err != nil {
				t.Fatal(err)
			}
			d, err := w.Open(owner, "cache")
			if err == nil {
				d.Close()
				t.Fatalf("Open through a link at %s succeeded", rel)
			}
			if !errors.Is(err, ErrLink) {
				t.Errorf("error %v, want ErrLink", err)
			}
		})
	}
	// A file where a directory belongs is refused as well.
	_ = os.RemoveAll(filepath.Join(base, "callers"))
	if err := os.MkdirAll(filepath.Join(base, "callers/alice/instances"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "callers/alice/instances/f"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Open(owner, "f"); !errors.Is(err, ErrLink) {
		t.Errorf("file as instance: %v, want ErrLink", err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("something was created outside: %v", entries)
	}
}

// TestOpenCache: a directory opened before is found again while its path
// leads to it, and walked afresh once it does not.
func TestOpenCache(t *testing.T) {
	base := t.TempDir()
	w, err := New(base, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	owner := Owner{CallerID: "alice"}
	open := func() *Dir {
		t.Helper()
		d, err := w.Open(owner, "k")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	write := func(d *Dir, name string) {
		t.Helper()
		if err := d.Root.WriteFile(name, []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := open()
	write(d, "a")
	d.Close()

	// Removed: the next Open creates the directory again, and files land
	// at its path.
	if err := os.RemoveAll(filepath.Join(base, "callers")); err != nil {
		t.Fatal(err)
	}
	d = open()
	write(d, "b")
	d.Close()
	if _, err := os.Stat(filepath.Join(d.Path, "b")); err != nil {
		t.Fatalf("after removal, the file did not land at the directory's path: %v", err)
	}

	// Moved away and replaced by a link. At the instance itself: refused,
	// although the link leads to the very directory that was open.
	// Above it, leading to that very directory: the cached directory is
	// still the one served, never another. Above it, leading to any other
	// directory (a copy of the layout): refused.
	mustMove := func(rel string) string {
		t.Helper()
		moved := filepath.Join(t.TempDir(), "moved")
		if err := os.Rename(filepath.Join(base, rel), moved); err != nil {
			t.Fatal(err)
		}
		return moved
	}
	link := func(target, rel string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(base, rel)); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(what string) {
		t.Helper()
		if d, err := w.Open(owner, "k"); !errors.Is(err, ErrLink) {
			if err == nil {
				d.Close()
			}
			t.Fatalf("%s: %v, want ErrLink", what, err)
		}
	}
	reset := func() {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(base, "callers")); err != nil {
			t.Fatal(err)
		}
	}

	open().Close()
	link(mustMove("callers/alice/instances/k"), "callers/alice/instances/k")
	refused("the instance replaced by a link to it")
	reset()

	open().Close()
	moved := mustMove("callers/alice")
	link(moved, "callers/alice")
	d = open()
	write(d, "c")
	d.Close()
	if _, err := os.Stat(filepath.Join(moved, "instances/k/c")); err != nil {
		t.Fatalf("a level above replaced by a link to it: the file is not in the directory that was open: %v", err)
	}
	reset()

	open().Close()
	moved = mustMove("callers/alice")
	other := filepath.Join(t.TempDir(), "other")
	if err := os.MkdirAll(filepath.Join(other, "instances/k"), 0o750); err != nil {
		t.Fatal(err)
	}
	link(other, "callers/alice")
	refused("a level above replaced by a link to another directory")
	if entries, _ := os.ReadDir(filepath.Join(other, "instances/k")); len(entries) != 0 {
		t.Errorf("something was written through the link: %v", entries)
	}
}

// TestOpenCacheBounded: however many instance keys are used, the
// workspace keeps at most cacheSize directories open, and a Dir in use
// stays usable while others push it out of the cache.
func TestOpenCacheBounded(t *testing.T) {
	w, err := New(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	held, err := w.Open(Owner{}, "held")
	if err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	for i := range 4 * cacheSize {
		d, err := w.Open(Owner{}, fmt.Sprintf("k%d", i))
		if err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	if grew := openFDs(t) - before; grew > cacheSize {
		t.Errorf("%d more descriptors open after %d keys; at most %d are kept", grew, 4*cacheSize, cacheSize)
	}
	if err := held.Root.WriteFile("x", []byte("x"), 0o600); err != nil {
		t.Fatalf("a Dir pushed out of the cache while in use: %v", err)
	}
	held.Close()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := openFDs(t); n >= before {
		t.Errorf("%d descriptors open after Close, %d before the keys were opened", n, before)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(entries)
}

// TestReadOnlyFilesBeneathAWritableWorkspace: files meant only to be read
// are a caller's directory mounted read-only beneath a writable workspace
// (a workspace the service cannot write is refused at start, see
// TestUnwritableWorkspaceRefused). The workspace opens, Peek finds what
// is there, and a caller without files gets the empty directory. An
// immutable directory (chattr +i) refuses new entries even to root.
func TestReadOnlyFilesBeneathAWritableWorkspace(t *testing.T) {
	dir := t.TempDir()
	owner := Owner{CallerID: "reader"}
	files := filepath.Join(dir, "callers", "reader", "default")
	if err := os.MkdirAll(files, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(files, "plan.txt"), []byte("read me"), 0o640); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chattr", "+i", files).CombinedOutput(); err != nil {
		t.Skipf("chattr +i is not available here (%v: %s)", err, out)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", files).Run() })
	w, err := New(dir, Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer w.Close()
	d, err := w.Peek(owner, "")
	if err != nil {
		t.Fatalf("Peek of the read-only directory: %v", err)
	}
	if b, err := d.Root.ReadFile("plan.txt"); err != nil || string(b) != "read me" {
		t.Errorf("reading the read-only directory: %q %v", b, err)
	}
	if err := d.Root.WriteFile("new.txt", nil, 0o640); err == nil {
		t.Error("a file was made in an immutable directory")
	}
	d.Close()
	d, err = w.Peek(Owner{CallerID: "other"}, "")
	if err != nil {
		t.Fatalf("Peek of a caller without files: %v", err)
	}
	d.Close()
	if _, err := os.Lstat(filepath.Join(dir, "callers", "other")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Peek made a directory for a caller without files: %v", err)
	}
}
