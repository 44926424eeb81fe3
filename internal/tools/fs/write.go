package fs

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path"
	"syscall"

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
	desc := fmt.Sprintf(`Write a file in the workspace, creating missing parent directories. %s
mode "overwrite" (default) replaces the file or creates it, "append" adds to its end or creates it, "create" creates it and fails if it already exists. content is text, or base64 with encoding "base64" for binary data; at most %d bytes per call. To change part of an existing text file, prefer fs__edit.`,
		pathRules, t.o.MaxWriteBytes)
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
		// The file is not opened with O_TRUNC but cut after the write if
		// it was longer: on ext4 a truncation to zero makes the kernel
		// write the old content back first and flush the new on close
		// (its protection for programs that replace files without
		// fsync), which cost more than the rest of the call.
		mode = "overwrite"
	}

	wd, err := t.openDir(req)
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	f, created, err := openForWrite(wd.Root, rel, flags, mode == "create")
	if err != nil {
		return nil, fileError(rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileError(rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, registry.ToolError(fmt.Sprintf("%s is not a regular file (%s)", quoteShort(rel), fi.Mode().Type()), "Only regular files can be written.")
	}
	n, err := f.Write(data)
	if err != nil {
		return nil, fileError(rel, err)
	}
	// An overwrite or a new file holds what was written (an overwrite of a
	// longer file is cut to it); an append reads where the file ends now,
	// after any other writer's appends too.
	size := int64(n)
	switch {
	case mode == "append":
		if fi, err = f.Stat(); err != nil {
			return nil, fileError(rel, err)
		}
		size = fi.Size()
	case mode == "overwrite" && fi.Size() > size:
		if err := f.Truncate(size); err != nil {
			return nil, fileError(rel, err)
		}
	}
	if err := f.Close(); err != nil {
		return nil, fileError(rel, err)
	}
	return writeResult{Path: rel, BytesWritten: n, Size: size, Created: created, Mode: mode}, nil
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
