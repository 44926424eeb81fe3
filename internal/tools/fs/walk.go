package fs

import (
	"context"
	"errors"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// errStop ends a walk early without an error.
var errStop = errors.New("stop walking")

// walker visits a directory tree through an os.Root in sorted, depth-first
// order, looking at no more than limit entries in all. It never follows
// symbolic links to directories.
type walker struct {
	ctx   context.Context
	root  *os.Root
	limit int
	// seen counts the entries read so far.
	seen int
	// full is set when the walk stopped at limit.
	full bool
	// skipped counts directories that could not be read.
	skipped int
}

// entry is one visited directory entry.
type entry struct {
	// rel is the path from the workspace root; sub is the path from the
	// directory the walk started at.
	rel, sub string
	d        iofs.DirEntry
}

// walk calls fn for each entry under dir (not dir itself). With recursive
// it descends into sub-directories after visiting them. fn may return
// errStop to end the walk.
func (w *walker) walk(dir string, recursive bool, fn func(e entry) error) error {
	err := w.walkDir(dir, "", recursive, fn)
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

func (w *walker) walkDir(dir, sub string, recursive bool, fn func(e entry) error) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	ents, err := w.readDir(dir)
	if err != nil && len(ents) == 0 {
		if sub == "" {
			return fileError(dir, err)
		}
		w.skipped++
		return nil
	}
	for _, d := range ents {
		e := entry{rel: path.Join(dir, d.Name()), sub: path.Join(sub, d.Name()), d: d}
		if err := fn(e); err != nil {
			return err
		}
		if recursive && d.IsDir() {
			if err := w.walkDir(e.rel, e.sub, true, fn); err != nil {
				return err
			}
		}
	}
	if w.full {
		return errStop
	}
	return nil
}

// readDir reads the entries of dir, sorted by name, stopping at the
// walker's limit.
func (w *walker) readDir(dir string) ([]iofs.DirEntry, error) {
	f, err := w.root.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var all []iofs.DirEntry
	for {
		room := w.limit - w.seen
		if room <= 0 {
			w.full = true
			break
		}
		ents, err := f.ReadDir(min(room, 256))
		w.seen += len(ents)
		all = append(all, ents...)
		if err == io.EOF {
			break
		}
		if err != nil {
			slices.SortFunc(all, byName)
			return all, err
		}
		if err := w.ctx.Err(); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(all, byName)
	return all, nil
}

func byName(a, b iofs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) }

// globMatcher matches walked paths against a pattern: one with a "/" is
// matched against the path from the walk's start, one without against the
// entry's name at any depth.
type globMatcher struct {
	pattern string
	full    bool
}

func newGlob(pattern string) (*globMatcher, bool) {
	if pattern == "" {
		return nil, true
	}
	if !doublestar.ValidatePattern(pattern) {
		return nil, false
	}
	return &globMatcher{pattern: pattern, full: strings.Contains(pattern, "/")}, true
}

func (g *globMatcher) match(e entry) bool {
	if g == nil {
		return true
	}
	name := e.d.Name()
	if g.full {
		name = e.sub
	}
	ok, _ := doublestar.Match(g.pattern, name)
	return ok
}

// globSchema describes the glob property of fs__list and fs__search.
const globDescription = `Optional glob that paths must match: "*" matches within a name, "**" any number of directories, "?" one character, "{a,b}" alternatives, "[a-z]" a class. A pattern without "/" matches file names at any depth (e.g. "*.go"); one with "/" matches the path below the listed directory (e.g. "src/**/*_test.go").`
