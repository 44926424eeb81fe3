package fs

import "testing"

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
