package fs

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestReadLargeFileIsBounded reads a 50 MB file: what comes back, and what
// the call allocates, is bounded by the read limit, not by the file.
func TestReadLargeFileIsBounded(t *testing.T) {
	const fileSize = 50 << 20
	const maxRead = 1 << 20
	e := newEnv(t, Options{MaxReadBytes: maxRead}, 8<<20)
	d := e.dir("")
	f, err := os.Create(filepath.Join(d, "big.txt"))
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
	for range fileSize / len(line) {
		if _, err := f.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	// A sparse file of the same size reads as binary.
	sf, err := os.Create(filepath.Join(d, "sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sf.Truncate(fileSize); err != nil {
		t.Fatal(err)
	}
	sf.Close()

	for _, c := range []struct {
		path, encoding string
		offset         int64
	}{{"big.txt", "utf-8", 0}, {"big.txt", "utf-8", fileSize - 100}, {"sparse.bin", "base64", 12345}} {
		var ms0, ms1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms0)
		var r readResult
		e.ok("", "fs__read", map[string]any{"path": c.path, "offset": c.offset}, &r)
		runtime.ReadMemStats(&ms1)
		allocated := ms1.TotalAlloc - ms0.TotalAlloc

		want := min(int64(maxRead), fileSize-c.offset)
		if r.BytesRead != want || r.Encoding != c.encoding || r.Size != fileSize {
			t.Errorf("%s@%d: read %d bytes (%s) of %d, want %d (%s)", c.path, c.offset, r.BytesRead, r.Encoding, r.Size, want, c.encoding)
		}
		if want < fileSize-c.offset && (!r.Truncated || r.NextOffset == nil || *r.NextOffset != c.offset+want) {
			t.Errorf("%s@%d: truncated %v next %v", c.path, c.offset, r.Truncated, r.NextOffset)
		}
		// The buffer, the string, the JSON output and its decoding in
		// this test: a few times the limit, far below the file size.
		if allocated > 16*maxRead {
			t.Errorf("%s@%d: allocated %d bytes reading a %d byte file with a %d byte limit", c.path, c.offset, allocated, fileSize, maxRead)
		}
		t.Logf("%s@%d: %d bytes back, %d bytes allocated", c.path, c.offset, len(r.Content), allocated)
	}
}

func TestSearchDoesNotReadPastLimit(t *testing.T) {
	e := newEnv(t, Options{MaxSearchBytes: 1 << 20}, 1<<20)
	d := e.dir("")
	sf, err := os.Create(filepath.Join(d, "huge.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// 20 MB of one long line, then a match past the byte limit.
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	for range 20 {
		if _, err := sf.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sf.WriteString("\nneedle\n"); err != nil {
		t.Fatal(err)
	}
	sf.Close()
	var r searchResult
	e.ok("", "fs__search", map[string]any{"pattern": "needle"}, &r)
	if r.BytesScanned > 1<<20 || !r.Truncated || len(r.Matches) != 0 {
		t.Errorf("scanned %d bytes, truncated %v, %d matches", r.BytesScanned, r.Truncated, len(r.Matches))
	}
}
