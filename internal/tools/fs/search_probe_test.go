//go:build unix

package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// A line longer than the reader's 64 KiB buffer is searched in chunks:
// column counts from the line's start, not the chunk's; a line is one
// match, at its first; and ^ matches only where the line begins. Before,
// NEEDLE after 100,000 bytes was at column 34465, a line matching in
// three chunks was three matches, and "^a" matched at the start of the
// second chunk of a line that begins with "b".
func TestSearchLongLinesByTheirStart(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "long.txt"), "first\n"+strings.Repeat("a", 100000)+"NEEDLE\n"+strings.Repeat("NEEDLE ", 30000)+"\n")
	mustWrite(t, filepath.Join(d, "b.txt"), "b"+strings.Repeat("a", 200000)+"z\n")
	var r searchResult
	e.ok("", "fs__search", map[string]any{"pattern": "NEEDLE", "path": "long.txt"}, &r)
	if len(r.Matches) != 2 || r.Matches[0].Line != 2 || r.Matches[0].Column != 100001 || r.Matches[1].Line != 3 || r.Matches[1].Column != 1 {
		t.Errorf("NEEDLE: %+v", r.Matches)
	}
	if x := r.Matches[0].Text; !strings.HasPrefix(x, "…") || !strings.HasSuffix(x, "NEEDLE") {
		t.Errorf("excerpt %q", x)
	}
	for _, c := range []struct {
		pattern string
		want    int // matches in b.txt
		column  int
	}{
		{"^a", 0, 0},
		{"a$", 0, 0},
		{"^b", 1, 1},
		{"z$", 1, 200002},
	} {
		e.ok("", "fs__search", map[string]any{"pattern": c.pattern, "path": "b.txt"}, &r)
		if len(r.Matches) != c.want || c.want > 0 && r.Matches[0].Column != c.column {
			t.Errorf("%s: %+v; want %d matches at column %d", c.pattern, r.Matches, c.want, c.column)
		}
	}
}

// A search of one file that cannot be searched fails and says why,
// instead of answering zero matches in zero files.
func TestSearchOfOneFileSaysWhyItWasNotSearched(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "secret.bin"), "secret\x00binary")
	mustWrite(t, filepath.Join(d, "locked.txt"), "secret")
	if err := syscall.Mkfifo(filepath.Join(d, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(d, "locked.txt"), 0); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{"secret.bin": "binary file", "pipe": "not a regular file (a named pipe)"}
	if os.Geteuid() != 0 { // root reads it anyway
		cases["locked.txt"] = "permission denied"
	}
	for path, want := range cases {
		err := e.fail("", "fs__search", map[string]any{"pattern": "secret", "path": path})
		if err.Code != registry.CodeTool || !strings.Contains(err.Message, want) || err.Suggestion == "" {
			t.Errorf("%s: %+v; want %q", path, err, want)
		}
	}
	// A search of the directory skips them.
	var r searchResult
	e.ok("", "fs__search", map[string]any{"pattern": "secret"}, &r)
	if r.Truncated {
		t.Errorf("directory: %+v", r)
	}
}

// A match whose path no output could hold (a path of tens of KB, deep in
// a chain of long directory names) is left out and counted, and the
// search goes on. Before, the first such match ended the search with no
// matches at all: "output limit reached".
func TestSearchLeavesOutMatchesTooLongToReturn(t *testing.T) {
	const depth = 18
	name := strings.Repeat("d", 250)
	fit := MaxPathBytes / (len(name) + 1) // f.txt in the first levels has a short enough path
	for _, c := range []struct {
		maxOutput int
		matches   int
		reason    string
	}{
		{1 << 20, fit + 1, fmt.Sprintf("%d matching lines were left out: each is in a file whose path is longer than the 4096 bytes a path may have, or is alone more than the output limit", depth-fit-1)},
		// The walk goes deepest first: the longest paths that fit come
		// first, and fill the output.
		{16384, 4, "output limit reached; use a more specific pattern, path or glob; 1 matching lines were left out"},
	} {
		e := newEnv(t, Options{}, c.maxOutput)
		chain(t, e.dir(""), name, depth)
		var r searchResult
		e.ok("", "fs__search", map[string]any{"pattern": "needle"}, &r)
		if len(r.Matches) != c.matches || !r.Truncated || !strings.HasPrefix(r.Reason, c.reason) {
			t.Errorf("output limit %d: %d matches, truncated %v, reason %q", c.maxOutput, len(r.Matches), r.Truncated, r.Reason)
		}
	}
}

// chain makes depth directories named name, each in the one before,
// below dir, with f.txt holding "needle" in dir and each of them but the
// last.
func chain(t *testing.T, dir, name string, depth int) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := root.WriteFile("f.txt", []byte("needle\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := root.Mkdir(name, 0o700); err != nil {
			t.Fatal(err)
		}
		next, err := root.OpenRoot(name)
		if err != nil {
			t.Fatal(err)
		}
		root.Close()
		root = next
	}
	root.Close()
}
