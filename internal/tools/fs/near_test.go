package fs

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingPathsSuggestNearNames: "does not exist" with only "Use
// fs__list" left a model to list the workspace for a typo; the error now
// names the missing component and the names beside it that come closest.
func TestMissingPathsSuggestNearNames(t *testing.T) {
	e := newEnv(t, Options{}, 16384)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "src", "Main.go"), "package main")
	mustWrite(t, filepath.Join(d, "notes", "todo.md"), "x")
	mustWrite(t, filepath.Join(d, "notes", "done.md"), "x")
	for _, c := range []struct {
		tool      string
		args      map[string]any
		msg, near string
	}{
		{"fs__read", map[string]any{"path": "src/main.go"}, `"src/main.go" does not exist`, `Did you mean "src/Main.go"?`},
		{"fs__read", map[string]any{"path": "notes/todo.mdx"}, `"notes/todo.mdx" does not exist`, `Did you mean "notes/todo.md"?`},
		{"fs__read", map[string]any{"path": "note/todo.md"}, `"note/todo.md" does not exist: "." has no "note"`, `Did you mean "notes"?`},
		{"fs__list", map[string]any{"path": "Notes"}, `"Notes" does not exist`, `Did you mean "notes"?`},
		{"fs__search", map[string]any{"path": "srcs", "pattern": "x"}, `"srcs" does not exist`, `Did you mean "src"?`},
		{"fs__delete", map[string]any{"path": "notes/tod.md"}, `"notes/tod.md" does not exist`, `Did you mean "notes/todo.md"?`},
		{"fs__edit", map[string]any{"path": "src/Main.og", "oldText": "a", "newText": "b"}, `"src/Main.og" does not exist`, `Did you mean "src/Main.go"?`},
	} {
		err := e.fail("", c.tool, c.args)
		if !strings.Contains(err.Message, c.msg) || !strings.Contains(err.Suggestion, c.near) {
			t.Errorf("%s %v: %q / %q", c.tool, c.args, err.Message, err.Suggestion)
		}
	}
	// Nothing near: no guess.
	if err := e.fail("", "fs__read", map[string]any{"path": "zzzzzz.txt"}); strings.Contains(err.Suggestion, "Did you mean") {
		t.Errorf("a guess for a name nothing is near: %q", err.Suggestion)
	}
}
