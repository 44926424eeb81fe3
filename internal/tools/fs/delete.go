package fs

import (
	"context"
	"errors"
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
	desc := `Delete a file, symbolic link or directory in the workspace. ` + pathRules + `
A directory is deleted only with recursive: true, and then with everything in it. A symbolic link is deleted itself, never what it points to. The workspace root cannot be deleted. Deleting cannot be undone.`
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
	wd, err := t.openDir(req)
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
		if err := root.RemoveAll(rel); err != nil {
			// RemoveAll goes on past what it cannot delete: some of the
			// directory may be gone.
			e := fileError(rel, err)
			var re *registry.Error
			if errors.As(e, &re) {
				re.Message += "; some of what the directory held may have been deleted already"
				re.Suggestion = fmt.Sprintf("Use fs__list on %s to see what is left. ", quoteShort(rel)) + re.Suggestion
			}
			return nil, e
		}
	} else if err := root.Remove(rel); err != nil {
		return nil, fileError(rel, err)
	}
	return deleteResult{Path: rel, Type: kind, Deleted: true}, nil
}
