package fs

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/rematch"
)

// maxGlobInsts bounds the compiled size of a glob. Matching takes time
// proportional to the path times this size, and one match cannot be
// interrupted; a path below a walk's start is at most maxWalkDepth names
// of at most 255 bytes (64 KiB), so this keeps the worst single match
// under half a second. The most complex globs within the schema's 512
// characters ("**/**/…", "*?*?…") compile to about 800.
const maxGlobInsts = 1024

// globDescription describes the glob property of fs__list and fs__search.
const globDescription = `Optional glob that paths must match: "*" matches within a name, "**" any number of directories, "?" one character, "{a,b}" alternatives, "[a-z]" a class. A pattern without "/" matches file names at any depth (e.g. "*.go"); one with "/" matches the path below the listed directory (e.g. "src/**/*_test.go").`

// globMatcher matches walked paths against a pattern: one with a "/" is
// matched against the path from the walk's start, one without against the
// entry's name at any depth. The pattern is compiled once to an RE2
// regular expression, so a match takes time linear in the path whatever
// the pattern (a backtracking glob matcher takes exponential time on
// patterns such as "{a,a}{a,a}…b").
type globMatcher struct {
	re   *regexp.Regexp
	full bool
}

// newGlob compiles a glob; it returns nil for an empty one, which matches
// everything. The error is a registry.Error that says what is wrong.
//
// The syntax is doublestar's (github.com/bmatcuk/doublestar, which the
// tools used before): "*" is any run of characters other than "/"; "**"
// that is a whole path segment is any number of segments ("a/**/b"
// matches "a/b" and "a/x/y/b", "a/**" matches "a" and everything below
// it, "**" matches every path), and within a segment it is "*"; "?" is one
// character other than "/"; "[abc]", "[a-z]" and negated "[!a-z]" or
// "[^a-z]" are classes (non-empty; a backward range such as "z-a" matches
// its first character only); "{a,b}" are alternatives, which may nest and
// be empty; "\" makes the next character literal. A "**" in braces is a
// whole segment by its neighbours in its alternative and, at the
// alternative's edges, by what stands beside the braces.
func newGlob(pattern string) (*globMatcher, error) {
	if pattern == "" {
		return nil, nil
	}
	bad := func(why string) error {
		return &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("glob %s is not a valid pattern: %s", quoteShort(pattern), why),
			Suggestion: globDescription + ` Escape a literal "*", "?", "[", "{" or "}" with a backslash.`}
	}
	p := &globParser{s: pattern}
	seq, err := p.seq(false)
	if err == nil && p.i < len(p.s) {
		err = errGlob(`it has a "}" without a "{" before it`)
	}
	if err != nil {
		return nil, bad(err.Error())
	}
	var b strings.Builder
	b.WriteString(`(?s)^(?:`)
	emitGlob(&b, spread(seq), edgePattern, edgePattern)
	b.WriteString(`)$`)
	expr := b.String()
	if insts := rematch.ProgramSize(expr); insts > maxGlobInsts {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("glob %s is too complex: it compiles to %d instructions; the limit is %d", quoteShort(pattern), insts, maxGlobInsts),
			Suggestion: "Use fewer alternatives and wildcards, or list without a glob and narrow the listing with a deeper path."}
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		// Only nesting deeper than RE2 allows gets here.
		return nil, bad(fmt.Sprintf("it cannot be compiled (%v)", unwrapRegexp(err)))
	}
	return &globMatcher{re: re, full: strings.Contains(pattern, "/")}, nil
}

func (g *globMatcher) match(e entry) bool {
	if g == nil {
		return true
	}
	if g.full {
		return g.re.MatchString(e.sub)
	}
	return g.re.MatchString(e.d.Name())
}

type errGlob string

func (e errGlob) Error() string { return string(e) }

// globOp is the kind of a globNode.
type globOp int

const (
	opLit   globOp = iota // a literal character; re holds it quoted
	opSep                 // "/"
	opStar                // "*", or a run of stars other than "**"
	opStars               // "**", a whole segment or a "*"
	opOne                 // "?"
	opClass               // "[…]"; re holds the RE2 class
	opAlt                 // "{…,…}"
)

type globNode struct {
	op   globOp
	re   string
	alts [][]globNode
}

// globParser parses a glob into a tree of globNodes.
type globParser struct {
	s string
	i int
}

// seq parses a sequence up to the end of the pattern or, within braces,
// up to the "," or "}" that ends an alternative.
func (p *globParser) seq(inAlt bool) ([]globNode, error) {
	var seq []globNode
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch c {
		case '}':
			// The end of an alternative, or a stray "}" newGlob reports.
			return seq, nil
		case ',':
			if inAlt {
				return seq, nil
			}
			seq = append(seq, globNode{op: opLit, re: ","})
			p.i++
		case '/':
			seq = append(seq, globNode{op: opSep})
			p.i++
		case '*':
			n := 0
			for p.i < len(p.s) && p.s[p.i] == '*' {
				n, p.i = n+1, p.i+1
			}
			op := opStar
			if n == 2 {
				op = opStars
			}
			seq = append(seq, globNode{op: op})
		case '?':
			seq = append(seq, globNode{op: opOne})
			p.i++
		case '[':
			n, err := p.class()
			if err != nil {
				return nil, err
			}
			seq = append(seq, n)
		case '{':
			p.i++
			n := globNode{op: opAlt}
			for {
				alt, err := p.seq(true)
				if err != nil {
					return nil, err
				}
				n.alts = append(n.alts, alt)
				if p.i >= len(p.s) {
					return nil, errGlob(`a "{" is not closed by a "}"`)
				}
				p.i++
				if p.s[p.i-1] == '}' {
					break
				}
			}
			seq = append(seq, n)
		default:
			r, err := p.char()
			if err != nil {
				return nil, err
			}
			if r == '/' {
				seq = append(seq, globNode{op: opSep})
			} else {
				seq = append(seq, globNode{op: opLit, re: regexp.QuoteMeta(string(r))})
			}
		}
	}
	return seq, nil
}

// char reads one character, taking a backslash to quote the next one.
func (p *globParser) char() (rune, error) {
	if p.s[p.i] == '\\' {
		p.i++
		if p.i >= len(p.s) {
			return 0, errGlob("it ends in a lone backslash")
		}
	}
	r, n := utf8.DecodeRuneInString(p.s[p.i:])
	p.i += n
	return r, nil
}

// class parses "[…]" into an RE2 class. As in doublestar, "-" is a range
// between two characters and literal elsewhere.
func (p *globParser) class() (globNode, error) {
	unclosed := errGlob(`a "[" is not closed by a "]"`)
	p.i++
	negate := p.i < len(p.s) && (p.s[p.i] == '!' || p.s[p.i] == '^')
	if negate {
		p.i++
	}
	if p.i >= len(p.s) {
		return globNode{}, unclosed
	}
	if p.s[p.i] == ']' {
		return globNode{}, errGlob(`it has an empty class "[]"; put "]" in a class as "\]"`)
	}
	var ranges []string
	for {
		if p.i >= len(p.s) {
			return globNode{}, unclosed
		}
		if p.s[p.i] == ']' {
			p.i++
			break
		}
		lo, err := p.char()
		if err != nil {
			return globNode{}, unclosed
		}
		hi := lo
		if p.i+1 < len(p.s) && p.s[p.i] == '-' && p.s[p.i+1] != ']' {
			p.i++
			if hi, err = p.char(); err != nil {
				return globNode{}, unclosed
			}
		}
		// doublestar compares the first character before it sees a
		// range, so a backward range matches that character only.
		ranges = append(ranges, fmt.Sprintf(`\x{%x}-\x{%x}`, lo, max(lo, hi)))
	}
	if negate {
		return globNode{op: opClass, re: `[^` + strings.Join(ranges, "") + `]`}, nil
	}
	return globNode{op: opClass, re: `[` + strings.Join(ranges, "") + `]`}, nil
}

// edge says what lies beyond one end of a sequence.
type edge int

const (
	edgeNone    edge = iota // more of the same segment
	edgeSep                 // a "/"
	edgePattern             // the start or end of the whole pattern
)

// emitGlob writes the RE2 form of seq, whose ends lie at start and end.
func emitGlob(b *strings.Builder, seq []globNode, start, end edge) {
	// before and after say whether a segment ends just before or just
	// after the node at i.
	before := func(i int) bool {
		if i == 0 {
			return start != edgeNone
		}
		return sepAtEdge(seq[i-1], true)
	}
	after := func(i int) bool {
		if i == len(seq)-1 {
			return end != edgeNone
		}
		return sepAtEdge(seq[i+1], false)
	}
	wholeSegment := func(i int) bool {
		return i < len(seq) && seq[i].op == opStars && before(i) && after(i)
	}
	for i := 0; i < len(seq); i++ {
		n := seq[i]
		switch n.op {
		case opLit, opClass:
			b.WriteString(n.re)
		case opOne:
			b.WriteString(`[^/]`)
		case opStar:
			b.WriteString(`[^/]*`)
		case opSep:
			switch {
			case wholeSegment(i+1) && i+3 == len(seq) && seq[i+2].op == opSep && end == edgePattern && (i == 0 || !wholeSegment(i-1)):
				// "x/**/" at the end matches x and, as doublestar has it,
				// anything below x that ends in "/".
				b.WriteString(`(?:/(?:.*/)?)?`)
				i += 2
			case wholeSegment(i + 1):
				// "/**": this directory or any below it.
				b.WriteString(`(?:/.*)?`)
				i++
			default:
				b.WriteString(`/`)
			}
		case opStars:
			switch {
			case !wholeSegment(i):
				b.WriteString(`[^/]*`)
			case i+1 == len(seq):
				b.WriteString(`.*`)
			default:
				// "**/": any number of directories. It takes the "/"
				// after it, or the one that each alternative after it
				// begins with.
				b.WriteString(`(?:.*/)?`)
				if seq[i+1].op == opSep {
					i++
				} else {
					seq[i+1] = trimSep(seq[i+1], false)
				}
			}
		case opAlt:
			altStart, altEnd := edgeNone, edgeNone
			switch {
			case i == 0:
				altStart = start
			case sepAtEdge(seq[i-1], true):
				altStart = edgeSep
			}
			switch {
			case i == len(seq)-1:
				altEnd = end
			case sepAtEdge(seq[i+1], false):
				altEnd = edgeSep
			}
			// Alternatives that all end in "/" before a final "**"
			// give that "/" to it: "{a/,b/}**" matches a and b too.
			final := wholeSegment(i+1) && i+2 == len(seq)
			if final {
				n = trimSep(n, true)
			}
			b.WriteString(`(?:`)
			for j, alt := range n.alts {
				if j > 0 {
					b.WriteString(`|`)
				}
				emitGlob(b, alt, altStart, altEnd)
			}
			b.WriteString(`)`)
			if final {
				b.WriteString(`(?:/.*)?`)
				i++
			}
		}
	}
}

// sepAtEdge says whether n ends (last) or begins with "/": a "/" does,
// and braces do when every alternative does.
func sepAtEdge(n globNode, last bool) bool {
	switch n.op {
	case opSep:
		return true
	case opAlt:
		for _, alt := range n.alts {
			if len(alt) == 0 || !sepAtEdge(alt[edgeIndex(alt, last)], last) {
				return false
			}
		}
		return len(n.alts) > 0
	}
	return false
}

// trimSep returns n without the "/" at its end (last) or beginning; n is
// one for which sepAtEdge holds.
func trimSep(n globNode, last bool) globNode {
	if n.op != opAlt {
		return globNode{op: opAlt, alts: [][]globNode{nil}}
	}
	alts := make([][]globNode, len(n.alts))
	for j, alt := range n.alts {
		k := edgeIndex(alt, last)
		edgeNode := trimSep(alt[k], last)
		alts[j] = append(append(append([]globNode{}, alt[:k]...), edgeNode), alt[k+1:]...)
	}
	return globNode{op: opAlt, alts: alts}
}

func edgeIndex(seq []globNode, last bool) int {
	if last {
		return len(seq) - 1
	}
	return 0
}

// spread moves a "/" beside braces into each of their alternatives, where
// the expansion of the braces would put it, when an alternative begins or
// ends with "**" on that side, so that the "**" is a whole segment with
// its "/" beside it: "{a,**}/x" becomes "{a/,**/}x" and "x/{**,a}" becomes
// "x{/**,/a}".
func spread(seq []globNode) []globNode {
	out := make([]globNode, 0, len(seq))
	for i := 0; i < len(seq); i++ {
		n := seq[i]
		if n.op == opSep {
			if k := len(out) - 1; k >= 0 && starsAtEdge(out[k], true) {
				out[k] = addSep(out[k], true)
				continue
			}
			if i+1 < len(seq) && starsAtEdge(seq[i+1], false) {
				seq[i+1] = addSep(seq[i+1], false)
				continue
			}
		}
		out = append(out, n)
	}
	for _, n := range out {
		for j := range n.alts {
			n.alts[j] = spread(n.alts[j])
		}
	}
	return out
}

// starsAtEdge says whether n is braces with an alternative that ends
// (last) or begins with "**".
func starsAtEdge(n globNode, last bool) bool {
	if n.op != opAlt {
		return false
	}
	for _, alt := range n.alts {
		if len(alt) == 0 {
			continue
		}
		if e := alt[edgeIndex(alt, last)]; e.op == opStars || starsAtEdge(e, last) {
			return true
		}
	}
	return false
}

// addSep returns braces n with a "/" added at the end (last) or the
// beginning of each alternative.
func addSep(n globNode, last bool) globNode {
	alts := make([][]globNode, len(n.alts))
	for j, alt := range n.alts {
		if last {
			alts[j] = append(append([]globNode{}, alt...), globNode{op: opSep})
		} else {
			alts[j] = append([]globNode{{op: opSep}}, alt...)
		}
	}
	return globNode{op: opAlt, alts: alts}
}
