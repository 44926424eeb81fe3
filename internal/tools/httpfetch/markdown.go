package httpfetch

import (
	"context"
	"fmt"
	"slices"
	"strings"

	htmltomarkdown "github.com/JohannesKaufmann/html-to-markdown/v2"
	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Bounds of the HTML to Markdown conversion, which runs in the service
// and cannot be interrupted: the converter ignores its context. Its time
// and memory grow with its input (about 2 µs and 200 bytes per byte of
// dense markup), the parser's also with the depth of the elements open
// (every <p> or <li> searches them), and for quotes and lists, whose every
// level rewrites every line inside it, with the square of their nesting:
// 16 KiB of 500 nested lists took 16 s and 10 GB. So the converter gets a
// bounded prefix of the page, without what it drops anyway, with tags
// nested at most maxTagDepth deep and quotes and lists at most maxIndent.
const (
	minConvertBytes = 64 << 10
	maxConvertBytes = 128 << 10
	maxTagDepth     = 64
	maxIndent       = 8
)

// convertLimit is how much HTML is converted for an output limit: eight
// times as much, since Markdown is shorter than its HTML and the result is
// cut to the output limit anyway, within minConvertBytes and
// maxConvertBytes.
func convertLimit(outputLimit int) int {
	if outputLimit <= 0 {
		return maxConvertBytes
	}
	return min(max(8*outputLimit, minConvertBytes), maxConvertBytes)
}

// convertHTML converts text, or its start (see compactHTML), to Markdown
// within ctx: it does not start when ctx has ended, and its result is not
// used when ctx ended while it ran. It notes on out what it did not
// convert and why.
func convertHTML(ctx context.Context, out *output, text string, limit int) (string, bool) {
	if ctx.Err() != nil {
		out.addNote("the timeout expired before the HTML was converted to Markdown, so it is returned as text")
		return "", false
	}
	compact, covered := compactHTML(text, limit)
	doc, err := html.Parse(strings.NewReader(compact))
	var md []byte
	if err == nil {
		boundIndent(doc, 0)
		md, err = htmltomarkdown.ConvertNode(doc, converter.WithDomain(out.FinalURL))
	}
	if err != nil {
		out.addNote("HTML could not be converted to Markdown (" + err.Error() + "); it is returned as text")
		return "", false
	}
	if ctx.Err() != nil {
		out.addNote("the timeout expired while the HTML was converted to Markdown, so it is returned as text")
		return "", false
	}
	if covered < len(text) {
		out.Truncated = true
		out.addNote(fmt.Sprintf("Markdown made from the first %d of %d bytes of HTML (the conversion is bounded by the output limit)", covered, len(text)))
	}
	return string(md), true
}

// compactHTML returns the start of text as the converter needs it, at
// most limit bytes cut between two tokens (never inside a tag), and how
// many bytes of text it covers. Left out are what the converter drops
// anyway (comments, scripts, styles, meta and link tags, …) and the tags,
// not the text, of elements nested deeper than maxTagDepth. Nesting is
// followed from the tags, closing those an element implies (a <p> or <li>
// closes the one before it), as the parser would in the common cases.
func compactHTML(text string, limit int) (string, int) {
	z := html.NewTokenizer(strings.NewReader(text))
	var b strings.Builder
	var open []atom.Atom // the elements open, innermost last
	dropping := false    // inside an element left out with its content
	covered := 0
	for {
		tt := z.Next()
		if tt == html.ErrorToken {
			return b.String(), len(text) // the tokenizer reads a string: only EOF ends it
		}
		raw := z.Raw()
		keep := false
		switch tt {
		case html.TextToken:
			keep = !dropping
		case html.DoctypeToken:
			keep = true
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			switch {
			case dropped(a):
				dropping = tt == html.StartTagToken && !void(a)
			case void(a):
				keep = true
			default:
				// "/>" opens an HTML element all the same; only SVG and
				// MathML elements honour it, and their parent's end tag
				// pops them.
				for len(open) > 0 && slices.Contains(implicitlyClosed(a), open[len(open)-1]) {
					open = open[:len(open)-1]
				}
				if keep = len(open) < maxTagDepth; keep {
					open = append(open, a)
				}
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			a := atom.Lookup(name)
			if dropped(a) {
				dropping = false
				break
			}
			// An end tag without an open element is a stray or the end of
			// one left out: it goes too.
			if i := lastIndex(open, a); i >= 0 {
				open, keep = open[:i], true
			}
		}
		if !keep {
			covered += len(raw)
			continue
		}
		if room := limit - b.Len(); len(raw) > room {
			if tt == html.TextToken {
				// Text may be cut anywhere between two characters.
				part := registry.TrimPartialRune(raw[:room])
				b.Write(part)
				covered += len(part)
			}
			return b.String(), covered
		}
		b.Write(raw)
		covered += len(raw)
	}
}

func lastIndex(open []atom.Atom, a atom.Atom) int {
	for i := len(open) - 1; i >= 0; i-- {
		if open[i] == a {
			return i
		}
	}
	return -1
}

// dropped reports whether the converter drops an element with its content.
func dropped(a atom.Atom) bool {
	switch a {
	case atom.Script, atom.Style, atom.Noscript, atom.Iframe, atom.Textarea, atom.Link, atom.Meta:
		return true
	}
	return false
}

// void reports whether an element has no content and no end tag.
func void(a atom.Atom) bool {
	switch a {
	case atom.Area, atom.Base, atom.Br, atom.Col, atom.Embed, atom.Hr, atom.Img, atom.Input, atom.Keygen,
		atom.Link, atom.Meta, atom.Param, atom.Source, atom.Track, atom.Wbr:
		return true
	}
	return false
}

// implicitlyClosed returns the elements a start tag of a closes when they
// are the innermost open.
func implicitlyClosed(a atom.Atom) []atom.Atom {
	switch a {
	case atom.P:
		return []atom.Atom{atom.P}
	case atom.Li:
		return []atom.Atom{atom.P, atom.Li}
	case atom.Dt, atom.Dd:
		return []atom.Atom{atom.P, atom.Dt, atom.Dd}
	case atom.Td, atom.Th:
		return []atom.Atom{atom.P, atom.Td, atom.Th}
	case atom.Tr:
		return []atom.Atom{atom.P, atom.Td, atom.Th, atom.Tr}
	case atom.Thead, atom.Tbody, atom.Tfoot:
		return []atom.Atom{atom.P, atom.Td, atom.Th, atom.Tr, atom.Thead, atom.Tbody, atom.Tfoot}
	case atom.Option:
		return []atom.Atom{atom.Option}
	case atom.Optgroup:
		return []atom.Atom{atom.Option, atom.Optgroup}
	}
	return nil
}

// boundIndent turns a quote or list inside maxIndent others into a plain
// block (a div), below n, which has indent of them around it.
func boundIndent(n *html.Node, indent int) {
	if n.Type == html.ElementNode {
		switch n.DataAtom {
		case atom.Blockquote, atom.Ul, atom.Ol:
			if indent == maxIndent {
				n.Data, n.DataAtom = "div", atom.Div
			} else {
				indent++
			}
		}
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		boundIndent(c, indent)
	}
}
