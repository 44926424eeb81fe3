package httpfetch

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
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
	out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL + "/flat", "maxBytes": 4 << 20}, 16384))
	want := fmt.Sprintf("Markdown made from the first %d of %d bytes of HTML", maxConvertBytes, len(flat))
	if !out.Truncated || !strings.Contains(out.Note, want) {
		t.Errorf("truncated %v, note %q; want it to say %q", out.Truncated, out.Note, want)
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
