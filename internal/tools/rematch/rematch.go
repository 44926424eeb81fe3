// Package rematch matches RE2 patterns over long text within bounded
// work. RE2 takes time proportional to the bytes searched times the size
// of the compiled pattern, and one match cannot be stopped, so a tool that
// runs in the service and matches a caller's pattern over long lines
// (fs__search, result__read) matches them in pieces and checks its
// context between them; a pattern too large to keep pieces of MinPiece
// bytes is refused up front (MaxInsts). Without this, one call's pattern
// could keep a core of the service busy for many minutes after its
// timeout had answered.
//
// A piece is matched as a text of its own, so what a pattern says about
// the edges of its text has to be kept to the line's real edges: ^, $, \A
// and \z match only where the line begins or ends (Part says which edges
// a text holds), never at a piece's edge. Word boundaries (\b, \B) at a
// piece's edge are still judged as if the text ended there.
package rematch

import (
	"context"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

const (
	// Steps bounds the work of one uninterruptible match, in bytes times
	// instructions: about 0.1 s on one core for the worst patterns
	// (Unicode classes). The context is checked after each Steps of work.
	Steps = 4 << 20
	// MinPiece is the least piece a pattern is given; MaxInsts, the
	// largest pattern accepted, keeps pieces at least this long.
	MinPiece = 1 << 10
	MaxInsts = Steps / MinPiece
)

// ProgramSize is the number of instructions expr compiles to, the factor
// by which RE2's matching time grows with the input (0 when expr does
// not compile).
func ProgramSize(expr string) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return 0
	}
	return len(prog.Inst)
}

// Part says which edges of a line a text holds: a line longer than a
// reader's buffer is passed on in parts, and only its first part begins
// the line, only its last ends it.
type Part uint8

const (
	// Middle is a text that neither begins nor ends its line.
	Middle Part = 0
	// Start is a text that begins a line that goes on after it.
	Start Part = 1
	// End is a text that ends a line that began before it.
	End Part = 2
	// Whole is a whole line.
	Whole = Start | End
)

// Matcher finds re in texts, in pieces of at most Steps/insts bytes and
// at most maxPiece, checking ctx by the work done. A match across two
// pieces is not found.
type Matcher struct {
	ctx context.Context
	// re is the pattern for a piece by the edges of its line it holds:
	// re[Whole] is the pattern as given; in the others the assertions
	// of a missing edge never match. They are made when first needed.
	re    [4]*regexp.Regexp
	insts int
	piece int
	// work is the matching done since ctx was last checked.
	work int
}

// New returns a matcher of re, whose program has insts instructions
// (ProgramSize), that looks at most maxPiece bytes at once.
func New(ctx context.Context, re *regexp.Regexp, insts, maxPiece int) *Matcher {
	insts = max(insts, 1)
	m := &Matcher{ctx: ctx, insts: insts, piece: max(MinPiece, min(maxPiece, Steps/insts))}
	m.re[Whole] = re
	return m
}

// Find returns the offset of the first match in text, or -1, searching it
// in pieces cut at character boundaries; it fails with ctx's error once
// ctx has ended. text is a line or a part of one (it holds no line
// break), and part says which of the line's edges it holds.
func (m *Matcher) Find(text []byte, part Part) (int, error) {
	for off := 0; ; {
		if m.work >= Steps {
			if err := m.ctx.Err(); err != nil {
				return -1, err
			}
			m.work = 0
		}
		end := min(len(text), off+m.piece)
		for end < len(text) && end > off+1 && !utf8.RuneStart(text[end]) {
			end--
		}
		m.work += (end - off + 1) * m.insts
		p := Middle
		if off == 0 {
			p |= part & Start
		}
		if end == len(text) {
			p |= part & End
		}
		if loc := m.pattern(p).FindIndex(text[off:end]); loc != nil {
			return off + loc[0], nil
		}
		if end >= len(text) {
			return -1, nil
		}
		off = end
	}
}

// pattern returns the pattern for a piece that holds the edges p of its
// line.
func (m *Matcher) pattern(p Part) *regexp.Regexp {
	if m.re[p] == nil {
		m.re[p] = withoutEdges(m.re[Whole], p)
	}
	return m.re[p]
}

// withoutEdges returns re with the assertions of the line edges a piece
// does not hold (those not in p) made never to match; re itself when it
// has none.
func withoutEdges(re *regexp.Regexp, p Part) *regexp.Regexp {
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil || !dropEdges(tree, p) {
		return re
	}
	if out, err := regexp.Compile(tree.String()); err == nil {
		return out
	}
	return re
}

// dropEdges replaces in t the assertions of the edges not in p by a
// pattern that matches nothing, and reports whether it replaced any.
// Texts hold no line break, so ^ and $ of multi-line mode can match only
// at a text's edges too.
func dropEdges(t *syntax.Regexp, p Part) bool {
	changed := false
	switch t.Op {
	case syntax.OpBeginText, syntax.OpBeginLine:
		if p&Start == 0 {
			*t = syntax.Regexp{Op: syntax.OpNoMatch}
			return true
		}
	case syntax.OpEndText, syntax.OpEndLine:
		if p&End == 0 {
			*t = syntax.Regexp{Op: syntax.OpNoMatch}
			return true
		}
	}
	for _, sub := range t.Sub {
		if dropEdges(sub, p) {
			changed = true
		}
	}
	return changed
}
