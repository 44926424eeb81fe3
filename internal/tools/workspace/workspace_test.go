package workspace

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestDirStaysInside(t *testing.T) {
	w, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"conv-42", "..", ".", "../x", "a/b", "/etc", `a\b`, "x\x00y", strings.Repeat("k", 300), "_kdeadbeef", "ünï"}
	seen := map[string]string{}
	for _, k := range keys {
		dir, err := w.Dir(k)
		if err != nil {
			t.Fatalf("Dir(%q): %v", k, err)
		}
		if filepath.Dir(dir) != w.Base() {
			t.Errorf("Dir(%q) = %q, not a direct child of %q", k, dir, w.Base())
		}
		if prev, dup := seen[dir]; dup {
			t.Errorf("keys %q and %q share %q", prev, k, dir)
		}
		seen[dir] = k
	}
	if got := SanitizeKey("conv-42"); got != "conv-42" {
		t.Errorf("plain key changed: %q", got)
	}
	if dir, _ := w.Dir(""); dir != w.Base() {
		t.Errorf("empty key: %q", dir)
	}
}
