package fs

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"syscall"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type readArgs struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Limit  int64  `json:"limit"`
}

type readResult struct {
	Path       string `json:"path"`
	Content    string `json:"content"`
	Encoding   string `json:"encoding"`
	Size       int64  `json:"size"`
	Offset     int64  `json:"offset"`
	BytesRead  int64  `json:"bytesRead"`
	Truncated  bool   `json:"truncated"`
	NextOffset *int64 `json:"nextOffset,omitempty"`
}

func (t *tools) readTool() *registry.Tool {
	desc := fmt.Sprintf(`Read a file from the workspace. %s
Text (valid UTF-8 without NUL bytes) comes back as it is with encoding "utf-8"; anything else comes back base64-encoded with encoding "base64".
One call returns at most %d bytes, and less when the tool's output limit is smaller. When the file does not fit, truncated is true and nextOffset is the byte offset to pass as offset in the next call to read on.`,
		pathRules, t.o.MaxReadBytes)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["path"],
  "properties": {
    "path": %s,
    "offset": {"type": "integer", "minimum": 0, "maximum": 9007199254740991, "default": 0, "description": "Byte offset to start reading at; use nextOffset from the previous call to continue a truncated read."},
    "limit": {"type": "integer", "minimum": 1, "maximum": %d, "description": "Most bytes to read (default and maximum %d; the output limit may lower it)."}
  }
}`, pathSchema("File to read, relative to the workspace root, e.g. \"notes.txt\"."), t.o.MaxReadBytes, t.o.MaxReadBytes)
	return t.define("read", desc, registry.ReadOnly, schema, readOnly(), t.read)
}

func (t *tools) read(ctx context.Context, req *registry.Request) (any, error) {
	var a readArgs
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	rel, err := cleanPath("path", a.Path, false)
	if err != nil {
		return nil, err
	}
	wd, err := t.peekDir(req)
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	root := wd.Root
	if err := fileOnly(root, a.Path, rel); err != nil {
		return nil, err
	}

	// O_NONBLOCK keeps a FIFO from blocking the open; only regular files
	// are read.
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, openError(root, rel, err, "Only regular files can be read.")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileError(rel, err)
	}
	if fi.IsDir() {
		return nil, registry.ToolError(fmt.Sprintf("%s is a directory, not a file", quoteShort(rel)), "Use fs__list to see what it contains.")
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(rel, fi.Mode(), "Only regular files can be read.")
	}
	size := fi.Size()
	if a.Offset > size {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("offset %d is past the end of %s, which has %d bytes", a.Offset, quoteShort(rel), size),
			Suggestion: fmt.Sprintf("Use an offset between 0 and %d.", size)}
	}

	want := t.o.MaxReadBytes
	if a.Limit > 0 && a.Limit < want {
		want = a.Limit
	}
	budget := outputBudget(req, len(rel)*2)
	if budget >= 0 && int64(budget) < want {
		// Text never encodes shorter than its bytes, so the budget bounds
		// what is worth reading.
		want = int64(budget)
	}
	want = min(want, size-a.Offset)

	buf := make([]byte, want)
	n, err := io.ReadFull(io.NewSectionReader(f, a.Offset, want), buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return nil, fileError(rel, err)
	}
	buf = buf[:n]
	more := a.Offset+int64(n) < size

	res := readResult{Path: rel, Size: size, Offset: a.Offset}
	text := buf
	if more {
		// Do not split a character at the end of a chunk.
		text = registry.TrimPartialRune(buf)
	}
	// A limit smaller than one character leaves no text: send the bytes.
	if (len(text) > 0 || len(buf) == 0) && utf8.Valid(text) && bytes.IndexByte(text, 0) < 0 {
		res.Encoding = "utf-8"
		if budget >= 0 {
			text = fitText(text, budget)
		}
		res.Content = string(text)
		res.BytesRead = int64(len(text))
	} else {
		res.Encoding = "base64"
		raw := buf
		if budget >= 0 {
			if fit := budget / 4 * 3; fit < len(raw) {
				raw = raw[:fit]
			}
		}
		res.Content = base64.StdEncoding.EncodeToString(raw)
		res.BytesRead = int64(len(raw))
	}
	if next := a.Offset + res.BytesRead; next < size {
		res.Truncated = true
		res.NextOffset = &next
	}
	return res, nil
}

// openError is fileError for a failed open of rel beneath root, except
// that a file that is neither regular nor a directory is reported as
// such, with hint: an open of one can fail before the caller's own check
// sees it. On Linux a socket and a FIFO opened for writing with no reader
// give ENXIO, a device without a driver ENXIO or ENODEV (EPERM where a
// container's device rules forbid it); BSDs give EOPNOTSUPP for a
// socket. Whatever the errno, "not a regular file" is the answer a model
// can act on, so the type is looked up for any failure but a missing or
// already existing file (whose errors say what matters). root.Stat opens
// nothing, so it neither blocks on a FIFO nor leaves the root.
//
// A missing or existing file may be a symbolic link to nothing, which
// both "does not exist" (to open) and "already exists" (to create): that
// is said instead, with what to do about it.
func openError(root *os.Root, rel string, err error, hint string) error {
	if !errors.Is(err, iofs.ErrNotExist) && !errors.Is(err, iofs.ErrExist) {
		if fi, serr := root.Stat(rel); serr == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
			return notRegular(rel, fi.Mode(), hint)
		}
	} else if fi, lerr := root.Lstat(rel); lerr == nil && fi.Mode()&iofs.ModeSymlink != 0 {
		if _, serr := root.Stat(rel); errors.Is(serr, iofs.ErrNotExist) {
			target, _ := root.Readlink(rel)
			return registry.ToolError(
				fmt.Sprintf("%s is a symbolic link to %s, which does not exist", quoteShort(rel), quoteShort(target)),
				fmt.Sprintf("Delete the link with fs__delete to write a file at %s, or use the path it should lead to.", quoteShort(rel)))
		}
	}
	return pathError(root, rel, err)
}

// notRegular is the error for a special file the tools do not open as a
// file: a named pipe, socket or device.
func notRegular(rel string, m iofs.FileMode, hint string) error {
	return registry.ToolError(fmt.Sprintf("%s is not a regular file (%s)", quoteShort(rel), fileKind(m)), hint)
}

// fileKind names the type of a file that is not regular, in words.
func fileKind(m iofs.FileMode) string {
	switch {
	case m&iofs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&iofs.ModeSocket != 0:
		return "a socket"
	case m&iofs.ModeCharDevice != 0:
		return "a character device"
	case m&iofs.ModeDevice != 0:
		return "a block device"
	}
	return "a special file"
}

// fitText returns the longest prefix of valid UTF-8 text whose JSON string
// form fits in limit bytes.
func fitText(text []byte, limit int) []byte {
	n := 2
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRune(text[i:])
		n += escapedLen(r, size)
		if n > limit {
			return text[:i]
		}
		i += size
	}
	return text
}

// escapedLen is how many bytes encoding/json uses for r (an upper bound).
func escapedLen(r rune, size int) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}
