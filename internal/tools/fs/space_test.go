package fs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// mountFS mounts a file system of type fstype (with options) at
// dir/name and returns its path. It needs root (CI runs as root);
// elsewhere the test is skipped.
func mountFS(t *testing.T, dir, name, fstype, options string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("mounting a %s needs root; run as root (as CI does) to run this test", fstype)
	}
	p := filepath.Join(dir, name)
	if err := os.Mkdir(p, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(fstype, p, fstype, unix.MS_NOSUID|unix.MS_NODEV, options); err != nil {
		t.Skipf("cannot mount a %s (%v); run as root with mount permission to run this test", fstype, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(p, 0); err != nil {
			_ = unix.Unmount(p, unix.MNT_DETACH)
		}
	})
	return p
}

// ownProcessEnv names the test that runs in this process of its own.
const ownProcessEnv = "TOOLSVC_TEST_OWN_PROCESS"

// ownProcess runs the calling test again in a process of its own and
// reports false, or reports true in that process, where the test goes on.
// RLIMIT_FSIZE binds the whole process: go test's log of the files a
// package's tests opened (testlog.txt, kept to cache results) is written
// under it too, and this package's other tests grow it past the limit, so
// the package failed with "can't write testlog.txt: file too large" in 3
// of 6 runs of the README's test command.
func ownProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(ownProcessEnv) == t.Name() {
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), ownProcessEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	switch {
	case err != nil:
		t.Fatalf("in a process of its own: %v\n%s", err, out)
	case bytes.Contains(out, []byte("--- SKIP: "+t.Name())):
		t.Skipf("in a process of its own:\n%s", out)
	case !bytes.Contains(out, []byte("--- PASS: "+t.Name())):
		t.Fatalf("in a process of its own, the test did not pass:\n%s", out)
	}
	return false
}

// limitFileSize sets the process's RLIMIT_FSIZE (the Go runtime ignores
// SIGXFSZ, so a write beyond it fails with EFBIG) and returns a function
// that restores it, which Cleanup also calls. Call it only in a test's
// own process (see ownProcess).
func limitFileSize(t *testing.T, n uint64) func() {
	t.Helper()
	if os.Getenv(ownProcessEnv) != t.Name() {
		t.Fatal("limitFileSize outside a process of the test's own: see ownProcess")
	}
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: n, Max: old.Max}); err != nil {
		t.Skipf("cannot set RLIMIT_FSIZE: %v", err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &old); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(restore)
	return restore
}

// fill returns n bytes of text that differ from those of fill with
// another seed.
func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + (seed+byte(i%23))%26
	}
	return b
}

// A write or edit that runs out of space leaves the file as it was, and
// says so.
func TestFullDiskKeepsFiles(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	disk := mountFS(t, e.dir(""), "small", "tmpfs", "size="+strconv.Itoa(1<<20)+",mode=0750")
	// 900 KiB of the 1 MiB are used.
	orig := fill(600<<10, 0)
	mustWrite(t, filepath.Join(disk, "f.bin"), string(orig))
	text := append(fill(300<<10, 4), []byte("\nMARKER\n")...)
	mustWrite(t, filepath.Join(disk, "e.txt"), string(text))
	unchanged := func(what, name string, want []byte) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(disk, name))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the file changed: %d bytes, want the original %d", what, len(got), len(want))
		}
	}
	spaceError := func(what string, err *registry.Error) {
		t.Helper()
		if err.Code != registry.CodeTool || !strings.Contains(err.Message, "out of space") || !strings.Contains(err.Message, "not changed") {
			t.Errorf("%s: %s %q", what, err.Code, err.Message)
		}
	}

	// Overwrite with more than there is room for.
	err := e.fail("", "fs__write", map[string]any{"path": "small/f.bin", "content": string(fill(900<<10, 1))})
	spaceError("overwrite", err)
	unchanged("overwrite", "f.bin", orig)

	// Append more than there is room for.
	err = e.fail("", "fs__write", map[string]any{"path": "small/f.bin", "content": string(fill(600<<10, 2)), "mode": "append"})
	spaceError("append", err)
	unchanged("append", "f.bin", orig)

	// Create a file there is no room for.
	err = e.fail("", "fs__write", map[string]any{"path": "small/new.bin", "content": string(fill(600<<10, 3))})
	if err.Code != registry.CodeTool || !strings.Contains(err.Message, "out of space") || !strings.Contains(err.Message, "not created") {
		t.Errorf("create: %s %q", err.Code, err.Message)
	}
	if _, err := os.Lstat(filepath.Join(disk, "new.bin")); !os.IsNotExist(err) {
		t.Errorf("a failed create left its file: %v", err)
	}

	// An edit that grows the file beyond the room there is.
	err = e.fail("", "fs__edit", map[string]any{"path": "small/e.txt", "oldText": "MARKER", "newText": string(fill(400<<10, 5))})
	spaceError("edit", err)
	unchanged("edit", "e.txt", text)

	// Overwriting a sparse file needs room where its holes are, though the
	// new content is shorter than the file.
	sparsePath := filepath.Join(disk, "sparse.bin")
	mustWrite(t, sparsePath, "IMPORTANT ORIGINAL CONTENT\n")
	if err := os.Truncate(sparsePath, 50<<20); err != nil {
		t.Fatal(err)
	}
	err = e.fail("", "fs__write", map[string]any{"path": "small/sparse.bin", "content": string(fill(500<<10, 6))})
	spaceError("overwrite of a sparse file", err)
	if got, _ := os.ReadFile(sparsePath); len(got) != 50<<20 || !bytes.HasPrefix(got, []byte("IMPORTANT ORIGINAL CONTENT\n")) {
		t.Errorf("overwrite of a sparse file: the file changed (%d bytes, starts %q)", len(got), got[:min(len(got), 30)])
	}
	if err := os.Remove(sparsePath); err != nil {
		t.Fatal(err)
	}

	// With room, the same calls work.
	if err := os.Remove(filepath.Join(disk, "e.txt")); err != nil {
		t.Fatal(err)
	}
	var w writeResult
	e.ok("", "fs__write", map[string]any{"path": "small/f.bin", "content": string(fill(900<<10, 1))}, &w)
	unchanged("overwrite with room", "f.bin", fill(900<<10, 1))
}

// A write beyond the process's file size limit (RLIMIT_FSIZE; the Go
// runtime ignores SIGXFSZ, so the write fails with EFBIG) leaves the file
// as it was. This needs no root.
func TestFileSizeLimitKeepsFiles(t *testing.T) {
	if !ownProcess(t) {
		return
	}
	e := newEnv(t, Options{}, 1<<20)
	d := e.dir("")
	orig := fill(600<<10, 0)
	mustWrite(t, filepath.Join(d, "f.bin"), string(orig))
	text := append(fill(300<<10, 4), []byte("\nMARKER\n")...)
	mustWrite(t, filepath.Join(d, "e.txt"), string(text))

	restore := limitFileSize(t, 700<<10)

	tooLarge := func(what string, err *registry.Error, changed string) {
		t.Helper()
		if err.Code != registry.CodeTool || !strings.Contains(err.Message, "larger") || !strings.Contains(err.Message, changed) {
			t.Errorf("%s: %s %q", what, err.Code, err.Message)
		}
	}
	tooLarge("overwrite", e.fail("", "fs__write", map[string]any{"path": "f.bin", "content": string(fill(900<<10, 1))}), "not changed")
	tooLarge("append", e.fail("", "fs__write", map[string]any{"path": "f.bin", "content": string(fill(200<<10, 2)), "mode": "append"}), "not changed")
	tooLarge("edit", e.fail("", "fs__edit", map[string]any{"path": "e.txt", "oldText": "MARKER", "newText": string(fill(500<<10, 5))}), "not changed")
	tooLarge("create", e.fail("", "fs__write", map[string]any{"path": "new.bin", "content": string(fill(900<<10, 3))}), "not created")
	restore()

	for name, want := range map[string][]byte{"f.bin": orig, "e.txt": text} {
		got, err := os.ReadFile(filepath.Join(d, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s changed: %d bytes, want %d (%v)", name, len(got), len(want), err)
		}
	}
	if _, err := os.Lstat(filepath.Join(d, "new.bin")); !os.IsNotExist(err) {
		t.Errorf("a failed create left its file: %v", err)
	}
}

// Where space cannot be reserved (ramfs has no fallocate), an overwrite
// that fails part way says that the file may have been partly written; an
// edit puts the old content back, and an append cuts what it added.
func TestUnreservedWriteSaysWhatIsLeft(t *testing.T) {
	if !ownProcess(t) {
		return
	}
	e := newEnv(t, Options{}, 1<<20)
	disk := mountFS(t, e.dir(""), "ram", "ramfs", "mode=0750")
	orig := fill(600<<10, 0)
	mustWrite(t, filepath.Join(disk, "f.bin"), string(orig))
	mustWrite(t, filepath.Join(disk, "g.bin"), string(orig))
	text := append(fill(300<<10, 4), []byte("\nMARKER\n")...)
	mustWrite(t, filepath.Join(disk, "e.txt"), string(text))
	restore := limitFileSize(t, 700<<10)

	err := e.fail("", "fs__write", map[string]any{"path": "ram/f.bin", "content": string(fill(900<<10, 1))})
	if !strings.Contains(err.Message, "larger") || !strings.Contains(err.Message, "may have been partly written") || !strings.Contains(err.Suggestion, "fs__stat") {
		t.Errorf("overwrite: %+v", err)
	}
	err = e.fail("", "fs__write", map[string]any{"path": "ram/g.bin", "content": string(fill(200<<10, 2)), "mode": "append"})
	if !strings.Contains(err.Message, "not changed") {
		t.Errorf("append: %+v", err)
	}
	err = e.fail("", "fs__edit", map[string]any{"path": "ram/e.txt", "oldText": "MARKER", "newText": string(fill(500<<10, 5))})
	if !strings.Contains(err.Message, "not changed") {
		t.Errorf("edit: %+v", err)
	}
	restore()
	for name, want := range map[string][]byte{"g.bin": orig, "e.txt": text} {
		got, err := os.ReadFile(filepath.Join(disk, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s changed: %d bytes, want %d (%v)", name, len(got), len(want), err)
		}
	}
}

// TestReserveOnASmallVolumeOfItsOwn: with the workspace on a 32 MiB volume
// of its own, the default 64 MiB reserve refused every write ("has
// 33554432 bytes free … less than the 67108864 kept free"). A reserve of
// half the file system or more keeps a tenth of it instead.
func TestReserveOnASmallVolumeOfItsOwn(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root; run as root (as CI does) to run this test")
	}
	dir := t.TempDir()
	base := mountFS(t, dir, "ws", "tmpfs", "size="+strconv.Itoa(8<<20)+",mode=0750")
	ws, err := workspace.New(base, workspace.Options{Reserve: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, Tools(Options{Workspace: ws, MaxWriteBytes: 8 << 20})...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, tmp: dir, base: base, exec: registry.NewExecutor(registry.Options{Registry: reg})}
	e.ok("", "fs__write", map[string]any{"path": "a.txt", "content": "hello"}, nil)
	// 7.5 MiB would leave less than a tenth of the 8 MiB.
	err2 := e.fail("", "fs__write", map[string]any{"path": "big.bin", "content": string(fill(7<<20+512<<10, 1))})
	if err2.Code != registry.CodeTool || !strings.Contains(err2.Message, "TOOLSVC_WORKSPACE_RESERVE") || !strings.Contains(err2.Message, "838860 kept free") {
		t.Errorf("a write into the tenth kept free: %s %q", err2.Code, err2.Message)
	}
}
