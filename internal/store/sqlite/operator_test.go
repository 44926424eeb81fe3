package sqlite_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// TestFailuresThatNeedAnOperatorAreMarked: a store whose file was deleted
// (before anything was written to it, too: then a reader that opens the
// path finds an empty database, "no such table") or whose WAL cannot be
// written (an I/O error: here the file made immutable) fails with
// registry.ErrStoreBroken, which the API answers with "needs an operator"
// and Retry-After 30, not "not answering; retry shortly".
func TestFailuresThatNeedAnOperatorAreMarked(t *testing.T) {
	for _, c := range []struct {
		name  string
		fault func(t *testing.T, db string) (undo func())
	}{
		{"deleted at once", func(t *testing.T, db string) func() {
			for _, f := range []string{db, db + "-wal", db + "-shm"} {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			return func() {}
		}},
		{"immutable WAL", func(t *testing.T, db string) func() {
			if out, err := exec.Command("chattr", "+i", db+"-wal").CombinedOutput(); err != nil {
				t.Skipf("chattr +i: %v %s (needs root and a file system with the flag)", err, out)
			}
			return func() { _ = exec.Command("chattr", "-i", db+"-wal").Run() }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "toolsvc.db")
			s := open(t, db, sqlite.Options{})
			ctx := t.Context()
			t.Cleanup(c.fault(t, db))
			_, _, err := s.BeginCall(ctx, &registry.CallRecord{CallerID: "c", ToolCallID: "x", ToolName: "fs__write",
				ArgumentsDigest: "d", State: registry.CallRunning})
			if !errors.Is(err, registry.ErrStoreBroken) {
				t.Errorf("BeginCall: %v, want ErrStoreBroken", err)
			}
			if c.name == "deleted at once" {
				if _, err := s.GetCall(ctx, "c", "x"); !errors.Is(err, registry.ErrStoreBroken) {
					t.Errorf("GetCall: %v, want ErrStoreBroken", err)
				}
			}
		})
	}
}
