package fs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type writeArgs struct {
	Path     string `json:"path"`
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
	Mode     string `json:"mode"`
}

type writeResult struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytesWritten"`
	Size         int64  `json:"size"`
	Created      bool   `json:"created"`
	Mode         string `json:"mode"`
}

func (t *tools) writeTool() *registry.Tool {
	perCall := fmt.Sprintf("at most %d bytes per call", t.o.MaxWriteBytes)
	if r := t.o.MaxRequestBytes; r > 0 && r < t.o.MaxWriteBytes {
		perCall = fmt.Sprintf("a call's whole request is at most %d bytes, so write a larger file in parts: the first with mode \"overwrite\", the rest with \"append\"", r)
	}
	desc := fmt.Sprintf(`Write a file in the workspace, creating missing parent directories. %s
mode "overwrite" (default) replaces the file or creates it, "append" adds to its end or creates it, "create" creates it and fails if it already exists. content is text, or base64 with encoding "base64" for binary data; %s. To change part of an existing text file, prefer fs__edit.`,
		pathRules, perCall)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["path", "content"],
  "properties": {
    "path": %s,
    "content": {"type": "string", "maxLength": %d, "description": "The bytes to write: text, or base64 when encoding is \"base64\"."},
    "encoding": {"type": "string", "enum": ["utf-8", "base64"], "default": "utf-8", "description": "How content is encoded: \"utf-8\" text (default) or \"base64\" for binary data."},
    "mode": {"type": "string", "enum": ["overwrite", "append", "create"], "default": "overwrite", "description": "\"overwrite\" replaces the file (default), \"append\" adds to its end, \"create\" fails if the file exists."}
  }
}`, pathSchema(`File to write, relative to the workspace root, e.g. "out/report.md".`), base64.StdEncoding.EncodedLen(int(t.o.MaxWriteBytes)))
	return t.define("write", desc, registry.SideEffecting, schema, changing(true, false), t.write)
}

func (t *tools) write(ctx context.Context, req *registry.Request) (any, error) {
	var a writeArgs
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	rel, err := cleanPath("path", a.Path, false)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message: "path names the workspace root, which is a directory", Suggestion: `Give a file path such as "notes.txt".`}
	}
	// cleanPath drops a final "/" or "/.", which would make "newdir/" a
	// file named newdir.
	if namesDir(a.Path) {
		tail := a.Path[strings.LastIndexByte(a.Path, '/'):]
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("path %s ends in %q, so it names a directory; fs__write writes files", quoteShort(a.Path), tail),
			Suggestion: `Give the path of a file, such as "newdir/notes.txt"; fs__write creates missing directories itself.`}
	}
	data := []byte(a.Content)
	if a.Encoding == "base64" {
		if data, err = base64.StdEncoding.DecodeString(a.Content); err != nil {
			return nil, &registry.Error{Code: registry.CodeInvalidArguments,
				Message:    fmt.Sprintf("content is not valid base64: %v", err),
				Suggestion: `Encode binary content with standard base64 (with padding), or send text with encoding "utf-8".`}
		}
	}
	if int64(len(data)) > t.o.MaxWriteBytes {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("content is %d bytes; the limit is %d", len(data), t.o.MaxWriteBytes),
			Suggestion: `Write the file in parts: the first with mode "overwrite", the rest with mode "append".`}
	}
	flags := os.O_WRONLY | syscall.O_NONBLOCK
	mode := a.Mode
	switch mode {
	case "append":
		flags |= os.O_APPEND
	case "create":
	default:
		// Not O_TRUNC: see writeContent.
		mode = "overwrite"
	}

	wd, err := t.openDir(req)
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	if err := noRoom(t.o.Workspace.Room(roomFor(wd.Root, rel, int64(len(data)), mode == "append")), "so nothing was written"); err != nil {
		return nil, err
	}
	f, created, err := openForWrite(wd.Root, rel, flags, mode == "create")
	if err != nil {
		return nil, openError(wd.Root, rel, err, writeHint)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileError(rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(rel, fi.Mode(), writeHint)
	}
	unlock, err := t.files.lock(ctx, rel, f, fi)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if fi, err = f.Stat(); err != nil { // another call may have written it meanwhile
		return nil, fileError(rel, err)
	}
	n, size, failed := writeContent(f, fi.Size(), data, mode == "append")
	if failed != nil {
		if created {
			// Nothing of a file this call made is worth keeping.
			f.Close()
			if wd.Root.Remove(rel) == nil {
				failed.outcome = "was not created"
			}
		}
		return nil, failed.toolError(rel)
	}
	if err := f.Close(); err != nil {
		return nil, fileError(rel, err)
	}
	return writeResult{Path: rel, BytesWritten: n, Size: size, Created: created, Mode: mode}, nil
}

// writeHint is the suggestion for a path fs__write will not write.
const writeHint = "Only regular files can be written; choose another path."

// roomFor is what writing n bytes to rel takes of the file system: what
// the file grows by (all of n when appending or creating it), plus a
// block and an inode for the file and for each directory to be made.
func roomFor(root *os.Root, rel string, n int64, appending bool) (bytes, inodes int64) {
	if fi, err := root.Stat(rel); err == nil {
		if appending {
			return n, 0
		}
		return max(0, n-fi.Size()), 0
	}
	// The directories that exist are a prefix of the path: find where it
	// ends by bisection, in fewer lookups than one per level.
	parts := strings.Split(path.Dir(rel), "/")
	if parts[0] == "." {
		parts = nil
	}
	lo, hi := 0, len(parts) // parts[:lo] exists; parts[:hi+1] does not, or hi is all
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if fi, err := root.Stat(strings.Join(parts[:mid], "/")); err == nil && fi.IsDir() {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	made := int64(len(parts)-lo) + 1
	return n + made*4096, made
}

// writeContent writes data to f, which holds old bytes: at its end with
// appending, else in their place. It returns the bytes written and the
// size of the file after. A failure that leaves the file as it was says
// so: an overwrite that grows a file first reserves the space it needs,
// so that running out of it changes nothing, and an append (or a write to
// an empty file) that fails part way is cut back.
//
// An overwrite writes in place rather than opening with O_TRUNC: on ext4
// a truncation to zero makes the kernel write the old content back first
// and flush the new on close (its protection for programs that replace
// files without fsync), which cost more than the rest of the call.
func writeContent(f *os.File, old int64, data []byte, appending bool) (int, int64, *writeFailure) {
	// Overwriting old bytes takes no new space, except where the new
	// content goes past them or over holes; an empty file has nothing to
	// lose.
	if !appending && old > 0 && (int64(len(data)) > old || sparse(f, min(old, int64(len(data))))) {
		if err := reserve(f, int64(len(data))); err != nil {
			// A failed fallocate may have grown the file (ext4 grows it
			// as it goes).
			_ = f.Truncate(old)
			return 0, 0, &writeFailure{err: err, outcome: "was not changed"}
		}
	}
	n, err := f.Write(data)
	if err != nil {
		return 0, 0, &writeFailure{err: err, outcome: undoWrite(f, old, n, appending)}
	}
	if appending {
		// The end may have moved with other writers' appends too.
		if fi, err := f.Stat(); err == nil {
			return n, fi.Size(), nil
		}
		return n, old + int64(n), nil
	}
	if old > int64(n) {
		if err := f.Truncate(int64(n)); err != nil {
			return 0, 0, &writeFailure{err: err, outcome: "may have been partly written"}
		}
	}
	return n, int64(n), nil
}

// sparse reports whether fewer than n bytes of f are allocated: its first
// n bytes may hold holes, which take new space when written.
func sparse(f *os.File, n int64) bool {
	fi, err := f.Stat()
	if err != nil {
		return true
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || st.Blocks*512 < n
}

// undoWrite puts f back to its old size after a write of data that failed
// having written n bytes, where that leaves the file as it was, and says
// what became of the file.
func undoWrite(f *os.File, old int64, n int, appending bool) string {
	switch {
	case appending && n == 0:
		return "was not changed"
	case appending:
		// Cut only what this write added: if the file is not old+n
		// bytes long, another writer appended too.
		if fi, err := f.Stat(); err == nil && fi.Size() == old+int64(n) && f.Truncate(old) == nil {
			return "was not changed"
		}
		return "may have been partly appended to"
	case n == 0 || old == 0:
		// Nothing overwritten (the reservation may have grown the file),
		// or nothing there to overwrite.
		if f.Truncate(old) == nil {
			return "was not changed"
		}
	}
	return "may have been partly written"
}

// reserve allocates the first size bytes of f, growing it to size,
// before they are overwritten in place, so that a file system without
// room for them fails the call before anything is changed. Where the file
// system cannot reserve space it does nothing, and the write goes ahead
// as it would have without (and may fail part way). On ext4 it costs a
// block allocation that writes would otherwise delay, so it is used only
// where old content is at stake.
func reserve(f *os.File, size int64) error {
	if size == 0 {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	err = rc.Control(func(fd uintptr) {
		// tmpfs gives up a large allocation when a signal arrives, and
		// the Go runtime sends them to preempt goroutines.
		for range 100 {
			if ferr = unix.Fallocate(int(fd), 0, 0, size); ferr != unix.EINTR {
				return
			}
		}
	})
	switch {
	case err != nil:
		return err
	case errors.Is(ferr, unix.EOPNOTSUPP), errors.Is(ferr, unix.ENOSYS):
		return nil
	}
	return ferr
}

// writeFailure is a failed write and what became of the file.
type writeFailure struct {
	err     error
	outcome string // "was not changed", "may have been partly written", …
}

// toolError tells a model why the write failed and whether the file is
// as it was.
func (w *writeFailure) toolError(rel string) *registry.Error {
	q := quoteShort(rel)
	var why, hint string
	switch {
	case errors.Is(w.err, syscall.ENOSPC):
		why, hint = "the workspace is out of space", "Delete files you no longer need, or write less."
	case errors.Is(w.err, syscall.EDQUOT):
		why, hint = "the workspace's disk quota is used up", "Delete files you no longer need, or write less."
	case errors.Is(w.err, syscall.EFBIG):
		why, hint = q+" would be larger than the service may make a file", "Write a smaller file."
	default:
		e := registry.AsError(fileError(rel, w.err))
		why, hint = e.Message, e.Suggestion
	}
	if w.outcome != "was not changed" && w.outcome != "was not created" {
		hint = strings.TrimSpace(hint + " Check the file with fs__stat or fs__read, and write it again whole with mode \"overwrite\".")
	}
	return registry.ToolError(fmt.Sprintf("%s, so %s %s", why, q, w.outcome), hint)
}

// openForWrite opens rel beneath root for writing with flags. A file that
// exists is opened as it is (unless mustCreate); a missing one is created
// with its missing parent directories, and created says so.
func openForWrite(root *os.Root, rel string, flags int, mustCreate bool) (f *os.File, created bool, err error) {
	if !mustCreate {
		// Most writes replace or extend a file that is there: one open.
		if f, err = root.OpenFile(rel, flags, 0); !errors.Is(err, iofs.ErrNotExist) {
			return f, false, err
		}
	}
	if dir := path.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o750); err != nil {
			if errors.Is(err, iofs.ErrExist) {
				// MkdirAll met a file where a directory should be.
				err = syscall.ENOTDIR
			}
			return nil, false, err
		}
	}
	f, err = root.OpenFile(rel, flags|os.O_CREATE|os.O_EXCL, 0o640)
	if mustCreate || !errors.Is(err, iofs.ErrExist) {
		return f, err == nil, err
	}
	// Another call made it since the first attempt.
	f, err = root.OpenFile(rel, flags, 0)
	return f, false, err
}
