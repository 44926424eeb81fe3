package httpfetch

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/JohannesKaufmann/html-to-markdown/v2/converter"
	"golang.org/x/net/html"
)

// quoteDepth returns the most quote markers ("> ") that begin a line of md.
func quoteDepth(md string) int {
	deepest := 0
	for line := range strings.SplitSeq(md, "\n") {
		n := 0
		for strings.HasPrefix(line, "> ") || line == ">" {
			n++
			line = strings.TrimPrefix(line, ">")
			line = strings.TrimPrefix(line, " ")
		}
		deepest = max(deepest, n)
	}
	return deepest
}

// TestHTMLConversionIsBounded: the HTML to Markdown converter cannot be
// interrupted, and its cost grows with its input and with the square of
// the nesting of quotes and lists. It gets a bounded start of the page,
// whose nesting is bounded, and the result says what it covered. Memory
// is what the test measures (allocations, not time).
func TestHTMLConversionIsBounded(t *testing.T) {
	flat := "<html><body>" + strings.Repeat("<p>A paragraph.</p>\n", 2<<20/20)
	lines := strings.Repeat("a line<br>\n", 2<<10/11)
	quotes := "<html><body>" + strings.Repeat("<blockquote>", 500) + lines
	lists := "<html><body>" + strings.Repeat("<ul><li>", 250) + lines
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		switch r.URL.Path {
		case "/flat":
			fmt.Fprint(w, flat)
		case "/quotes":
			fmt.Fprint(w, quotes)
		case "/lists":
			fmt.Fprint(w, lists)
		}
	}))
	for _, tc := range []struct {
		path string
		size int
	}{{"/flat", len(flat)}, {"/quotes", len(quotes)}, {"/lists", len(lists)}} {
		var out *output
		alloc := allocDuring(func() {
			out = mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL + tc.path, "maxBytes": 4 << 20}, 16384))
		})
		body, _ := out.Body.(string)
		if out.Format != "markdown" || !strings.Contains(body, "a") {
			t.Errorf("%s: format %s, note %q, body %.200q", tc.path, out.Format, out.Note, body)
		}
		if alloc > 64<<20 {
			t.Errorf("%s: converting a %d-byte page allocated %d MiB", tc.path, tc.size, alloc>>20)
		}
		if d := quoteDepth(body); d > maxIndent {
			t.Errorf("%s: quotes nest %d deep in the Markdown", tc.path, d)
		}
		t.Logf("%s: %d-byte page, allocated %d MiB; note %q", tc.path, tc.size, alloc>>20, out.Note)
	}
	// The Markdown of the page's start is longer than the output limit,
	// so it is made again from a shorter start, which it then shows whole.
	out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL + "/flat", "maxBytes": 4 << 20}, 16384))
	want := fmt.Sprintf("Markdown made from the first %d of %d bytes of HTML read", out.covered, len(flat))
	if !out.Truncated || !strings.Contains(out.Note, want) || strings.Contains(out.Note, "cut to fit") || out.covered > 16384*2 || out.covered < 16384/2 {
		t.Errorf("truncated %v, note %q; want it to say %q, and not that the Markdown was cut", out.Truncated, out.Note, want)
	}
	whole := (out.covered - len("<html><body>")) / len("<p>A paragraph.</p>\n")
	if md := out.Body.(string); strings.Count(md, "A paragraph.") != whole {
		t.Errorf("the Markdown has %d paragraphs; want the %d whole ones of the first %d bytes", strings.Count(md, "A paragraph."), whole, out.covered)
	}
}

func TestCompactHTML(t *testing.T) {
	deep := strings.Repeat("<div>", 100) + "x" + strings.Repeat("</div>", 100)
	for _, tc := range []struct {
		name, in string
		limit    int
		want     string
		covered  int
	}{
		{"what the converter drops", `<p>a</p><script>if (a < b) {}</script><!-- c --><style>p{}</style><meta name="x"><p>b</p>`, 1000, "<p>a</p><p>b</p>", -1},
		{"cut before a tag", `<p>aaaa</p><p class="long">bbbb</p>`, 14, "<p>aaaa</p>", 11},
		{"text cut between characters", "<p>" + strings.Repeat("é", 100), 10, "<p>ééé", 9},
		{"nesting bounded", deep, 1 << 20, strings.Repeat("<div>", maxTagDepth) + "x" + strings.Repeat("</div>", maxTagDepth), -1},
		{"implied ends", strings.Repeat("<ul><li>a<li>b<p>c<p>d</ul>", 100), 1 << 20, strings.Repeat("<ul><li>a<li>b<p>c<p>d</ul>", 100), -1},
		{"formatting ended with its block", "<p><b>a<i>b</p><p>c<ul><li><em>d<li>e</ul><div><u>f</div>", 1 << 20,
			"<p><b>a<i>b</i></b></p><p>c<ul><li><em>d</em><li>e</ul><div><u>f</u></div>", -1},
		{"formatting ended by a block start", "<p><b>a<div>b</div><h1><i>c<h2>d", 1 << 20, "<p><b>a</b><div>b</div><h1><i>c<h2>d", -1},
		{"formatting bounded", "<p>" + strings.Repeat("<b>", maxFormatting+4) + "x</p>", 1 << 20,
			"<p>" + strings.Repeat("<b>", maxFormatting) + "x" + strings.Repeat("</b>", maxFormatting) + "</p>", -1},
		{"an <a> ends the one open", `<a href="1">x<a href="2">y`, 1 << 20, `<a href="1">x</a><a href="2">y`, -1},
		{"end tags fit in the limit", "<p><b>aaaa</p><p>bbbb</p>", 12, "<p><b>aaaa", 10},
	} {
		got, covered := compactHTML(tc.in, tc.limit)
		if tc.covered < 0 {
			tc.covered = len(tc.in)
		}
		if got != tc.want || covered != tc.covered {
			t.Errorf("%s: got %q covering %d, want %q covering %d", tc.name, got, covered, tc.want, tc.covered)
		}
	}
}

// TestNoConversionAfterTheTimeout: when the request's own timeout
// (timeoutMs) expired while the body was read, the HTML is not converted.
func TestNoConversionAfterTheTimeout(t *testing.T) {
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<html><body><h1>Start</h1><p>and more to come")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL, "timeoutMs": 300}, 0))
	if out.Format != "text" || !strings.Contains(out.Note, "timeout expired") || !strings.Contains(out.Note, "before the HTML was converted") {
		t.Errorf("format %s, note %q; want the HTML as text, not converted after the timeout", out.Format, out.Note)
	}
}

// TestDeepJSON: valid JSON nested deeper than the parser accepts is
// returned as text with a note that says so, not that it is invalid.
func TestDeepJSON(t *testing.T) {
	const depth = 100000
	doc := strings.Repeat("[", depth) + strings.Repeat("]", depth)
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, doc)
	}))
	out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL}, 0))
	if out.Format != "text" || !strings.Contains(out.Note, "nests deeper than 10000 levels") || strings.Contains(out.Note, "not valid JSON") {
		t.Errorf("format %s, note %q", out.Format, out.Note)
	}
	if jsonDepth([]byte(`{"a": "[[[\"]]", "b": [[1]]}`)) != 3 {
		t.Error("jsonDepth counts brackets inside strings")
	}
}

// afePage is the page of the probe that built 7.2 million elements from
// 125 KB: 480 formatting elements left open, each with its own attribute
// (so the parser's limit of three alike does not apply), in 8 paragraphs,
// then 15,000 paragraphs with text, in each of which the parser
// re-created all of them.
func afePage() string {
	var b strings.Builder
	for j := range 8 {
		b.WriteString("<p>")
		for i := range 60 {
			fmt.Fprintf(&b, "<b id=%d>", j*60+i)
		}
		b.WriteString("</p>")
	}
	b.WriteString(strings.Repeat("<p>x</p>", 15000))
	return b.String()
}

// elements counts the nodes of the tree n.
func elements(n *html.Node) int {
	count := 1
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		count += elements(c)
	}
	return count
}

// openBold is n <b> tags with distinct attributes, never closed.
func openBold(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "<b id=%d>", i)
	}
	return b.String()
}

// TestFormattingElementsLeftOpenAreBounded: formatting elements left
// open are closed where their block ends, and at most maxFormatting are
// open at once, so the parser builds about as many elements as the markup
// spells, not one copy of every open formatting element per block. The
// test counts the elements the parser builds and the bytes a call
// allocates, not time.
func TestFormattingElementsLeftOpenAreBounded(t *testing.T) {
	fill := func(s string) string { return strings.Repeat(s, 200000/len(s)) }
	for _, tc := range []struct{ name, page string }{
		{"probe", afePage()},
		{"paragraph ended by </p>", "<p>" + openBold(60) + "</p>" + fill("<p>x</p>")},
		{"paragraph ended by <p>", "<p>" + openBold(60) + fill("<p>x</p>")},
		{"paragraph ended by <div>", "<p>" + openBold(60) + fill("<div>x</div>")},
		{"list item ended by <li>", "<ul><li>" + openBold(60) + fill("<li>x</li>")},
		{"definition ended by <dt>", "<dl><dd>" + openBold(60) + fill("<dt>x")},
		{"open at the top", openBold(60) + fill("<p>x</p>")},
		{"in every paragraph", fill("<p><b id=1><i id=2><u id=3><s id=4><em id=5><strong id=6>x")},
		{"font before every paragraph", fill(`<font face="a"><p>x`)},
		{"links never closed", fill(`<a href="/x">y`)},
	} {
		compact, _ := compactHTML(tc.page, maxConvertBytes)
		doc, err := html.Parse(strings.NewReader(compact))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		// Dense markup builds one element for every two bytes at most
		// (<p>a<p>a…); the probe's page built 58 for each of its bytes.
		if n := elements(doc); n > len(compact)/2 {
			t.Errorf("%s: the parser built %d elements from %d bytes", tc.name, n, len(compact))
		}
	}
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, afePage())
	}))
	var out *output
	alloc := allocDuring(func() {
		out = mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL}, 0))
	})
	body, _ := out.Body.(string)
	if out.Format != "markdown" || !strings.Contains(body, "x\n\nx") || alloc > 64<<20 {
		t.Errorf("format %s, note %q, body %.100q, allocated %d MiB", out.Format, out.Note, body, alloc>>20)
	}
	t.Logf("the probe's page: allocated %d MiB", alloc>>20)
}

// TestConversionElementBudget: HTML that still makes the parser build
// more elements than it has bytes is returned as text, not converted. In a
// table, text outside the cells re-creates the formatting elements left
// open before every cell, which compactHTML does not follow.
func TestConversionElementBudget(t *testing.T) {
	page := "<!DOCTYPE html><table>" + openBold(maxFormatting) + "<tr>" + strings.Repeat("x<td></td>", 20000)
	out := &output{}
	var ok bool
	alloc := allocDuring(func() { _, _, ok = convertHTML(context.Background(), out, page, maxConvertBytes, 0) })
	if ok || !strings.Contains(out.Note, "too many to convert to Markdown") || alloc > 64<<20 {
		t.Errorf("converted %v, note %q, allocated %d MiB", ok, out.Note, alloc>>20)
	}
	doc, err := html.Parse(strings.NewReader(strings.Repeat("<p>x", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	if n := countNodes(doc, 1<<30); n != 2004 {
		t.Errorf("countNodes = %d, want 2004 (document, html, head, body, 1000 × p and text)", n)
	}
	if n := countNodes(doc, 100); n <= 100 || n > 200 {
		t.Errorf("countNodes stopping past 100 = %d", n)
	}
}

// cancelAfter is a context whose Err reports it ended after n calls, to
// end it in the middle of a conversion.
type cancelAfter struct {
	context.Context
	n atomic.Int64
}

func (c *cancelAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.DeadlineExceeded
	}
	return nil
}

// TestConversionStopsAtTheDeadline: the converter renders nothing more
// once the call's context has ended, and the result is not used.
func TestConversionStopsAtTheDeadline(t *testing.T) {
	doc, err := html.Parse(strings.NewReader("<h1>Title</h1>" + strings.Repeat("<p>para</p>", 1000)))
	if err != nil {
		t.Fatal(err)
	}
	full, err := newConverter().ConvertNode(doc)
	if err != nil || !strings.Contains(string(full), "# Title") {
		t.Fatalf("converted %.100q, %v", full, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if md, err := newConverter().ConvertNode(doc, converter.WithContext(ctx)); err != nil || len(md) != 0 {
		t.Errorf("converted %d bytes after the context ended (err %v)", len(md), err)
	}
	cctx := &cancelAfter{Context: context.Background()}
	cctx.n.Store(100)
	if md, err := newConverter().ConvertNode(doc, converter.WithContext(cctx)); err != nil || len(md) >= len(full)/10 {
		t.Errorf("converted %d of %d bytes when the context ended early on (err %v)", len(md), len(full), err)
	}
	cctx.n.Store(100)
	out := &output{}
	if md, _, ok := convertHTML(cctx, out, strings.Repeat("<p>para</p>", 10000), maxConvertBytes, 0); ok || md != "" ||
		!strings.Contains(out.Note, "timeout expired while the HTML was converted") {
		t.Errorf("converted %v, note %q", ok, out.Note)
	}
}
