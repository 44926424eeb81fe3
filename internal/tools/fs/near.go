package fs

import (
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// maxNearby bounds the entries of one directory a "does not exist" error
// reads to suggest the names a model may have meant.
const maxNearby = 1000

// maxNearLen is the longest name, in bytes, compared by edit distance
// (longer ones only ignoring case): 1,200 names of 254 bytes took 130 ms.
const maxNearLen = 64

// pathError is fileError for a failed lookup of rel beneath root, except
// that a path that does not exist is answered by missingError.
func pathError(root *os.Root, rel string, err error) error {
	if errors.Is(err, iofs.ErrNotExist) {
		return missingError(root, rel)
	}
	return fileError(rel, err)
}

// missingError says that rel does not exist beneath root, naming the
// first of its components that is missing when that is not the last, and
// the names beside it that come closest (the same in another case, or at
// most two edits away), so that a model can correct "src/Main.go" or
// "notes/todo.mdx" without listing the workspace.
func missingError(root *os.Root, rel string) error {
	q := quoteShort(rel)
	parts := strings.Split(rel, "/")
	dir := "."
	for i, name := range parts {
		p := path.Join(dir, name)
		if _, err := root.Lstat(p); err == nil {
			dir = p
			continue
		}
		msg := fmt.Sprintf("%s does not exist", q)
		if i < len(parts)-1 {
			msg = fmt.Sprintf("%s does not exist: %s has no %s", q, quoteShort(dir), quoteShort(name))
		}
		hint := "Paths are relative to the workspace root. Use fs__list to see which files exist."
		if near := nearNames(root, dir, name); len(near) > 0 {
			for j, n := range near {
				near[j] = quoteShort(path.Join(dir, n))
			}
			hint = "Did you mean " + strings.Join(near, " or ") + "? " + hint
		}
		return registry.ToolError(msg, hint)
	}
	return fileError(rel, iofs.ErrNotExist)
}

// nearNames returns up to three names in dir (of its first maxNearby
// entries) closest to name: equal but for case first, then by edit
// distance, at most two edits (one for names of up to four characters).
func nearNames(root *os.Root, dir, name string) []string {
	f, err := root.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	names, _ := f.Readdirnames(maxNearby)
	type near struct {
		name string
		d    int
	}
	var found []near
	limit := 2
	if len([]rune(name)) <= 4 {
		limit = 1
	}
	for _, n := range names {
		switch {
		case strings.EqualFold(n, name):
			found = append(found, near{n, 0})
		case len(n) <= maxNearLen && len(name) <= maxNearLen && abs(len(n)-len(name)) <= limit:
			if d := registry.EditDistance(n, name); d <= limit {
				found = append(found, near{n, d})
			}
		}
	}
	slices.SortFunc(found, func(a, b near) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for _, n := range found[:min(len(found), 3)] {
		out = append(out, n.name)
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
