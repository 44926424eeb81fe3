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
)

// errStop ends a walk early without an error.
var errStop = errors.New("stop walking")

// maxWalkDepth is how many levels below its start a walk goes: directories
// at that depth are visited but not read. Each directory is opened by its
// path from the workspace root, which os.Root resolves one name at a time,
// so a walk's cost grows with the square of its depth; a chain of 10,000
// nested directories kept a listing busy until its deadline.
const maxWalkDepth = 256

// walker visits a directory tree through an os.Root in sorted, depth-first
// order, looking at no more than limit entries in all and going no more
// than maxWalkDepth levels deep. It never follows symbolic links to
// directories.
type walker struct {
	ctx   context.Context
	root  *os.Root
	limit int
	// seen counts the entries read so far.
	seen int
	// full is set when the walk stopped at limit; partial is then the
	// directory it was reading, of which it read only some entries, in the
	// file system's order, not by name.
	full    bool
	partial string
	// skipped counts directories that could not be read.
	skipped int
	// deep counts directories not read because they lie maxWalkDepth
	// levels below the start.
	deep int
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
	err := w.walkDir(dir, "", 0, recursive, fn)
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// walkDir visits the entries of dir, which lies depth levels below the
// start. The context is checked before each entry, so that a walk ends
// soon after its deadline however large a directory is.
func (w *walker) walkDir(dir, sub string, depth int, recursive bool, fn func(e entry) error) error {
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
		if err := w.ctx.Err(); err != nil {
			return err
		}
		e := entry{rel: path.Join(dir, d.Name()), sub: path.Join(sub, d.Name()), d: d}
		if err := fn(e); err != nil {
			return err
		}
		if !recursive || !d.IsDir() {
			continue
		}
		if depth+1 >= maxWalkDepth {
			w.deep++
			continue
		}
		if err := w.walkDir(e.rel, e.sub, depth+1, true, fn); err != nil {
			return err
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
			// The limit is reached: the walk is cut only if there is
			// more to read. A directory of exactly limit entries is read
			// whole.
			more, err := f.ReadDir(1)
			if len(more) > 0 || err != nil && err != io.EOF {
				w.full, w.partial = true, dir
			}
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
