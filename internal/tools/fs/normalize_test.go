package fs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

func TestNormalizePath(t *testing.T) {
	for in, want := range map[string]string{
		"./.git/config":  ".git/config",
		"notes//todo.md": "notes/todo.md",
		"a/./b/":         "a/b/",
		"newdir/.":       "newdir/",
		"./notes//":      "notes/",
		"./":             ".",
		"a.txt":          "a.txt",
		"":               "",
		"../x":           "../x", // refused by the tool, left as sent
		"/etc/passwd":    "/etc/passwd",
	} {
		args := map[string]any{"path": in}
		changed := normalizePath(args)
		if got := args["path"]; got != want || changed != (want != in) {
			t.Errorf("%q: %q (changed %v), want %q", in, got, changed, want)
		}
	}
	if normalizePath(map[string]any{"content": "x"}) {
		t.Error("no path: changed")
	}
}

// BenchmarkNormalizePath is what the policy's view of a path adds to every
// fs call: a clean path (the common case) and one to clean.
func BenchmarkNormalizePath(b *testing.B) {
	for _, p := range []string{".", "notes/todo.md", "./notes//todo.md"} {
		b.Run(p, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				normalizePath(map[string]any{"path": p})
			}
		})
	}
}

// TestPathWrittenAsDirectoryMustBeOne: policy rules see "app/.env/" with its
// final "/" (a rule on files ending ".env" does not match it), so no tool
// may act through it on the file app/.env.
func TestPathWrittenAsDirectoryMustBeOne(t *testing.T) {
	e := newEnv(t, Options{MaxWriteBytes: 1000}, 16384)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "app", ".env"), "DB_PASSWORD=hunter2\n")
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"fs__read", map[string]any{"path": "app/.env/"}},
		{"fs__read", map[string]any{"path": "app/.env/."}},
		{"fs__stat", map[string]any{"path": "app/.env/"}},
		{"fs__list", map[string]any{"path": "app/.env/"}},
		{"fs__search", map[string]any{"path": "app/.env/", "pattern": "PASSWORD"}},
		{"fs__edit", map[string]any{"path": "app/.env/", "oldText": "hunter2", "newText": "x"}},
		{"fs__delete", map[string]any{"path": "app/.env/"}},
	} {
		err := e.fail("", c.tool, c.args)
		if err.Code != registry.CodeTool || !strings.Contains(err.Message, `so it names a directory, but "app/.env" is a file`) {
			t.Errorf("%s %v: %s %q", c.tool, c.args, err.Code, err.Message)
		}
	}
	if got, err := os.ReadFile(filepath.Join(d, "app", ".env")); err != nil || string(got) != "DB_PASSWORD=hunter2\n" {
		t.Errorf("app/.env after the calls: %q, %v", got, err)
	}
	// A directory written so is still one, and a missing path is the
	// tool's own answer.
	var l listResult
	e.ok("", "fs__list", map[string]any{"path": "app/"}, &l)
	if l.Count != 1 || l.Entries[0].Path != "app/.env" {
		t.Errorf("fs__list app/: %+v", l)
	}
	// fs__read and fs__edit open no path written as a directory, so a
	// file swapped in after the check is not read either.
	for _, args := range []map[string]any{{"path": "app/"}, {"path": "app/", "oldText": "a", "newText": "b"}} {
		tool := "fs__read"
		if len(args) > 1 {
			tool = "fs__edit"
		}
		if err := e.fail("", tool, args); !strings.Contains(err.Message, `"app" is a directory, not a file`) {
			t.Errorf("%s app/: %q", tool, err.Message)
		}
	}
	var s statResult
	e.ok("", "fs__stat", map[string]any{"path": "nothing/"}, &s)
	if s.Exists {
		t.Errorf("fs__stat nothing/: %+v", s)
	}
}
