package httpfetch

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/charmap"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/tools/result"
)

// spillingExecutor runs the HTTP tools and result__read, with an output
// limit of 16384 bytes, keeping cut outputs.
func spillingExecutor(t *testing.T) *registry.Executor {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tools, binder := result.Tools(result.Options{})
	tools = append(tools, Tools(Options{AllowCIDRs: allowLoopback()})...)
	reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	e := registry.NewExecutor(registry.Options{Registry: reg, Store: st, Spill: registry.NewSpiller(registry.SpillOptions{Store: st})})
	binder.Bind(e)
	return e
}

var readOn = regexp.MustCompile(`\[output truncated: (\d+) bytes total, (\d+) omitted; read on with result__read (\{[^}]*\})\]`)

// TestCutBodyReadsOnWhereItStops: a body the output shows only the start
// of, whether maxBytes, the output limit or the Markdown conversion's
// bound cut it, makes the result truncated with the body's size, is kept,
// and its marker continues exactly where what the output shows stops (in
// the body's bytes), counting as omitted all that it does not show.
func TestCutBodyReadsOnWhereItStops(t *testing.T) {
	var text strings.Builder
	for i := 0; text.Len() < 117000; i++ {
		fmt.Fprintf(&text, "line %d of the text\n", i)
	}
	plain := text.String()
	var page strings.Builder
	page.WriteString("<html><body>")
	for i := 0; page.Len() < 300000; i++ {
		fmt.Fprintf(&page, "<p>Paragraph %d.</p>\n", i)
	}
	binary := make([]byte, 50000)
	for i := range binary {
		binary[i] = byte(i * 7 % 251)
	}
	cyrillic := strings.Repeat("Привет, мир! ", 10000)
	cp1251, err := charmap.Windows1251.NewEncoder().String(cyrillic)
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/text":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, plain)
		case "/html":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, page.String())
		case "/cp1251":
			w.Header().Set("Content-Type", "text/plain; charset=windows-1251")
			fmt.Fprint(w, cp1251)
		case "/binary":
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(binary)
		}
	}))
	e := spillingExecutor(t)
	for i, tc := range []struct {
		name, path string
		maxBytes   int
		body       string // the body as served
	}{
		{"text cut to the output limit", "/text", 0, plain},
		{"text cut at maxBytes and to the output limit", "/text", 50000, plain},
		{"Markdown made from the page's start", "/html", 0, page.String()},
		{"Markdown of a body cut at maxBytes", "/html", 200000, page.String()},
		{"windows-1251 text cut to the output limit", "/cp1251", 0, cp1251},
		{"base64 cut to the output limit", "/binary", 0, string(binary)},
	} {
		id := fmt.Sprintf("cut%d", i)
		args := map[string]any{"url": srv.URL + tc.path}
		if tc.maxBytes > 0 {
			args["maxBytes"] = tc.maxBytes
		}
		raw, _ := json.Marshal(args)
		res, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolCallID: id, ToolName: "http__get", Arguments: raw})
		if err != nil {
			t.Fatal(err)
		}
		var out output
		if err := json.Unmarshal(res.Output, &out); err != nil || res.Status != registry.StatusOK {
			t.Fatalf("%s: %s %+v", tc.name, res.Output, res.Error)
		}
		if !res.Truncated || res.OriginalBytes != int64(len(tc.body)) || !out.Truncated || out.TotalBytes != int64(len(tc.body)) {
			t.Errorf("%s: result truncated %v originalBytes %d, output truncated %v totalBytes %d; want %d",
				tc.name, res.Truncated, res.OriginalBytes, out.Truncated, out.TotalBytes, len(tc.body))
		}
		if tc.path == "/cp1251" {
			// Kept as sent, in windows-1251, which result__read (UTF-8)
			// cannot read: the marker does not send the model there.
			m := regexp.MustCompile(`GET /calls/` + regexp.QuoteMeta(id) + `/output\?offset=(\d+)&stream=body`).FindStringSubmatch(out.Note)
			if m == nil || strings.Contains(out.Note, "result__read") {
				t.Errorf("%s: the marker of a body in another charset: %q", tc.name, out.Note)
				continue
			}
			offset, _ := strconv.Atoi(m[1])
			if decoded, _ := charmap.Windows1251.NewDecoder().String(tc.body[:offset]); out.Body.(string) != decoded {
				t.Errorf("%s: the text shown is not the body's first %d bytes, decoded", tc.name, offset)
			}
			continue
		}
		m := readOn.FindStringSubmatch(out.Note)
		if m == nil {
			t.Errorf("%s: no read-on marker in note %q", tc.name, out.Note)
			continue
		}
		var at struct {
			ToolCallID, Stream string
			Offset             int
		}
		if err := json.Unmarshal([]byte(m[3]), &at); err != nil || at.ToolCallID != id || at.Stream != "body" {
			t.Errorf("%s: read-on arguments %s", tc.name, m[3])
			continue
		}
		if want := fmt.Sprint(len(tc.body) - at.Offset); m[1] != fmt.Sprint(len(tc.body)) || m[2] != want {
			t.Errorf("%s: marker says %s total, %s omitted; want %d and %s", tc.name, m[1], m[2], len(tc.body), want)
		}
		// Where the body shown stops.
		shown := out.Body.(string)
		switch out.Format {
		case "text":
			decoded := tc.body[:at.Offset]
			if tc.path == "/cp1251" {
				decoded, _ = charmap.Windows1251.NewDecoder().String(decoded)
			}
			if shown != decoded {
				t.Errorf("%s: the text shown (%d bytes) is not the body's first %d bytes", tc.name, len(shown), at.Offset)
			}
		case "markdown":
			// The HTML read ends inside a paragraph, whose text so far
			// ends the Markdown.
			end := strings.LastIndex(tc.body[:at.Offset], "<p>")
			if partial := strings.TrimSpace(tc.body[end+len("<p>") : at.Offset]); !strings.HasSuffix(shown, partial) ||
				strings.Count(shown, "Paragraph") != strings.Count(tc.body[:at.Offset], "Paragraph") || strings.Contains(out.Note, "cut to fit") {
				t.Errorf("%s: the Markdown ends %q, the HTML read on from %d: %q", tc.name, shown[max(len(shown)-30, 0):], at.Offset, tc.body[at.Offset:at.Offset+30])
			}
		case "base64":
			if decoded, err := base64.StdEncoding.DecodeString(shown); err != nil || string(decoded) != tc.body[:at.Offset] {
				t.Errorf("%s: the base64 shown (%d bytes) is not the body's first %d bytes (%v)", tc.name, len(decoded), at.Offset, err)
			}
		default:
			t.Errorf("%s: format %s", tc.name, out.Format)
		}
		// Read on exactly as the marker says.
		readArgs, _ := json.Marshal(map[string]any{"toolCallId": at.ToolCallID, "stream": at.Stream, "offset": at.Offset, "limit": 100})
		rr, err := e.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "result__read", Arguments: readArgs})
		if err != nil {
			t.Fatal(err)
		}
		var got result.Output
		if err := json.Unmarshal(rr.Output, &got); err != nil || got.Content == nil {
			t.Errorf("%s: result__read %s: %s %+v", tc.name, readArgs, rr.Output, rr.Error)
			continue
		}
		if want := tc.body[at.Offset : at.Offset+100]; *got.Content != want && tc.path != "/cp1251" && tc.path != "/binary" {
			t.Errorf("%s: reading on gave %q, want %q", tc.name, *got.Content, want)
		}
		t.Logf("%s: shows %d bytes of the body, note %q", tc.name, at.Offset, out.Note)
	}
}
