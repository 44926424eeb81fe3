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
	at, err := m.Find(text, Whole)
	if err != nil || at != 60001 {
		t.Fatalf("Find = %d, %v; want 60001", at, err)
	}
	if at, err := m.Find([]byte(strings.Repeat("a", 5000)), Whole); err != nil || at != -1 {
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
	if at, err := m.Find([]byte("ab"), Whole); err != nil || at != 0 {
		t.Fatalf("a short text: %d, %v", at, err)
	}
	if _, err := m.Find([]byte(strings.Repeat("a", 1<<20)), Whole); !errors.Is(err, context.Canceled) {
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

// ^, $, \A and \z match at the edges of the line only: not where a long
// line is cut into pieces, nor at the edges of a text that is a part of
// a line. Before, each piece was a text of its own, so "^[0-9]" matched
// at the start of every 64 KiB piece of a line that began with "{".
func TestAnchorsMatchAtTheLinesEdgesOnly(t *testing.T) {
	line := []byte("{" + strings.Repeat("1", 3*MinPiece) + "}")
	for _, c := range []struct {
		expr string
		part Part
		want int
	}{
		{`^[0-9]`, Whole, -1},
		{`(?m)^[0-9]`, Whole, -1},
		{`\A1`, Whole, -1},
		{`[0-9]$`, Whole, -1},
		{`(?m)[0-9]$`, Whole, -1},
		{`1\z`, Whole, -1},
		{`^\{`, Whole, 0},
		{`\}$`, Whole, len(line) - 1},
		{`^\{`, End, -1},
		{`^\{`, Middle, -1},
		{`\}$`, Start, -1},
		{`\}$`, Middle, -1},
		{`^1|\}$`, Whole, len(line) - 1},
		{`^\{|1$`, Start, 0},
		{`(?i)^\{1`, Whole, 0},
		{`x|1{5}`, Middle, 1},
	} {
		m := New(context.Background(), regexp.MustCompile(c.expr), ProgramSize(c.expr), MinPiece)
		if at, err := m.Find(line, c.part); err != nil || at != c.want {
			t.Errorf("%s in part %d: %d, %v; want %d", c.expr, c.part, at, err, c.want)
		}
	}
}
