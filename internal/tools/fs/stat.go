package fs

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type statArgs struct {
	Path string `json:"path"`
}

type statResult struct {
	Path    string `json:"path"`
	Exists  bool   `json:"exists"`
	Type    string `json:"type,omitempty"`
	Size    int64  `json:"size"`
	Mode    string `json:"mode,omitempty"`
	ModTime string `json:"modTime,omitempty"`
	// LinkTarget is what a symbolic link points to, as written in the link.
	LinkTarget string `json:"linkTarget,omitempty"`
}

func (t *tools) statTool() *registry.Tool {
	desc := `Describe one workspace path without reading it: whether it exists, its type (file, dir, symlink or other), size in bytes, permission bits (octal, e.g. "0644"), modification time (RFC 3339) and, for a symbolic link, what it points to. A missing path is not an error: exists is false. ` + pathRules
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["path"],
  "properties": {
    "path": %s
  }
}`, pathSchema(`Path to describe, relative to the workspace root; "." is the root.`))
	return t.define("stat", desc, registry.ReadOnly, schema, readOnly(), t.stat)
}

func (t *tools) stat(ctx context.Context, req *registry.Request) (any, error) {
	var a statArgs
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
	if err := mustBeDir(root, a.Path, rel); err != nil {
		return nil, err
	}
	fi, err := root.Lstat(rel)
	if errors.Is(err, iofs.ErrNotExist) {
		return statResult{Path: rel}, nil
	}
	if err != nil {
		return nil, fileError(rel, err)
	}
	res := statResult{
		Path:    rel,
		Exists:  true,
		Type:    typeName(fi.Mode()),
		Size:    fi.Size(),
		Mode:    fmt.Sprintf("%04o", fi.Mode().Perm()),
		ModTime: fi.ModTime().UTC().Format(time.RFC3339),
	}
	if res.Type == "symlink" {
		if target, err := root.Readlink(rel); err == nil {
			res.LinkTarget = target
		}
	}
	return res, nil
}
