package fs

import (
	"context"
	"fmt"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type listArgs struct {
	Path       string `json:"path"`
	Recursive  bool   `json:"recursive"`
	Glob       string `json:"glob"`
	MaxEntries int    `json:"maxEntries"`
}

// Entry is one file in a listing.
type Entry struct {
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

type listResult struct {
	Path      string  `json:"path"`
	Entries   []Entry `json:"entries"`
	Count     int     `json:"count"`
	Truncated bool    `json:"truncated"`
	// Reason says which limit cut the listing.
	Reason  string `json:"reason,omitempty"`
	Skipped int    `json:"skippedDirs,omitempty"`
}

func (t *tools) listTool() *registry.Tool {
	desc := fmt.Sprintf(`List the files and directories in a workspace directory, sorted by path, each with its path (relative to the workspace root, ready to pass to the other fs tools), type (file, dir, symlink or other) and size in bytes. %s
With recursive, sub-directories are listed too, down to %d levels (symbolic links are not followed). Returns at most %d entries, fewer when the output limit is reached; truncated and reason say when the listing was cut — then narrow it with a deeper path or a glob.`,
		pathRules, maxWalkDepth, t.o.MaxListEntries)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "path": %s,
    "recursive": {"type": "boolean", "default": false, "description": "List sub-directories recursively."},
    "glob": {"type": "string", "maxLength": 512, "description": %q},
    "maxEntries": {"type": "integer", "minimum": 1, "maximum": %d, "description": "Most entries to return (default and maximum %d)."}
  }
}`, pathSchema(`Directory to list, relative to the workspace root; default "." (the root).`), globDescription, t.o.MaxListEntries, t.o.MaxListEntries)
	return t.define("list", desc, registry.ReadOnly, schema, readOnly(), t.list)
}

func (t *tools) list(ctx context.Context, req *registry.Request) (any, error) {
	var a listArgs
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	rel, err := cleanPath("path", a.Path, true)
	if err != nil {
		return nil, err
	}
	glob, err := newGlob(a.Glob)
	if err != nil {
		return nil, err
	}
	limit := t.o.MaxListEntries
	if a.MaxEntries > 0 && a.MaxEntries < limit {
		limit = a.MaxEntries
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
	if err != nil {
		return nil, pathError(root, rel, err)
	}
	res := listResult{Path: rel, Entries: []Entry{}}
	if !fi.IsDir() {
		// A link to a directory inside the workspace lists that directory;
		// anything else lists as itself.
		if target, err := root.Stat(rel); err != nil || !target.IsDir() {
			res.Entries = append(res.Entries, Entry{Path: rel, Type: typeName(fi.Mode()), Size: fi.Size()})
			res.Count = 1
			return res, nil
		}
	}

	// The reason may quote a directory (up to 122 bytes) besides rel.
	budget := outputBudget(req, len(rel)+128)
	used := 0
	w := &walker{ctx: ctx, root: root, limit: t.o.MaxScanEntries}
	err = w.walk(rel, a.Recursive, func(e entry) error {
		if !glob.match(e) {
			return nil
		}
		if len(res.Entries) >= limit {
			res.Truncated, res.Reason = true, fmt.Sprintf("more than %d entries; narrow the listing with a deeper path or a glob", limit)
			return errStop
		}
		ent := Entry{Path: e.rel, Type: typeName(e.d.Type())}
		if info, err := e.d.Info(); err == nil {
			ent.Type, ent.Size = typeName(info.Mode()), info.Size()
		}
		if ent.Type == "dir" {
			ent.Size = 0
		}
		if budget >= 0 {
			used += jsonLen(ent) + 1
			if used > budget {
				res.Truncated, res.Reason = true, "output limit reached; narrow the listing with a deeper path or a glob"
				return errStop
			}
		}
		res.Entries = append(res.Entries, ent)
		return nil
	})
	if err != nil {
		return nil, err
	}
	switch {
	case w.partial != "":
		// Whatever else cut the listing, its entries from this directory
		// are a sample that only looks sorted: say so first.
		over := fmt.Sprintf("%s has over %d entries", quoteShort(w.partial), t.o.MaxScanEntries)
		if w.partial != rel {
			// The walk's limit counts every directory it read: this one
			// may hold far fewer.
			over = fmt.Sprintf("looked at %d entries, the limit, while reading %s", t.o.MaxScanEntries, quoteShort(w.partial))
		}
		res.Truncated, res.Reason = true, over+"; those read first (in no order) are listed, so names between the ones shown may exist: fs__stat a name you know"
	case w.full && !res.Truncated:
		res.Truncated, res.Reason = true, fmt.Sprintf("looked at %d entries without finishing; narrow the listing with a deeper path", t.o.MaxScanEntries)
	}
	if w.deep > 0 && !res.Truncated {
		res.Truncated, res.Reason = true, fmt.Sprintf("%d directories %d levels below %s were not read; list one of them as path to see inside it", w.deep, maxWalkDepth, quoteShort(rel))
	}
	res.Count = len(res.Entries)
	res.Skipped = w.skipped
	return res, nil
}
