package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// nested is the path of n nested directories named "d".
func nested(n int) string { return strings.TrimSuffix(strings.Repeat("d/", n), "/") }

// countUnder counts the files and directories beneath dir.
func countUnder(t *testing.T, dir string) int {
	t.Helper()
	n := -1 // dir itself
	err := filepath.WalkDir(dir, func(string, iofs.DirEntry, error) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// deadlineAfter is a context whose deadline passes once its Err has been
// asked n times: a handler that checks it between entries stops at a
// point the test chooses, without timing.
type deadlineAfter struct {
	context.Context
	n atomic.Int64
}

func (c *deadlineAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.DeadlineExceeded
	}
	return nil
}

// TestDeleteStopsAtItsDeadline: a recursive delete checks its context
// between entries, so a timed-out delete stops instead of going on after
// the answer, and the answer says how much of the directory is gone.
func TestDeleteStopsAtItsDeadline(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	const files, dirs = 600, 3
	for i := range files {
		mustWrite(t, filepath.Join(d, "big", fmt.Sprintf("s%d", i%dirs), fmt.Sprintf("f%03d", i)), "x")
	}
	var del *registry.Tool
	for _, tool := range Tools(Options{Workspace: e.ws}) {
		if tool.Name == "fs__delete" {
			del = tool
		}
	}
	ctx := &deadlineAfter{Context: context.Background()}
	ctx.n.Store(files / 2)
	args, _ := json.Marshal(map[string]any{"path": "big", "recursive": true})
	out, err := del.Handler.Run(ctx, &registry.Request{Name: del.Name, Arguments: args, Caller: registry.Anonymous()})
	var re *registry.Error
	if !errors.As(err, &re) || re.Code != registry.CodeTimeout {
		t.Fatalf("a delete past its deadline answered %v, %v; want E_TIMEOUT", out, err)
	}
	left := countUnder(t, filepath.Join(d, "big"))
	gone := files + dirs - left
	if gone == 0 || left == 0 {
		t.Fatalf("%d entries deleted, %d left: the delete did not stop part-way", gone, left)
	}
	if want := fmt.Sprintf("%d files and directories in it were deleted already", gone); !strings.Contains(re.Message, want) {
		t.Errorf("message %q does not say %q", re.Message, want)
	}
	if !strings.Contains(re.Suggestion, `fs__delete on "big" again`) {
		t.Errorf("suggestion: %q", re.Suggestion)
	}
	// Called again, it deletes the rest.
	e.ok("", "fs__delete", map[string]any{"path": "big", "recursive": true}, nil)
	if _, err := os.Lstat(filepath.Join(d, "big")); !os.IsNotExist(err) {
		t.Errorf("big is still there: %v", err)
	}
}

// TestDeleteRefusesTreesTooDeep: a recursive delete reads directories
// down to the depth the walks read (cost grows with the square of depth),
// and says how to delete a deeper tree.
func TestDeleteRefusesTreesTooDeep(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")

	// Entries down to maxWalkDepth levels below the path are deleted.
	mustWrite(t, filepath.Join(d, "ok", nested(maxWalkDepth-1), "f"), "x")
	if err := os.Mkdir(filepath.Join(d, "ok", nested(maxWalkDepth)), 0o750); err != nil {
		t.Fatal(err)
	}
	e.ok("", "fs__delete", map[string]any{"path": "ok", "recursive": true}, nil)
	if _, err := os.Lstat(filepath.Join(d, "ok")); !os.IsNotExist(err) {
		t.Fatalf("a tree %d levels deep was not deleted: %v", maxWalkDepth, err)
	}

	// One level more is refused, naming the directory to delete first.
	mustWrite(t, filepath.Join(d, "deep", nested(maxWalkDepth), "f"), "x")
	err := e.fail("", "fs__delete", map[string]any{"path": "deep", "recursive": true})
	limit := nested(maxWalkDepth)
	if !strings.Contains(err.Message, fmt.Sprintf("more than %d levels below it", maxWalkDepth)) || !strings.Contains(err.Suggestion, fmt.Sprintf("%q", "deep/"+limit)) {
		t.Fatalf("too deep: %+v", err)
	}
	if _, err := os.Stat(filepath.Join(d, "deep", limit, "f")); err != nil {
		t.Fatalf("the file too deep to reach is gone: %v", err)
	}
	// Following the suggestion deletes it.
	e.ok("", "fs__delete", map[string]any{"path": "deep/" + limit, "recursive": true}, nil)
	e.ok("", "fs__delete", map[string]any{"path": "deep", "recursive": true}, nil)
	if _, err := os.Lstat(filepath.Join(d, "deep")); !os.IsNotExist(err) {
		t.Errorf("deep is still there: %v", err)
	}
}

// TestDeleteTreeLeavesLinkTargets: links inside a deleted tree are
// deleted themselves, never what they point to, inside the workspace or
// out of it.
func TestDeleteTreeLeavesLinkTargets(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	keep := filepath.Join(d, "keep")
	mustWrite(t, filepath.Join(keep, "k.txt"), "keep")
	mustWrite(t, filepath.Join(d, "t", "a", "f"), "x")
	mustSymlink(t, e.outside, filepath.Join(d, "t", "a", "out"))
	mustSymlink(t, "../../keep", filepath.Join(d, "t", "a", "in"))
	mustSymlink(t, "../keep/k.txt", filepath.Join(d, "t", "fl"))
	outside, kept := snapshot(t, e.outside), snapshot(t, keep)
	e.ok("", "fs__delete", map[string]any{"path": "t", "recursive": true}, nil)
	if _, err := os.Lstat(filepath.Join(d, "t")); !os.IsNotExist(err) {
		t.Errorf("t is still there: %v", err)
	}
	sameSnapshot(t, "outside", outside, snapshot(t, e.outside))
	sameSnapshot(t, "keep", kept, snapshot(t, keep))
}

// TestDeleteTreeSwapRace swaps the directory being deleted for a link to
// another directory of the workspace, over and over: the delete opens
// the directory by name after looking at it, and must notice that it is
// not the one it looked at rather than empty the link's target.
func TestDeleteTreeSwapRace(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	keep := filepath.Join(d, "keep")
	mustWrite(t, filepath.Join(keep, "k.txt"), "keep")
	mustWrite(t, filepath.Join(keep, "sub", "k.txt"), "keep")
	kept := snapshot(t, keep)
	tree, away := filepath.Join(d, "t"), filepath.Join(d, "t.away")
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	stopped := 0
	for range rounds {
		for i := range 30 {
			mustWrite(t, filepath.Join(tree, fmt.Sprintf("s%d", i%3), "in", fmt.Sprintf("f%d", i)), "x")
		}
		var done atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !done.Load() {
				// Errors are expected: the delete removes the link, or
				// the directory, under the swaps.
				if os.Rename(tree, away) != nil {
					continue
				}
				_ = os.Symlink("keep", tree)
				_ = os.Remove(tree)
				_ = os.Rename(away, tree)
			}
		})
		res := e.call("", "fs__delete", map[string]any{"path": "t", "recursive": true})
		done.Store(true)
		wg.Wait()
		if res.Status != registry.StatusOK {
			if stopped++; stopped == 1 {
				t.Logf("a stopped delete: %+v", res.Error)
			}
		}
		for _, p := range []string{tree, away} {
			if fi, err := os.Lstat(p); err == nil && fi.Mode()&iofs.ModeSymlink != 0 {
				os.Remove(p)
			}
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	sameSnapshot(t, "keep", kept, snapshot(t, keep))
	t.Logf("%d rounds, %d deletes stopped by the swaps", rounds, stopped)
}

// TestDeleteAndEditMakeNoDirectory: deleting or editing a file can only
// fail where an instance's directory does not exist yet, so neither makes
// one: a thousand failed deletes under made-up keys made a thousand.
func TestDeleteAndEditMakeNoDirectory(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	instances := filepath.Join(e.base, "callers", "anonymous", "instances")
	if err := e.fail("made-up-d", "fs__delete", map[string]any{"path": "a.txt"}); !strings.Contains(err.Message, `"a.txt" does not exist`) {
		t.Errorf("fs__delete in a new instance: %+v", err)
	}
	if err := e.fail("made-up-r", "fs__delete", map[string]any{"path": "dir", "recursive": true}); !strings.Contains(err.Message, `"dir" does not exist`) {
		t.Errorf("recursive fs__delete in a new instance: %+v", err)
	}
	if err := e.fail("made-up-e", "fs__edit", map[string]any{"path": "a.txt", "oldText": "a", "newText": "b"}); !strings.Contains(err.Message, `"a.txt" does not exist`) {
		t.Errorf("fs__edit in a new instance: %+v", err)
	}
	if _, err := os.Lstat(instances); !os.IsNotExist(err) {
		entries, _ := os.ReadDir(instances)
		t.Fatalf("failed deletes and edits made instance directories: %v", entries)
	}
	// Where the instance exists, both still work.
	e.ok("made-up-d", "fs__write", map[string]any{"path": "a.txt", "content": "a"}, nil)
	e.ok("made-up-d", "fs__edit", map[string]any{"path": "a.txt", "oldText": "a", "newText": "b"}, nil)
	e.ok("made-up-d", "fs__delete", map[string]any{"path": "a.txt"}, nil)
}

// TestWalkReadsAFullDirectoryWhole: a directory of exactly as many
// entries as a walk may look at is read whole; one more entry cuts it.
func TestWalkReadsAFullDirectoryWhole(t *testing.T) {
	const limit = 50
	e := newEnv(t, Options{MaxScanEntries: limit}, 1<<20)
	d := e.dir("")
	for i := range limit + 1 {
		if i < limit {
			mustWrite(t, filepath.Join(d, "exact", fmt.Sprintf("f%02d", i)), "x")
		}
		mustWrite(t, filepath.Join(d, "over", fmt.Sprintf("f%02d", i)), "x")
	}
	// A tree counts as a whole: a directory, 24 files in it and 25 beside.
	for i := range limit - 1 {
		name := fmt.Sprintf("f%02d", i)
		if i < 24 {
			name = "sub/" + name
		}
		mustWrite(t, filepath.Join(d, "tree", name), "x")
	}
	for _, c := range []struct {
		path  string
		files int
	}{{"exact", limit}, {"tree", limit - 1}} {
		var l listResult
		e.ok("", "fs__list", map[string]any{"path": c.path, "recursive": true}, &l)
		if l.Count != limit || l.Truncated {
			t.Errorf("list of %s (%d entries): count %d, truncated %v, reason %q", c.path, limit, l.Count, l.Truncated, l.Reason)
		}
		var s searchResult
		e.ok("", "fs__search", map[string]any{"path": c.path, "pattern": "x"}, &s)
		if s.MatchCount != c.files || s.Truncated {
			t.Errorf("search of %s (%d entries): %d matches, truncated %v, reason %q", c.path, limit, s.MatchCount, s.Truncated, s.Reason)
		}
	}
	var l listResult
	e.ok("", "fs__list", map[string]any{"path": "over"}, &l)
	if !l.Truncated || !strings.Contains(l.Reason, fmt.Sprintf("over %d entries", limit)) {
		t.Errorf("list of %d entries: truncated %v, reason %q", limit+1, l.Truncated, l.Reason)
	}
	var s searchResult
	e.ok("", "fs__search", map[string]any{"path": "over", "pattern": "x"}, &s)
	if !s.Truncated || !strings.Contains(s.Reason, fmt.Sprintf("looked at %d", limit)) {
		t.Errorf("search of %d entries: truncated %v, reason %q", limit+1, s.Truncated, s.Reason)
	}
}

// TestNotEmptyIsNotAlreadyExists: a directory found not empty when it is
// to be deleted (filled meanwhile) fails with ENOTEMPTY, which is also
// fs.ErrExist; "already exists", with its advice about write modes,
// would send the model after the wrong fix.
func TestNotEmptyIsNotAlreadyExists(t *testing.T) {
	err := fileError("t/sub", &iofs.PathError{Op: "unlinkat", Path: "t/sub", Err: syscall.ENOTEMPTY})
	var re *registry.Error
	if !errors.As(err, &re) || !strings.Contains(re.Message, `"t/sub" is a directory that is not empty`) || strings.Contains(re.Suggestion, "overwrite") {
		t.Errorf("ENOTEMPTY reads %+v", err)
	}
}
