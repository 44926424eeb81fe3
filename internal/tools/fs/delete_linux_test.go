package fs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestDeleteHoldsFewDescriptors: a recursive delete holds a few
// directories open, not one per level: os.Root.RemoveAll kept every
// parent open, and a chain of 24,000 nested directories took 19,961 of
// the service's 20,000 descriptors. Here the process may open only a few
// more files than the delete's 2×keepOpen+1 while it deletes a tree as
// deep as fs__delete goes, with files and other directories beside the
// chain at every level, so that it climbs back to each of them.
func TestDeleteHoldsFewDescriptors(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	for i := range maxWalkDepth - 1 {
		level := filepath.Join(d, "t", nested(i))
		mustWrite(t, filepath.Join(level, "f"), "x")
		mustWrite(t, filepath.Join(level, "side", "g"), "x")
	}
	mustWrite(t, filepath.Join(d, "t", nested(maxWalkDepth-1), "f"), "x")
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	var was syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &was); err != nil {
		t.Fatal(err)
	}
	low := was
	low.Cur = uint64(len(fds) + 2*keepOpen + 8)
	if low.Cur >= was.Cur {
		t.Skipf("the open-files limit is %d already", was.Cur)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	res := e.call("", "fs__delete", map[string]any{"path": "t", "recursive": true})
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &was); err != nil {
		t.Fatal(err)
	}
	if res.Status != registry.StatusOK {
		t.Fatalf("delete with %d files open at most: %+v", low.Cur, res.Error)
	}
	if _, err := os.Lstat(filepath.Join(d, "t")); !os.IsNotExist(err) {
		t.Errorf("t is still there: %v", err)
	}
}
