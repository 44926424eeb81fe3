package fs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type editArgs struct {
	Path    string `json:"path"`
	OldText string `json:"oldText"`
	NewText string `json:"newText"`
}

type editResult struct {
	Path string `json:"path"`
	// Line is the 1-based line where the replaced text started.
	Line     int   `json:"line"`
	Replaced int   `json:"replaced"`
	Size     int64 `json:"size"`
}

func (t *tools) editTool() *registry.Tool {
	desc := fmt.Sprintf(`Edit a text file in the workspace by replacing one exact occurrence of oldText with newText. %s
oldText must occur exactly once in the file, matching character for character (including whitespace, indentation and line breaks): if it occurs zero or several times nothing is changed and the error says how many times it was found — read the file and include more surrounding lines to make it unique. An empty newText deletes oldText. Files larger than %d bytes cannot be edited.`,
		pathRules, t.o.MaxWriteBytes)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["path", "oldText", "newText"],
  "properties": {
    "path": %s,
    "oldText": {"type": "string", "minLength": 1, "maxLength": %d, "description": "The exact text to replace; it must occur exactly once in the file."},
    "newText": {"type": "string", "maxLength": %d, "description": "The text to put in its place (empty to delete oldText)."}
  }
}`, pathSchema(`File to edit, relative to the workspace root.`), t.o.MaxWriteBytes, t.o.MaxWriteBytes)
	return t.define("edit", desc, registry.SideEffecting, schema, changing(true, false), t.edit)
}

func (t *tools) edit(ctx context.Context, req *registry.Request) (any, error) {
	var a editArgs
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	rel, err := cleanPath("path", a.Path, false)
	if err != nil {
		return nil, err
	}
	if a.OldText == "" {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments, Message: "oldText is empty",
			Suggestion: "Give the exact text to replace; to create or replace a whole file use fs__write."}
	}
	// fs__edit changes only files that exist: peek, so that edits under
	// made-up instance keys make no directories.
	wd, err := t.peekDir(req)
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	root := wd.Root
	if err := fileOnly(root, a.Path, rel); err != nil {
		return nil, err
	}

	f, err := root.OpenFile(rel, os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, openError(root, rel, err, editHint)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fileError(rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(rel, fi.Mode(), editHint)
	}
	unlock, err := t.files.lock(ctx, rel, f, fi)
	if err != nil {
		return nil, err
	}
	defer unlock()
	limit := t.o.MaxWriteBytes
	if fi.Size() > limit {
		return nil, registry.ToolError(fmt.Sprintf("%s has %d bytes; fs__edit changes files of at most %d bytes", quoteShort(rel), fi.Size(), limit),
			"Use fs__read with offset to inspect it, and fs__write to replace it.")
	}
	content, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fileError(rel, err)
	}
	if int64(len(content)) > limit {
		return nil, registry.ToolError(fmt.Sprintf("%s has more than %d bytes; fs__edit changes files of at most %d bytes", quoteShort(rel), limit, limit),
			"Use fs__read with offset to inspect it, and fs__write to replace it.")
	}

	old := []byte(a.OldText)
	at, lines := occurrences(content, old, 5)
	switch {
	case len(at) == 0:
		return nil, notFoundError(rel, content, a.OldText)
	case len(at) > 1:
		count, err := countOverlapping(ctx, content, old)
		if err != nil {
			return nil, err
		}
		return nil, registry.ToolError(
			fmt.Sprintf("oldText occurs %d times in %s (at lines %s); it must occur exactly once, so nothing was changed", count, quoteShort(rel), joinInts(lines, count)),
			"Include more of the surrounding lines in oldText (and the same lines in newText) so that it matches exactly one place.")
	}
	out := make([]byte, 0, len(content)-len(old)+len(a.NewText))
	out = append(out, content[:at[0]]...)
	out = append(out, a.NewText...)
	out = append(out, content[at[0]+len(old):]...)

	if grow := len(out) - len(content); grow > 0 {
		if err := noRoom(t.o.Workspace.Room(int64(grow), 0), "so nothing was changed"); err != nil {
			return nil, err
		}
	}
	if failed := rewrite(f, content, out); failed != nil {
		return nil, failed.toolError(rel)
	}
	if err := f.Close(); err != nil {
		return nil, fileError(rel, err)
	}
	return editResult{Path: rel, Line: lines[0], Replaced: 1, Size: int64(len(out))}, nil
}

// rewrite replaces the content of f, which is old, with out. When out is
// longer, the space it needs is reserved first, so that running out of it
// changes nothing; a write that fails anyway puts old back, which fits
// where it was.
func rewrite(f *os.File, old, out []byte) *writeFailure {
	if len(out) > len(old) || sparse(f, int64(min(len(old), len(out)))) {
		if err := reserve(f, int64(len(out))); err != nil {
			// A failed fallocate may have grown the file.
			_ = f.Truncate(int64(len(old)))
			return &writeFailure{err: err, outcome: "was not changed"}
		}
	}
	if _, err := f.WriteAt(out, 0); err != nil {
		if _, rerr := f.WriteAt(old, 0); rerr == nil && f.Truncate(int64(len(old))) == nil {
			return &writeFailure{err: err, outcome: "was not changed"}
		}
		return &writeFailure{err: err, outcome: "may have been partly written"}
	}
	if err := f.Truncate(int64(len(out))); err != nil {
		return &writeFailure{err: err, outcome: "may have been partly written"}
	}
	return nil
}

// occurrences returns the offsets and line numbers of up to n (possibly
// overlapping) occurrences of old in content.
func occurrences(content, old []byte, n int) (at, lines []int) {
	from, line, counted := 0, 1, 0
	for len(at) < n {
		i := bytes.Index(content[from:], old)
		if i < 0 {
			break
		}
		pos := from + i
		line += bytes.Count(content[counted:pos], []byte{'\n'})
		counted = pos
		at, lines = append(at, pos), append(lines, line)
		from = pos + 1
	}
	return at, lines
}

// countOverlapping counts the (possibly overlapping) occurrences of old
// in content in O(len(content)+len(old)) time (Knuth-Morris-Pratt), where
// repeated searching would take O(len(content)*len(old)) for a periodic
// old such as a long run of one character; it checks ctx as it goes.
func countOverlapping(ctx context.Context, content, old []byte) (int, error) {
	fail := make([]int, len(old))
	for i, k := 1, 0; i < len(old); i++ {
		for k > 0 && old[i] != old[k] {
			k = fail[k-1]
		}
		if old[i] == old[k] {
			k++
		}
		fail[i] = k
	}
	count := 0
	for i, k := 0, 0; i < len(content); i++ {
		if i%(1<<20) == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		for k > 0 && content[i] != old[k] {
			k = fail[k-1]
		}
		if content[i] == old[k] {
			k++
		}
		if k == len(old) {
			count++
			k = fail[k-1]
		}
	}
	return count, nil
}

func joinInts(v []int, total int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	out := strings.Join(s, ", ")
	if total > len(v) {
		out += ", …"
	}
	return out
}

// notFoundError explains a missing oldText, pointing out the common near
// misses: line endings and surrounding whitespace.
func notFoundError(rel string, content []byte, old string) error {
	msg := fmt.Sprintf("oldText was not found in %s, so nothing was changed", quoteShort(rel))
	hint := "Read the file with fs__read and copy the text to replace exactly, including whitespace and indentation."
	switch {
	case !bytes.Contains(content, []byte("\r\n")) && strings.Contains(old, "\r\n") && bytes.Contains(content, []byte(strings.ReplaceAll(old, "\r\n", "\n"))):
		hint = `The file uses "\n" line endings but oldText has "\r\n"; use "\n".`
	case bytes.Contains(content, []byte("\r\n")) && !strings.Contains(old, "\r\n") && bytes.Contains(content, []byte(strings.ReplaceAll(old, "\n", "\r\n"))):
		hint = `The file uses "\r\n" line endings; write them as "\r\n" in oldText and newText.`
	case strings.TrimSpace(old) != old && strings.TrimSpace(old) != "" && bytes.Contains(content, []byte(strings.TrimSpace(old))):
		hint = "The text is there without its leading or trailing whitespace; copy the whitespace exactly as the file has it."
	}
	return registry.ToolError(msg, hint)
}

// editHint is the suggestion for a path fs__edit will not edit.
const editHint = "Only regular text files can be edited."
