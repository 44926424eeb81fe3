package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// attempt is one way of using a path with one tool.
type attempt struct {
	tool string
	args func(p string) map[string]any
}

var attempts = []attempt{
	{"fs__read", func(p string) map[string]any { return map[string]any{"path": p} }},
	{"fs__list", func(p string) map[string]any { return map[string]any{"path": p, "recursive": true} }},
	{"fs__stat", func(p string) map[string]any { return map[string]any{"path": p} }},
	{"fs__search", func(p string) map[string]any { return map[string]any{"path": p, "pattern": "OUTSIDE|other"} }},
	{"fs__write", func(p string) map[string]any { return map[string]any{"path": p, "content": "pwned"} }},
	{"fs__edit", func(p string) map[string]any {
		return map[string]any{"path": p, "oldText": outsideSecret, "newText": "pwned"}
	}},
	{"fs__delete", func(p string) map[string]any { return map[string]any{"path": p, "recursive": true} }},
}

// escapeEnv lays out an instance directory full of ways out: links to the
// directory beside the workspace, to a sibling instance and to the
// workspace itself.
func escapeEnv(t *testing.T) (e *env, key string, guarded []string) {
	e = newEnv(t, Options{}, 1<<20)
	key = "victim"
	d := e.dir(key)
	other := e.dir("other")
	mustWrite(t, filepath.Join(other, "other-secret"), "other instance's data")
	mustWrite(t, filepath.Join(d, "a", "inside.txt"), "inside")
	mustSymlink(t, "../../outside", filepath.Join(d, "link-out"))
	mustSymlink(t, e.outside, filepath.Join(d, "abs-link"))
	mustSymlink(t, "../../outside/secret", filepath.Join(d, "file-link"))
	mustSymlink(t, "chain2", filepath.Join(d, "chain1"))
	mustSymlink(t, "../../outside", filepath.Join(d, "chain2"))
	mustSymlink(t, "chain-file2", filepath.Join(d, "chain-file1"))
	mustSymlink(t, "a/../../../outside/secret", filepath.Join(d, "chain-file2"))
	mustSymlink(t, "../other", filepath.Join(d, "sibling"))
	mustSymlink(t, "..", filepath.Join(d, "up-link"))
	mustSymlink(t, "a/../..", filepath.Join(d, "a-up"))
	return e, key, []string{e.outside, other}
}

func TestEscapeCorpus(t *testing.T) {
	e, key, guarded := escapeEnv(t)
	before := map[string]map[string]fileState{}
	for _, g := range guarded {
		before[g] = snapshot(t, g)
	}
	secretPath := filepath.Join(e.outside, "secret")
	// Every tool must refuse each of these paths.
	refused := []string{
		"..", "../", "../outside/secret", "../../outside/secret", "../../etc/passwd", "../../../../../../../etc/passwd",
		"/etc/passwd", secretPath, e.outside, "/", "a/../../x", "a/../..", "a/./../../outside/secret",
		`..\outside\secret`, `a\..\..\x`, `C:\Windows`, "a\x00b", "secret\x00.txt",
		strings.Repeat("a/", 2100) + "x",
		"link-out/secret", "link-out/sub/deep", "link-out/victim", "link-out/new-file", "link-out/new-dir/new-file",
		"abs-link/secret", "abs-link/victim", "abs-link/new-file",
		"chain1/secret", "chain1/victim", "chain1/new-file",
		"sibling/other-secret", "sibling/new-file",
		"up-link/other/other-secret", "up-link/new-file", "up-link/other/new-file",
		"a-up/other/other-secret", "a-up/new-file",
	}
	// Links that point out of the workspace: what they point to must stay
	// out of reach, while stat, list and delete may act on the link itself.
	links := []string{"link-out", "abs-link", "file-link", "chain1", "chain-file1", "sibling", "up-link", "a-up"}

	for _, at := range attempts {
		for _, p := range refused {
			res := e.call(key, at.tool, at.args(p))
			if res.Status != registry.StatusError {
				t.Errorf("%s %q: succeeded with %s", at.tool, quoteShort(p), res.Output)
				continue
			}
			if res.Error.Code != registry.CodeInvalidArguments && res.Error.Code != registry.CodeTool {
				t.Errorf("%s %q: code %s", at.tool, quoteShort(p), res.Error.Code)
			}
			if res.Error.Suggestion == "" {
				t.Errorf("%s %q: no suggestion in %+v", at.tool, quoteShort(p), res.Error)
			}
			if strings.Contains(res.Error.Message, e.tmp) && !strings.Contains(p, e.tmp) {
				t.Errorf("%s %q: message reveals a host path: %s", at.tool, quoteShort(p), res.Error.Message)
			}
		}
		for _, p := range links {
			if at.tool == "fs__delete" {
				continue // below, after everything else
			}
			res := e.call(key, at.tool, at.args(p))
			out := string(res.Output)
			if strings.Contains(out, "OUTSIDE") || strings.Contains(out, "other instance") || strings.Contains(out, "victim") || strings.Contains(out, "deep") {
				t.Errorf("%s %q: output shows what is outside: %s", at.tool, p, out)
			}
			switch at.tool {
			case "fs__read", "fs__write", "fs__edit", "fs__search":
				if res.Status != registry.StatusError {
					t.Errorf("%s %q: followed a link out of the workspace: %s", at.tool, p, out)
				}
			}
		}
	}

	// Walking the whole instance never follows the links out.
	var l listResult
	e.ok(key, "fs__list", map[string]any{"recursive": true}, &l)
	for _, en := range l.Entries {
		if strings.Count(en.Path, "/") > 1 || strings.Contains(en.Path, "secret") || strings.Contains(en.Path, "victim") {
			t.Errorf("recursive listing went through a link: %s", en.Path)
		}
	}
	var s searchResult
	e.ok(key, "fs__search", map[string]any{"pattern": "OUTSIDE|other"}, &s)
	if len(s.Matches) != 0 {
		t.Errorf("search went through a link: %+v", s.Matches)
	}
	for _, p := range links {
		e.ok(key, "fs__delete", map[string]any{"path": p, "recursive": true}, nil)
	}

	for _, g := range guarded {
		sameSnapshot(t, g, before[g], snapshot(t, g))
	}
	if b, err := os.ReadFile(secretPath); err != nil || string(b) != outsideSecret {
		t.Errorf("outside secret: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(e.base, "new-file")); !os.IsNotExist(err) {
		t.Error("a file was created in the workspace base, outside the instance")
	}
}

// TestSymlinkSwapRace swaps a directory in the workspace for a symbolic
// link to a directory outside, over and over, while every tool works on
// paths through it. Whatever the timing, no call may read, list, search,
// change, create or delete anything outside.
func TestSymlinkSwapRace(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	const key = "race"
	d := e.dir(key)
	const inside = "inside"
	mustWrite(t, filepath.Join(d, "d", "secret"), inside)
	mustWrite(t, filepath.Join(d, "d", "sub", "file"), inside)
	before := snapshot(t, e.outside)

	swaps := 400
	if testing.Short() {
		swaps = 50
	}
	var done atomic.Bool
	var swapErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		targets := []string{"../../outside", e.outside}
		dir, moved := filepath.Join(d, "d"), filepath.Join(d, "d.real")
		for i := range swaps {
			if err := os.Rename(dir, moved); err != nil {
				swapErr = err
				return
			}
			// A write may create d again while it is away; such a
			// directory is inside the workspace and is simply removed.
			if err := retry(func() error { return os.Symlink(targets[i%2], dir) }, dir); err != nil {
				swapErr = err
				return
			}
			runtime.Gosched()
			if err := os.Remove(dir); err != nil {
				swapErr = err
				return
			}
			if err := retry(func() error { return os.Rename(moved, dir) }, dir); err != nil {
				swapErr = err
				return
			}
			runtime.Gosched()
		}
	}()

	var calls, succeeded atomic.Int64
	workers := 4
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !done.Load(); i++ {
				var tool string
				var args map[string]any
				switch (i + w) % 8 {
				case 0:
					tool, args = "fs__read", map[string]any{"path": "d/secret"}
				case 1:
					tool, args = "fs__write", map[string]any{"path": fmt.Sprintf("d/new-%d-%d", w, i), "content": "x"}
				case 2:
					tool, args = "fs__write", map[string]any{"path": fmt.Sprintf("d/sub/made/new-%d-%d", w, i), "content": "x", "mode": "append"}
				case 3:
					tool, args = "fs__edit", map[string]any{"path": "d/secret", "oldText": outsideSecret, "newText": "pwned"}
				case 4:
					tool, args = "fs__delete", map[string]any{"path": "d/victim"}
				case 5:
					tool, args = "fs__list", map[string]any{"path": "d", "recursive": true}
				case 6:
					tool, args = "fs__search", map[string]any{"path": "d", "pattern": "OUTSIDE"}
				case 7:
					tool, args = "fs__stat", map[string]any{"path": "d/secret"}
				}
				res := e.call(key, tool, args)
				calls.Add(1)
				out := string(res.Output)
				if res.Status == registry.StatusOK {
					succeeded.Add(1)
				}
				if strings.Contains(out, "OUTSIDE") || strings.Contains(out, "victim") || strings.Contains(out, "deep\"") {
					t.Errorf("%s %v: output shows what is outside: %s", tool, args, out)
				}
				switch tool {
				case "fs__edit", "fs__delete":
					if res.Status == registry.StatusOK {
						t.Errorf("%s %v: succeeded, so it reached outside: %s", tool, args, out)
					}
				case "fs__stat":
					if res.Status == registry.StatusOK && strings.Contains(out, `"exists":true`) && !strings.Contains(out, fmt.Sprintf(`"size":%d`, len(inside))) {
						t.Errorf("stat saw a file outside: %s", out)
					}
				}
			}
		}()
	}
	wg.Wait()
	if swapErr != nil {
		t.Fatal(swapErr)
	}
	sameSnapshot(t, "outside", before, snapshot(t, e.outside))
	if calls.Load() < int64(workers) || succeeded.Load() == 0 {
		t.Errorf("%d calls, %d succeeded: the race did not exercise the tools", calls.Load(), succeeded.Load())
	}
	t.Logf("%d swaps, %d calls, %d succeeded", swaps, calls.Load(), succeeded.Load())
}

// retry runs op until it succeeds, removing whatever is in the way at dir.
func retry(op func() error, dir string) error {
	var err error
	for range 100 {
		if err = op(); err == nil {
			return nil
		}
		// Writes racing with the removal may make it fail; try again.
		_ = os.RemoveAll(dir)
	}
	return err
}
