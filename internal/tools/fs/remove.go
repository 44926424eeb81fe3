package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path"
	"syscall"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// removeTree deletes the directory rel beneath root, whose Lstat is fi,
// and everything in it, going on past what it cannot delete.
//
// It does not use os.Root.RemoveAll, which keeps every directory above
// the one it is emptying open and never looks at a context: a chain of
// 24,000 nested directories took 19,961 descriptors and failed "too many
// open files", and a delete that timed out went on after the answer.
// Instead it keeps open only the top and the bottom keepOpen levels of
// the path it is in, opening the ones between again by name when it
// climbs back up to them; checks the context at every entry; and reads no
// directory more than maxWalkDepth levels below rel, as the walks do
// (deeper than 2×keepOpen, climbing reopens the path, so cost grows with
// the square of depth).
func removeTree(ctx context.Context, root *os.Root, rel string, fi iofs.FileInfo) error {
	r := &remover{ctx: ctx, root: root, rel: rel}
	err := r.run(fi)
	q := quoteShort(rel)
	var tooDeep *deepError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return &registry.Error{Code: registry.CodeTimeout,
			Message: fmt.Sprintf("deleting %s stopped at the call's deadline; %s, the rest is still there", q, r.deletedSoFar()),
			Suggestion: fmt.Sprintf("Call fs__delete on %s again to delete the rest (with a larger timeoutMs if you set one), or delete its sub-directories one at a time.",
				q)}
	case errors.As(err, &tooDeep):
		fix := fmt.Sprintf("Its directories that deep have paths longer than %d bytes, which no fs tool takes: a program such as rm -rf, if you can run one, can delete them.", MaxPathBytes)
		if len(tooDeep.path) <= MaxPathBytes {
			fix = fmt.Sprintf("Delete the deepest directories first: call fs__delete with recursive: true on %q (%d levels below %s), then on %s again; a program such as rm -rf, if you can run one, deletes deep trees at once.",
				tooDeep.path, maxWalkDepth, q, q)
		}
		return registry.ToolError(
			fmt.Sprintf("%s has directories more than %d levels below it, deeper than fs__delete goes; it stopped at the first, and %s", q, maxWalkDepth, r.deletedSoFar()),
			fix)
	case err != nil:
		return r.stopped(err)
	case r.failed != nil:
		// Like RemoveAll, the delete went on past what it could not
		// delete: the model must hear that much of the directory is gone.
		e := fileError(r.failedPath, r.failed)
		var re *registry.Error
		if errors.As(e, &re) {
			re.Message += fmt.Sprintf(", so %s could not be deleted; %s", q, r.deletedSoFar())
			re.Suggestion = fmt.Sprintf("Use fs__list on %s to see what is left. ", q) + re.Suggestion
		}
		return e
	}
	return nil
}

// remover is the state of one removeTree.
type remover struct {
	ctx  context.Context
	root *os.Root
	rel  string
	// levels are the directories from rel down to the one being emptied.
	levels []*level
	// deleted counts the files and directories deleted so far.
	deleted int
	// failed is why failedPath, the first entry that could not be
	// deleted, was not.
	failed     error
	failedPath string
}

// level is one directory on the way down from rel.
type level struct {
	// name is its name in the level above ("" for rel).
	name string
	// fi is what it was when first opened: reopened by name, it must be
	// the same directory, so a directory moved or swapped for a link
	// meanwhile is not emptied in its place.
	fi iofs.FileInfo
	// dir is the open directory, nil while it is closed (see held).
	dir *os.Root
	// left names its entries that could not be deleted, which later
	// readings pass over; unread says it could not be read to the end.
	left   map[string]bool
	unread bool
}

// keepOpen is how many levels at the top, and how many at the bottom, of
// the path a delete is in stay open (see held): a tree up to 2×keepOpen
// deep, as most are, is never reopened, and a delete holds at most
// 2×keepOpen+1 descriptors (those levels and the one being read).
const keepOpen = 8

// held reports whether r.levels[i] stays open while the levels below it
// are emptied.
func (r *remover) held(i int) bool { return i < keepOpen || i >= len(r.levels)-keepOpen }

// kept reports whether something stays in the directory, so that it
// cannot be deleted.
func (l *level) kept() bool { return len(l.left) > 0 || l.unread }

// deepError is run's refusal of a directory whose contents lie more than
// maxWalkDepth levels below rel; path is that directory.
type deepError struct{ path string }

func (e *deepError) Error() string { return "too deep: " + e.path }

func (r *remover) run(fi iofs.FileInfo) error {
	dir, err := openSame(r.root, r.rel, fi)
	if err != nil {
		return &reopenError{path: r.rel, err: err}
	}
	r.levels = []*level{{fi: fi, dir: dir, left: map[string]bool{}}}
	defer func() {
		for _, lv := range r.levels {
			if lv.dir != nil {
				lv.dir.Close()
			}
		}
	}()
	for {
		// Climbing a chain of empty directories reads no entry: check
		// here too.
		if err := r.ctx.Err(); err != nil {
			return err
		}
		dir, err := r.last()
		if err != nil {
			return err
		}
		sub, err := r.empty(dir)
		if err != nil {
			return err
		}
		if sub != "" {
			if err := r.down(dir, sub); err != nil {
				return err
			}
			continue
		}
		// dir holds nothing more that can be deleted: climb back up and
		// delete it from its parent.
		done := r.levels[len(r.levels)-1]
		r.levels = r.levels[:len(r.levels)-1]
		done.dir.Close()
		if len(r.levels) == 0 {
			if !done.kept() {
				r.remove(r.root, r.rel, r.rel)
			}
			return nil
		}
		parent, err := r.last()
		if err != nil {
			return err
		}
		if done.kept() {
			r.levels[len(r.levels)-1].left[done.name] = true
			continue
		}
		r.remove(parent, done.name, r.path(done.name))
	}
}

// readBatch is how many names empty reads before it deletes them.
const readBatch = 1024

// empty deletes what dir, the last of r.levels, holds, other than
// directories that are not empty and entries left before, and returns
// the name of the first such directory it finds there ("": none, it is
// as empty as it gets).
func (r *remover) empty(dir *os.Root) (string, error) {
	lv := r.levels[len(r.levels)-1]
	for {
		f, err := dir.Open(".")
		if err != nil {
			r.fail(r.path(""), err)
			lv.unread = true
			return "", nil
		}
		sub, again, err := r.emptyFrom(dir, f)
		f.Close()
		if !again {
			return sub, err
		}
	}
}

// emptyFrom reads dir through f, in batches, deleting what empty
// deletes, and returns what empty returns and whether to read dir anew:
// deleting entries may reorder a directory, so a reading that
// goes on after deleting may miss some (golang.org/issue/20841).
//
// It reads names only, and tries to delete each as a file or an empty
// directory, as os.RemoveAll does: entries read with their types would
// each cost an lstat (os.Root's ReadDir makes one), slowing a delete by
// half.
func (r *remover) emptyFrom(dir *os.Root, f *os.File) (string, bool, error) {
	lv := r.levels[len(r.levels)-1]
	for {
		names, err := f.Readdirnames(readBatch)
		deleted := 0
		for _, name := range names {
			if err := r.ctx.Err(); err != nil {
				return "", false, err
			}
			if lv.left[name] {
				continue
			}
			switch err := dir.Remove(name); {
			case err == nil:
				r.deleted++
				deleted++
			case errors.Is(err, iofs.ErrNotExist):
				// Deleted by someone else meanwhile.
			case errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST):
				return name, false, nil // a directory with something in it
			default:
				r.fail(r.path(name), err)
				lv.left[name] = true
			}
		}
		switch {
		case err != nil && err != io.EOF:
			r.fail(r.path(""), err)
			lv.unread = true
			return "", false, nil
		case len(names) < readBatch:
			// Read to the end before deleting: nothing was missed.
			return "", false, nil
		case deleted > 0:
			return "", true, nil
		}
		// A batch of entries left before: read on.
	}
}

// down opens sub, a directory in dir that is not empty, to be emptied
// next, adding it to r.levels, unless it is not to be entered: gone,
// deleted here (not a directory any more) or left.
func (r *remover) down(dir *os.Root, sub string) error {
	if len(r.levels) == maxWalkDepth {
		// sub is maxWalkDepth levels below rel: it would be deleted if
		// empty, but is never read.
		return &deepError{path: r.path(sub)}
	}
	lv := r.levels[len(r.levels)-1]
	fi, err := dir.Lstat(sub)
	switch {
	case errors.Is(err, iofs.ErrNotExist):
		return nil
	case err != nil:
		r.fail(r.path(sub), err)
		lv.left[sub] = true
		return nil
	case !fi.IsDir():
		// Replaced by a file or a link since: delete that, never what a
		// link points to.
		r.remove(dir, sub, r.path(sub))
		return nil
	}
	next, err := openSame(dir, sub, fi)
	if err != nil {
		r.fail(r.path(sub), err)
		lv.left[sub] = true
		return nil
	}
	r.levels = append(r.levels, &level{name: sub, fi: fi, dir: next, left: map[string]bool{}})
	if i := len(r.levels) - 1 - keepOpen; !r.held(i) && r.levels[i].dir != nil {
		r.levels[i].dir.Close()
		r.levels[i].dir = nil
	}
	return nil
}

// last returns the last of r.levels open, opening the levels down to it
// again by name from the deepest one still open, checking that each is
// the directory that was there before.
func (r *remover) last() (*os.Root, error) {
	n := len(r.levels)
	if dir := r.levels[n-1].dir; dir != nil {
		return dir, nil
	}
	i := n - 1
	for r.levels[i-1].dir == nil {
		i-- // r.levels[0] is always open
	}
	for ; i < n; i++ {
		parent := r.levels[i-1]
		next, err := openSame(parent.dir, r.levels[i].name, r.levels[i].fi)
		if !r.held(i - 1) {
			parent.dir.Close()
			parent.dir = nil
		}
		if err != nil {
			return nil, &reopenError{path: r.pathAt(i), err: err}
		}
		r.levels[i].dir = next
	}
	return r.levels[n-1].dir, nil
}

// reopenError is the failure to open a directory of r.levels.
type reopenError struct {
	path string
	err  error
}

func (e *reopenError) Error() string { return e.path + ": " + e.err.Error() }

// stopped is removeTree's error when a directory could not be opened
// (again), or the call was cancelled.
func (r *remover) stopped(err error) error {
	var re *reopenError
	if !errors.As(err, &re) {
		return err
	}
	q, p := quoteShort(r.rel), quoteShort(re.path)
	what := fmt.Sprintf("so deleting %s stopped; %s", q, r.deletedSoFar())
	look := fmt.Sprintf("Use fs__list on %s to see what is left", q)
	switch {
	case errors.Is(re.err, errChanged) || errors.Is(re.err, syscall.ELOOP) || errors.Is(re.err, syscall.ENOTDIR):
		return registry.ToolError(fmt.Sprintf("%s was moved or replaced while it was being deleted, %s", p, what),
			look+", and delete it again once nothing else changes it.")
	case errors.Is(re.err, iofs.ErrNotExist):
		return registry.ToolError(fmt.Sprintf("%s was moved or deleted by something else while it was being deleted, %s", p, what),
			look+", and delete it again once nothing else changes it.")
	}
	e := fileError(re.path, re.err)
	var te *registry.Error
	if errors.As(e, &te) {
		te.Message += ", " + what
		te.Suggestion = look + ". " + te.Suggestion
	}
	return e
}

// errChanged says a directory found by name is not the one looked at.
var errChanged = errors.New("not the directory that was there")

// openSame opens the directory name beneath dir, which must be the one
// fi describes: a link put in its place, or another directory moved
// there, is refused (errChanged).
func openSame(dir *os.Root, name string, fi iofs.FileInfo) (*os.Root, error) {
	next, err := dir.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	got, err := next.Stat(".")
	if err != nil || !os.SameFile(fi, got) {
		next.Close()
		return nil, errChanged
	}
	return next, nil
}

// remove deletes name, a file, link or empty directory beneath dir (p is
// its path from the workspace root), counting it or noting the failure.
func (r *remover) remove(dir *os.Root, name, p string) {
	switch err := dir.Remove(name); {
	case err == nil:
		r.deleted++
	case errors.Is(err, iofs.ErrNotExist):
		// Deleted by someone else meanwhile.
	default:
		r.fail(p, err)
		if len(r.levels) > 0 {
			r.levels[len(r.levels)-1].left[name] = true
		}
	}
}

func (r *remover) fail(p string, err error) {
	if r.failed == nil {
		r.failed, r.failedPath = err, p
	}
}

// path is the path from the workspace root of name in the directory
// being emptied ("": that directory).
func (r *remover) path(name string) string {
	return path.Join(r.pathAt(len(r.levels)-1), name)
}

// pathAt is the path from the workspace root of r.levels[i].
func (r *remover) pathAt(i int) string {
	p := r.rel
	for _, lv := range r.levels[1 : i+1] {
		p += "/" + lv.name
	}
	return p
}

// deletedSoFar says how much of the directory was deleted.
func (r *remover) deletedSoFar() string {
	switch r.deleted {
	case 0:
		return "nothing in it was deleted"
	case 1:
		return "1 file or directory in it was deleted already"
	}
	return fmt.Sprintf("%d files and directories in it were deleted already", r.deleted)
}
