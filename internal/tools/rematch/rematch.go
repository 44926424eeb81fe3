// Package rematch matches RE2 patterns over long text within bounded
// work. RE2 takes time proportional to the bytes searched times the size
// of the compiled pattern, and one match cannot be stopped, so a tool that
// runs in the service and matches a caller's pattern over long lines
// (fs__search, result__read) matches them in pieces and checks its
// context between them; a pattern too large to keep pieces of MinPiece
// bytes is refused up front (MaxInsts). Without this, one call's pattern
// could keep a core of the service busy for many minutes after its
// timeout had answered.
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

// Matcher finds re in texts, in pieces of at most Steps/insts bytes and
// at most maxPiece, checking ctx by the work done. A match across two
// pieces is not found.
type Matcher struct {
	ctx   context.Context
	re    *regexp.Regexp
	insts int
	piece int
	// work is the matching done since ctx was last checked.
	work int
}

// New returns a matcher of re, whose program has insts instructions
// (ProgramSize), that looks at most maxPiece bytes at once.
func New(ctx context.Context, re *regexp.Regexp, insts, maxPiece int) *Matcher {
	insts = max(insts, 1)
	return &Matcher{ctx: ctx, re: re, insts: insts, piece: max(MinPiece, min(maxPiece, Steps/insts))}
}

// Find returns the offset of the first match in text, or -1, searching it
// in pieces cut at character boundaries; it fails with ctx's error once
// ctx has ended.
func (m *Matcher) Find(text []byte) (int, error) {
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
		if loc := m.re.FindIndex(text[off:end]); loc != nil {
			return off + loc[0], nil
		}
		if end >= len(text) {
			return -1, nil
		}
		off = end
	}
}
