package fs

import (
	"context"
	"fmt"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type deleteArgs struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
}

type deleteResult struct {
	Path    string `json:"path"`
	Type    string `json:"type"`
	Deleted bool   `json:"deleted"`
}

func (t *tools) deleteTool() *registry.Tool {
	desc := fmt.Sprintf(`Delete a file, symbolic link or directory in the workspace. %s
A directory is deleted only with recursive: true, and then with everything in it, down to %d levels below it: deleting a deeper tree stops at the first directory too deep, which the error names so that you can delete it first. A symbolic link is deleted itself, never what it points to. The workspace root cannot be deleted. Deleting cannot be undone.`, pathRules, maxWalkDepth)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["path"],
  "properties": {
    "path": %s,
    "recursive": {"type": "boolean", "default": false, "description": "Required to delete a directory; deletes everything in it."}
  }
}`, pathSchema(`File or directory to delete, relative to the workspace root.`))
	return t.define("delete", desc, registry.SideEffecting, schema, changing(true, true), t.delete)
}

func (t *tools) delete(ctx context.Context, req *registry.Request) (any, error) {
	var a deleteArgs
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	rel, err := cleanPath("path", a.Path, false)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    "path names the workspace root, which cannot be deleted",
			Suggestion: "Delete the files or directories inside it one by one."}
	}
	// A missing instance can only mean "not found": peek, so that deletes
	// under made-up instance keys make no directories.
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
	kind := typeName(fi.Mode())
	if fi.IsDir() {
		if !a.Recursive {
			return nil, registry.ToolError(
				fmt.Sprintf("%s is a directory; nothing was deleted", quoteShort(rel)),
				"Pass recursive: true to delete the directory and everything in it.")
		}
		if err := removeTree(ctx, root, rel, fi); err != nil {
			return nil, err
		}
	} else if err := root.Remove(rel); err != nil {
		return nil, fileError(rel, err)
	}
	return deleteResult{Path: rel, Type: kind, Deleted: true}, nil
}
