package httpfetch

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/base"
	"github.com/JohannesKaufmann/html-to-markdown/v2/plugin/commonmark"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Bounds of the HTML to Markdown conversion, which runs in the service:
// the parser cannot be interrupted, and the converter only stops rendering
// (see convertHTML). Their time and memory grow with the elements the
// parser builds (about 2 µs and 200 bytes per byte of dense markup), the
// parser's also with the depth of the elements open (every <p> or <li>
// searches them), and for quotes and lists, whose every level rewrites
// every line inside it, with the square of their nesting: 16 KiB of 500
// nested lists took 16 s and 10 GB. The parser also builds elements the
// markup does not spell: it re-creates every formatting element (<b>, <i>,
// <a>, <font>, …) left open when the block around it ended, inside every
// later block with text, so 480 unclosed <b id=N> followed by 15,000
// <p>x</p> (125 KB) built 7.2 million elements and took 1.6 GB. So the
// converter gets a bounded prefix of the page, without what it drops
// anyway, with tags nested at most maxTagDepth deep, at most maxFormatting
// formatting elements open at once, each closed with an end tag of its own
// when the block around it ends, quotes and lists at most maxIndent deep,
// and, should the parser still build more than maxNodesPerByte elements
// per byte of it, no conversion at all.
const (
	minConvertBytes = 64 << 10
	maxConvertBytes = 128 << 10
	maxTagDepth     = 64
	maxFormatting   = 16
	maxIndent       = 8
	maxNodesPerByte = 1
)

// convertLimit is how much HTML is converted first for an output limit:
// eight times as much, since Markdown is shorter than its HTML (and made
// again from less when it does not fit), within minConvertBytes and
// maxConvertBytes.
func convertLimit(outputLimit int) int {
	if outputLimit <= 0 {
		return maxConvertBytes
	}
	return min(max(8*outputLimit, minConvertBytes), maxConvertBytes)
}

// maxConversions bounds how many times convertHTML converts a page to
// make its Markdown fit the output limit.
const maxConversions = 3

// convertHTML converts text, or its start (see compactHTML), to Markdown
// within ctx: it does not start when ctx has ended, it stops rendering
// when ctx ends while it runs, and then its result is not used. Markdown
// longer than budget bytes (as a JSON string; 0: no bound) is made again
// from a start of text that many bytes of it fit in, so that it shows a
// whole start of the page, which ends exactly where reading on begins.
// It returns the Markdown and how many bytes of text it was made from, or
// false, and notes on out what it did not convert and why.
func convertHTML(ctx context.Context, out *output, text string, limit, budget int) (string, int, bool) {
	for try := 1; ; try++ {
		if ctx.Err() != nil {
			out.addNote("the timeout expired before the HTML was converted to Markdown, so it is returned as text")
			return "", 0, false
		}
		compact, covered := compactHTML(text, limit)
		md, ok := convertCompact(ctx, out, compact)
		if !ok {
			return "", 0, false
		}
		n := jsonLen(md)
		if budget <= 0 || n <= budget || try == maxConversions || covered == 0 {
			return md, covered, true
		}
		// Markdown grows about as the HTML it is made from; aim below.
		limit = int(int64(len(compact)) * int64(budget) / int64(n) * 9 / 10)
	}
}

// convertCompact converts HTML that compactHTML bounded to Markdown.
func convertCompact(ctx context.Context, out *output, compact string) (string, bool) {
	doc, err := html.Parse(strings.NewReader(compact))
	var md []byte
	if err == nil {
		budget := maxNodesPerByte*len(compact) + 1024
		if n := countNodes(doc, budget); n > budget {
			out.addNote(fmt.Sprintf("the HTML makes the parser build more than %d elements from %d bytes (formatting elements left open are rebuilt in every block), "+
				"too many to convert to Markdown, so it is returned as text", budget, len(compact)))
			return "", false
		}
		boundIndent(doc, 0)
		md, err = newConverter().ConvertNode(doc, converter.WithDomain(out.FinalURL), converter.WithContext(ctx))
	}
	if err != nil {
		out.addNote("HTML could not be converted to Markdown (" + err.Error() + "); it is returned as text")
		return "", false
	}
	if ctx.Err() != nil {
		out.addNote("the timeout expired while the HTML was converted to Markdown, so it is returned as text")
		return "", false
	}
	return string(md), true
}

// newConverter returns the HTML to Markdown converter of one call: the
// library's default one, which renders nothing more once the context it
// converts with has ended, so a deadline stops it within one element.
func newConverter() *converter.Converter {
	conv := converter.NewConverter(converter.WithPlugins(base.NewBasePlugin(), commonmark.NewCommonmarkPlugin()))
	conv.Register.Renderer(func(ctx converter.Context, _ converter.Writer, _ *html.Node) converter.RenderStatus {
		if ctx.Err() != nil {
			return converter.RenderSuccess // rendered as nothing
		}
		return converter.RenderTryNext
	}, converter.PriorityEarly-1)
	return conv
}

// countNodes counts the nodes of the tree n, stopping past limit.
func countNodes(n *html.Node, limit int) int {
	count := 1
	for c := n.FirstChild; c != nil && count <= limit; c = c.NextSibling {
		count += countNodes(c, limit-count)
	}
	return count
}

// compactHTML returns the start of text as the converter needs it, at
// most limit bytes cut between two tokens (never inside a tag), and how
// many bytes of text it covers. Left out are what the converter drops
// anyway (comments, scripts, styles, meta and link tags, …), the tags,
// not the text, of elements nested deeper than maxTagDepth, and the tags
// of formatting elements opened while maxFormatting are open. Nesting is
// followed from the tags (see nesting), as the parser would in the common
// cases; a formatting element that ends because an element around it
// ends, or because a start tag ends its block, gets an end tag of its own
// there, or the parser would re-create it in every later block with text.
func compactHTML(text string, limit int) (string, int) {
	z := html.NewTokenizer(strings.NewReader(text))
	var b strings.Builder
	var n nesting
	dropping := false // inside an element left out with its content
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
				if a == atom.Hr {
					n.closeP()
				}
				keep = true
			default:
				// "/>" opens an HTML element all the same; only SVG and
				// MathML elements honour it, and their parent's end tag
				// pops them.
				keep = n.start(a)
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
			keep = n.end(a)
		}
		write := len(n.closers)
		if keep {
			write += len(raw)
		}
		if room := limit - b.Len(); write > room {
			if tt == html.TextToken {
				// Text may be cut anywhere between two characters.
				part := registry.TrimPartialRune(raw[:room])
				b.Write(part)
				covered += len(part)
			}
			return b.String(), covered
		}
		b.Write(n.closers)
		n.closers = n.closers[:0]
		if keep {
			b.Write(raw)
		}
		covered += len(raw)
	}
}

// nesting follows which elements are open, as the parser would from the
// tags in the common cases, and writes into closers the end tags of the
// formatting elements that a tag ends without naming them.
type nesting struct {
	open       []atom.Atom // the elements open, innermost last
	formatting int         // how many of them are formatting elements
	closers    []byte
}

// start opens a, after ending the elements its start tag ends, and
// reports whether it was opened (and its tag is kept): not beyond
// maxTagDepth, nor beyond maxFormatting formatting elements.
func (n *nesting) start(a atom.Atom) bool {
	switch {
	case a == atom.A:
		// The parser ends an <a> still open before it opens another.
		if i := lastIndex(n.open, atom.A); i >= 0 && !slices.ContainsFunc(n.open[i+1:], special) {
			n.pop(i)
		}
	case a == atom.Li || a == atom.Dd || a == atom.Dt:
		// It ends the list item open in the same list, past the
		// formatting and other non-special elements inside it.
		for i := len(n.open) - 1; i >= 0; i-- {
			if e := n.open[i]; e == a || (a != atom.Li && (e == atom.Dd || e == atom.Dt)) {
				n.pop(i)
				break
			}
			if e := n.open[i]; special(e) && e != atom.Address && e != atom.Div && e != atom.P {
				break
			}
		}
		n.closeP()
	case closesP(a):
		n.closeP()
		if heading(a) && len(n.open) > 0 && heading(n.open[len(n.open)-1]) {
			n.pop(len(n.open) - 1)
		}
	}
	for len(n.open) > 0 && slices.Contains(implicitlyClosed(a), n.open[len(n.open)-1]) {
		n.pop(len(n.open) - 1)
	}
	if len(n.open) >= maxTagDepth || (isFormatting(a) && n.formatting >= maxFormatting) {
		return false
	}
	n.open = append(n.open, a)
	if isFormatting(a) {
		n.formatting++
	}
	return true
}

// end closes the innermost open a and reports whether its end tag is
// kept: not when no a is open.
func (n *nesting) end(a atom.Atom) bool {
	i := lastIndex(n.open, a)
	switch {
	case i < 0:
		return false
	case isFormatting(a) && slices.ContainsFunc(n.open[i+1:], special):
		// The parser moves what follows into the block inside it, which
		// stays open: only the formatting element ends.
		n.open = slices.Delete(n.open, i, i+1)
		n.formatting--
	default:
		n.pop(i + 1)
		if isFormatting(a) {
			n.formatting--
		}
		n.open = n.open[:i]
	}
	return true
}

// pop ends the elements open from i on, innermost first, writing an end
// tag for each formatting element among them.
func (n *nesting) pop(i int) {
	for j := len(n.open) - 1; j >= i; j-- {
		if isFormatting(n.open[j]) {
			n.closers = append(append(append(n.closers, "</"...), n.open[j].String()...), '>')
			n.formatting--
		}
	}
	n.open = n.open[:i]
}

// closeP ends the open <p> a block's start tag ends: the innermost, unless
// a button, table or the like lies between.
func (n *nesting) closeP() {
	for i := len(n.open) - 1; i >= 0; i-- {
		switch n.open[i] {
		case atom.P:
			n.pop(i)
			return
		case atom.Applet, atom.Caption, atom.Html, atom.Table, atom.Td, atom.Th, atom.Marquee, atom.Object, atom.Template,
			atom.Button, atom.Mi, atom.Mo, atom.Mn, atom.Ms, atom.Mtext, atom.AnnotationXml, atom.Foreignobject, atom.Desc, atom.Title:
			return
		}
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

// isFormatting reports whether a is a formatting element, which the
// parser re-creates in later blocks while it is open.
func isFormatting(a atom.Atom) bool {
	switch a {
	case atom.A, atom.B, atom.Big, atom.Code, atom.Em, atom.Font, atom.I, atom.Nobr, atom.S, atom.Small,
		atom.Strike, atom.Strong, atom.Tt, atom.U:
		return true
	}
	return false
}

// special reports whether a is one of the elements with content that the
// HTML standard calls special: those the parser does not look past when it
// ends a list item, or moves content into when it ends a formatting
// element around them.
func special(a atom.Atom) bool {
	switch a {
	case atom.Address, atom.Applet, atom.Article, atom.Aside, atom.Blockquote, atom.Body, atom.Button, atom.Caption,
		atom.Center, atom.Colgroup, atom.Dd, atom.Details, atom.Dir, atom.Div, atom.Dl, atom.Dt, atom.Fieldset,
		atom.Figcaption, atom.Figure, atom.Footer, atom.Form, atom.Frameset, atom.H1, atom.H2, atom.H3, atom.H4, atom.H5,
		atom.H6, atom.Head, atom.Header, atom.Hgroup, atom.Html, atom.Li, atom.Listing, atom.Main, atom.Marquee, atom.Menu,
		atom.Nav, atom.Noembed, atom.Noframes, atom.Object, atom.Ol, atom.P, atom.Plaintext, atom.Pre, atom.Search,
		atom.Section, atom.Select, atom.Summary, atom.Table, atom.Tbody, atom.Td, atom.Template, atom.Tfoot, atom.Th,
		atom.Thead, atom.Title, atom.Tr, atom.Ul, atom.Xmp,
		atom.Mi, atom.Mo, atom.Mn, atom.Ms, atom.Mtext, atom.AnnotationXml, atom.Foreignobject, atom.Desc:
		return true
	}
	return false
}

// closesP reports whether a start tag of a ends an open <p>.
func closesP(a atom.Atom) bool {
	switch a {
	case atom.Address, atom.Article, atom.Aside, atom.Blockquote, atom.Center, atom.Details, atom.Dialog, atom.Dir,
		atom.Div, atom.Dl, atom.Fieldset, atom.Figcaption, atom.Figure, atom.Footer, atom.Header, atom.Hgroup, atom.Main,
		atom.Menu, atom.Nav, atom.Ol, atom.P, atom.Search, atom.Section, atom.Summary, atom.Ul, atom.Pre, atom.Listing,
		atom.Form, atom.Plaintext, atom.Xmp:
		return true
	}
	return heading(a)
}

func heading(a atom.Atom) bool {
	switch a {
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		return true
	}
	return false
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
// are the innermost open (besides those nesting.start ends).
func implicitlyClosed(a atom.Atom) []atom.Atom {
	switch a {
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
