package rematch

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestFindInPieces(t *testing.T) {
	re := regexp.MustCompile(`b{300}z`)
	text := []byte(strings.Repeat("é", 30000) + " " + strings.Repeat("b", 300) + "z" + strings.Repeat("é", 30000))
	m := New(context.Background(), re, ProgramSize(re.String()), 1<<20)
	if m.piece >= len(text) {
		t.Fatalf("a pattern of %d instructions got pieces of %d bytes, not fewer than the %d of the text", m.insts, m.piece, len(text))
	}
	at, err := m.Find(text)
	if err != nil || at != 60001 {
		t.Fatalf("Find = %d, %v; want 60001", at, err)
	}
	if at, err := m.Find([]byte(strings.Repeat("a", 5000))); err != nil || at != -1 {
		t.Fatalf("no match: %d, %v", at, err)
	}
}

// An ended context stops a search within Steps of work, however long the
// text; a text that ends first is still answered.
func TestFindStopsWhenItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	expr := `(?:a*){1000}b`
	insts := ProgramSize(expr)
	if insts < 2000 || insts > MaxInsts {
		t.Fatalf("%s compiles to %d instructions", expr, insts)
	}
	m := New(ctx, regexp.MustCompile(expr), insts, 64<<10)
	if at, err := m.Find([]byte("ab")); err != nil || at != 0 {
		t.Fatalf("a short text: %d, %v", at, err)
	}
	if _, err := m.Find([]byte(strings.Repeat("a", 1<<20))); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled search of 1 MiB answered %v", err)
	}
}

func TestProgramSize(t *testing.T) {
	if n := ProgramSize(`x{1000}`); n < 1000 {
		t.Errorf("x{1000}: %d instructions", n)
	}
	if n := ProgramSize(`(`); n != 0 {
		t.Errorf("an invalid pattern: %d", n)
	}
}
