package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

func benchTools(b *testing.B) (*tools, string) {
	ws, err := workspace.New(b.TempDir(), workspace.Options{})
	if err != nil {
		b.Fatal(err)
	}
	d, err := ws.Open(workspace.Owner{CallerID: registry.Anonymous().ID}, "")
	if err != nil {
		b.Fatal(err)
	}
	d.Close()
	return &tools{o: Options{Workspace: ws}.withDefaults()}, d.Path
}

func BenchmarkRead(b *testing.B) {
	t, dir := benchTools(b)
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), bytes.Repeat([]byte("hello world\n"), 1<<17), 0o600); err != nil {
		b.Fatal(err)
	}
	for _, limit := range []int{16 << 10, 1 << 20} {
		args, _ := json.Marshal(map[string]any{"path": "f.txt"})
		req := &registry.Request{Arguments: args, MaxOutputBytes: limit}
		b.Run(map[int]string{16 << 10: "16KiB", 1 << 20: "1MiB"}[limit], func(b *testing.B) {
			for b.Loop() {
				if _, err := t.read(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkSearch(b *testing.B) {
	t, dir := benchTools(b)
	for i := range 200 {
		p := filepath.Join(dir, "src", string(rune('a'+i%26)), "f"+string(rune('a'+i/26))+".go")
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte("package x\n\nfunc f() { return }\n"), 200), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	// A pattern that never matches scans every file: 200 files of 6 KiB.
	args, _ := json.Marshal(map[string]any{"pattern": `func g\w*\(`})
	req := &registry.Request{Arguments: args, MaxOutputBytes: 1 << 20}
	b.SetBytes(200 * 6000)
	for b.Loop() {
		out, err := t.search(context.Background(), req)
		if err != nil || out.(searchResult).FilesScanned != 200 {
			b.Fatal(err, out)
		}
	}
}
