package fs

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/rematch"
)

// A complex pattern searches a long line in small pieces, so it still
// finds a match inside one piece; a pattern too large is refused.
func TestSearchBoundsTheWorkOfOneMatch(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	line := strings.Repeat("é", 30000) + " " + strings.Repeat("b", 300) + "z" + strings.Repeat("é", 30000)
	mustWrite(t, filepath.Join(e.dir(""), "long.txt"), line+"\n")
	var r searchResult
	e.ok("", "fs__search", map[string]any{"pattern": `b{300}z`, "path": "long.txt"}, &r)
	if len(r.Matches) != 1 || r.Matches[0].Column != 60002 {
		t.Fatalf("%+v", r)
	}
	if size := rematch.ProgramSize(`[\p{L}\p{N}]{1000}z`); size <= 1000 || size > rematch.MaxInsts {
		t.Fatalf("program size %d", size)
	}
	err := e.fail("", "fs__search", map[string]any{"pattern": strings.Repeat(`\w{1000}`, 5)})
	if err.Code != registry.CodeInvalidArguments || !strings.Contains(err.Message, "instructions; the limit is 4096") {
		t.Fatalf("%+v", err)
	}
}

// Counting a long periodic oldText in a file made of it is linear, and
// the count is exact.
func TestEditCountsOverlapsInLinearTime(t *testing.T) {
	content := []byte(strings.Repeat("a", 4<<20))
	old := []byte(strings.Repeat("a", 300000))
	n, err := countOverlapping(context.Background(), content, old)
	if err != nil || n != len(content)-len(old)+1 {
		t.Fatalf("count %d %v", n, err)
	}
	n, _ = countOverlapping(context.Background(), []byte("abababa"), []byte("aba"))
	if n != 3 {
		t.Fatalf("abababa/aba: %d", n)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := countOverlapping(ctx, content, old); err == nil {
		t.Fatal("an expired context did not stop the count")
	}
}
