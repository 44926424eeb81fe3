package httpfetch

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// countingListener counts the connections a server accepts, to prove a
// refused request never connected.
type countingListener struct {
	net.Listener
	accepted atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepted.Add(1)
	}
	return c, err
}

func newCounting(t *testing.T, ln net.Listener) *countingListener {
	t.Helper()
	cl := &countingListener{Listener: ln}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func listen(t *testing.T, addr string) *countingListener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return newCounting(t, ln)
}

// serve starts a test server on addr that counts accepted connections.
func serve(t *testing.T, addr string, h http.Handler) (*httptest.Server, *countingListener) {
	t.Helper()
	ln := listen(t, addr)
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, ln
}

// testResolver maps host names to addresses without DNS.
type testResolver map[string][]netip.Addr

func (r testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func allowLoopback() []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")} }

// call runs a tool's handler directly and decodes its output.
func call(t *testing.T, o Options, name string, a map[string]any, maxOutput int) (*output, *registry.Error) {
	t.Helper()
	if o.Version == "" {
		o.Version = "1.2.3"
	}
	var tool *registry.Tool
	for _, tl := range Tools(o) {
		if tl.Name == name {
			tool = tl
		}
	}
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	v, err := tool.Handler.Run(context.Background(), &registry.Request{Name: name, Arguments: raw, MaxOutputBytes: maxOutput})
	if err != nil {
		var re *registry.Error
		if !errors.As(err, &re) {
			t.Fatalf("%s: error is not a *registry.Error: %T %v", name, err, err)
		}
		return nil, re
	}
	return v.(*output), nil
}

// mustOK returns a check that the call succeeded and its output.
func mustOK(t *testing.T) func(*output, *registry.Error) *output {
	return func(out *output, rerr *registry.Error) *output {
		t.Helper()
		if rerr != nil {
			t.Fatalf("error result: %s (suggestion: %s)", rerr.Message, rerr.Suggestion)
		}
		return out
	}
}

// mustRefuse returns a check that the call was refused with E_TOOL, a
// message containing want, and a suggestion.
func mustRefuse(t *testing.T) func(*output, *registry.Error) func(want string) {
	return func(out *output, rerr *registry.Error) func(string) {
		return func(want string) {
			t.Helper()
			if rerr == nil {
				t.Fatalf("got status %d, want a refusal mentioning %q", out.Status, want)
			}
			if rerr.Code != registry.CodeTool || !strings.Contains(rerr.Message, want) {
				t.Fatalf("got %s %q, want E_TOOL mentioning %q", rerr.Code, rerr.Message, want)
			}
			if rerr.Suggestion == "" {
				t.Errorf("refusal %q has no suggestion", rerr.Message)
			}
		}
	}
}

func port(srv *httptest.Server) string {
	return fmt.Sprint(netip.MustParseAddrPort(srv.Listener.Addr().String()).Port())
}

func TestGetJSONAndHeaders(t *testing.T) {
	var ua, auth atomic.Value
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ua.Store(r.UserAgent())
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Set-Cookie", "session=secret")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("X-Internal", "yes")
		fmt.Fprint(w, `{"answer": 42, "big": 12345678901234567890}`)
	}))
	out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get",
		map[string]any{"url": srv.URL + "/data", "headers": map[string]string{"authorization": "Bearer t0k"}}, 0))
	if out.Status != 200 || out.Format != "json" || out.Truncated || out.FinalURL != srv.URL+"/data" {
		t.Fatalf("output %+v", out)
	}
	if got := string(out.Body.(json.RawMessage)); !strings.Contains(got, `12345678901234567890`) || !json.Valid([]byte(got)) {
		t.Errorf("body %s, want the parsed JSON with its exact numbers", got)
	}
	if out.Headers["content-type"] != "application/json" || out.Headers["etag"] != `"v1"` {
		t.Errorf("headers %v lack content-type or etag", out.Headers)
	}
	if _, ok := out.Headers["set-cookie"]; ok {
		t.Errorf("headers %v include set-cookie", out.Headers)
	}
	if _, ok := out.Headers["x-internal"]; ok {
		t.Errorf("headers %v include a header outside the safe subset", out.Headers)
	}
	if ua.Load() != "toolsvc/1.2.3" || auth.Load() != "Bearer t0k" {
		t.Errorf("server saw User-Agent %q, Authorization %q", ua.Load(), auth.Load())
	}
}

func TestRefusedBeforeAnyConnection(t *testing.T) {
	srv, ln := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") }))
	p := port(srv)
	res := testResolver{"loop.test": addrs("127.0.0.1"), "mixed.test": addrs("127.0.0.1", "10.0.0.1")}

	// The same server is reachable when the operator allows it.
	out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback(), Resolver: res}, "http__get", map[string]any{"url": "http://loop.test:" + p + "/"}, 0))
	if out.Status != 200 || out.Body != "hello" {
		t.Fatalf("allowed fetch: %+v", out)
	}
	before := ln.accepted.Load()

	tests := []struct {
		url, want string
		allow     bool
	}{
		{"http://127.0.0.1:" + p + "/", "loopback", false},
		{"http://2130706433:" + p + "/", "ambiguous numeric", false},
		{"http://0177.0.0.1:" + p + "/", "ambiguous numeric", false},
		{"http://0x7f.1:" + p + "/", "ambiguous numeric", false},
		{"http://127.1:" + p + "/", "ambiguous numeric", false},
		{"http://[::ffff:127.0.0.1]:" + p + "/", "IPv4-mapped", false},
		{"http://[::1]:" + p + "/", "loopback", false},
		{"http://localhost:" + p + "/", "this machine", false},
		{"http://１２７.０.０.１:" + p + "/", "loopback", false},
		{"http://loop.test:" + p + "/", "resolves only to refused addresses: connection refused by policy: 127.0.0.1 is a loopback address", false},
		{"http://mixed.test:" + p + "/", "10.0.0.1 is a private address", false},
		// Allowing 127.0.0.1 does not make ambiguous spellings acceptable.
		{"http://2130706433:" + p + "/", "ambiguous numeric", true},
		{"http://0x7f.1:" + p + "/", "ambiguous numeric", true},
		{"http://[::ffff:127.0.0.1]:" + p + "/", "IPv4-mapped", true},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			o := Options{Resolver: res}
			if tt.allow {
				o.AllowCIDRs = allowLoopback()
			}
			mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": tt.url}, 0))(tt.want)
		})
	}
	if n := ln.accepted.Load() - before; n != 0 {
		t.Errorf("refused URLs made %d connections, want 0", n)
	}
}

func TestSchemesRefused(t *testing.T) {
	for _, u := range []string{"file:///etc/passwd", "gopher://127.0.0.1:70/_x", "ftp://example.com/f", "data:text/plain,hi", "HTTP2://example.com/"} {
		out, rerr := call(t, Options{}, "http__get", map[string]any{"url": u}, 0)
		mustRefuse(t)(out, rerr)("only http and https")
	}
}

func TestRedirects(t *testing.T) {
	// The refused target listens on 127.0.0.2, which is loopback on Linux
	// but outside the allowed 127.0.0.1/32.
	far, farLn := serve(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "secret") }))
	res := testResolver{"rebind.test": addrs("127.0.0.2")}
	var near *httptest.Server
	near, _ = serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/to-far":
			http.Redirect(w, r, far.URL+"/", http.StatusFound)
		case r.URL.Path == "/to-rebind":
			http.Redirect(w, r, "http://rebind.test:"+port(far)+"/", http.StatusFound)
		case r.URL.Path == "/to-file":
			http.Redirect(w, r, "file:///etc/passwd", http.StatusFound)
		case r.URL.Path == "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/chain/"):
			var n int
			fmt.Sscanf(r.URL.Path, "/chain/%d", &n)
			if n == 0 {
				fmt.Fprint(w, "end of chain")
				return
			}
			http.Redirect(w, r, fmt.Sprintf("/chain/%d", n-1), http.StatusFound)
		}
	}))
	o := Options{AllowCIDRs: allowLoopback(), Resolver: res}

	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": near.URL + "/to-far"}, 0))("127.0.0.2 is a loopback address")
	// A host name passes the URL check; the dial check stops it.
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": near.URL + "/to-rebind"}, 0))("redirect to http://rebind.test")
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": near.URL + "/to-file"}, 0))(`scheme "file" is not allowed`)
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": near.URL + "/to-metadata"}, 0))("metadata")
	if n := farLn.accepted.Load(); n != 0 {
		t.Errorf("refused redirects made %d connections to 127.0.0.2, want 0", n)
	}

	out := mustOK(t)(call(t, o, "http__get", map[string]any{"url": near.URL + "/chain/5"}, 0))
	if out.Body != "end of chain" || out.FinalURL != near.URL+"/chain/0" {
		t.Errorf("5 redirects: body %q, final URL %s", out.Body, out.FinalURL)
	}
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": near.URL + "/chain/6"}, 0))("stopped after 5 redirects")
}

// TestCredentialsDroppedOnHostChange: a redirect to another host gets
// none of the headers the call set but a few that hold no secret, no
// Referer (whose URL may hold one), and the tool's User-Agent.
func TestCredentialsDroppedOnHostChange(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]http.Header{}
	record := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[name] = r.Header.Clone()
			mu.Unlock()
			fmt.Fprint(w, name)
		}
	}
	other, _ := serve(t, "127.0.0.1:0", record("other"))
	var same *httptest.Server
	same, _ = serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/same":
			http.Redirect(w, r, "/landing", http.StatusFound)
		case "/other":
			http.Redirect(w, r, other.URL+"/", http.StatusFound)
		default:
			record("same")(w, r)
		}
	}))
	o := Options{AllowCIDRs: allowLoopback()}
	h := map[string]string{"Authorization": "Bearer t", "Cookie": "a=b", "x-api-key": "SECRET456", "Accept": "text/plain", "Range": "bytes=0-99"}
	mustOK(t)(call(t, o, "http__get", map[string]any{"url": same.URL + "/same?api_key=SECRET123", "headers": h}, 0))
	mustOK(t)(call(t, o, "http__get", map[string]any{"url": same.URL + "/other?api_key=SECRET123", "headers": h}, 0))
	mu.Lock()
	defer mu.Unlock()
	got := func(name string) string {
		hs := seen[name]
		return strings.Join([]string{hs.Get("Authorization"), hs.Get("Cookie"), hs.Get("X-Api-Key"), hs.Get("Accept"), hs.Get("Range"), hs.Get("User-Agent")}, "|")
	}
	if want := "Bearer t|a=b|SECRET456|text/plain|bytes=0-99|toolsvc/1.2.3"; got("same") != want {
		t.Errorf("same-host redirect received %q, want every header kept: %q", got("same"), want)
	}
	// 127.0.0.1 on another port is another origin: Go's client would keep
	// the credentials (same host name), this tool drops them.
	if want := "|||text/plain|bytes=0-99|toolsvc/1.2.3"; got("other") != want {
		t.Errorf("cross-host redirect received %q, want %q: the credentials and the call's other headers dropped", got("other"), want)
	}
	if ref := seen["other"].Get("Referer"); ref != "" {
		t.Errorf("cross-host redirect received Referer %q", ref)
	}
}

func TestHeadersRefused(t *testing.T) {
	for _, name := range []string{"Host", "connection", "Transfer-Encoding", "Proxy-Authorization", "Accept-Encoding", "User-Agent", "Proxy-Foo", "Upgrade"} {
		out, rerr := call(t, Options{}, "http__get", map[string]any{"url": "https://example.com/", "headers": map[string]string{name: "x"}}, 0)
		mustRefuse(t)(out, rerr)("may not be set")
	}
	out, rerr := call(t, Options{}, "http__get", map[string]any{"url": "https://example.com/", "headers": map[string]string{"X-A": "a\r\nHost: evil"}}, 0)
	mustRefuse(t)(out, rerr)("not allowed in HTTP headers")
}

// allocDuring returns the bytes allocated while f runs.
func allocDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestLargeBodyWithoutLengthIsBounded: a chunked body is read with bounded
// memory, cut at maxBytes, and counted: exactly when it ends within
// registry.CountPast of the cut (nothing is kept here), "at least" when
// it goes on past that.
func TestLargeBodyWithoutLengthIsBounded(t *testing.T) {
	const limit = 64 << 10
	for _, total := range []int{4 << 20, 10 << 20} {
		t.Run(fmt.Sprintf("%dMiB", total>>20), func(t *testing.T) {
			srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				chunk := bytes.Repeat([]byte("a"), 32<<10)
				for sent := 0; sent < total; sent += len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						return // the client stopped reading
					}
					w.(http.Flusher).Flush()
				}
			}))
			var out *output
			alloc := allocDuring(func() {
				out = mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL, "maxBytes": limit}, 0))
			})
			if !out.Truncated || out.Bytes != limit || len(out.Body.(string)) != limit || out.Headers["content-length"] != "" {
				t.Errorf("truncated %v, bytes %d, body %d, content-length %q; want a chunked body cut at %d",
					out.Truncated, out.Bytes, len(out.Body.(string)), out.Headers["content-length"], limit)
			}
			if !strings.Contains(out.Note, "maxBytes") {
				t.Errorf("note %q does not explain the cut", out.Note)
			}
			counted := total
			if past := limit + 1 + registry.CountPast; total > past {
				counted = past // counting stops there, and the note says so
				if want := fmt.Sprintf("[the body is at least %d bytes; counting stopped there]", past); !strings.Contains(out.Note, want) {
					t.Errorf("note %q; want %q", out.Note, want)
				}
			}
			if want := fmt.Sprintf("[output truncated: %d bytes total, %d omitted", counted, counted-limit); out.TotalBytes != int64(counted) || !strings.Contains(out.Note, want) {
				t.Errorf("totalBytes %d, note %q; want %d and %q", out.TotalBytes, out.Note, counted, want)
			}
			if alloc > 4<<20 {
				t.Errorf("allocated %d bytes reading a %d-byte body with maxBytes %d; the body is not bounded", alloc, total, limit)
			}
			t.Logf("allocated %d KiB for a %d MiB body cut at %d KiB", alloc>>10, total>>20, limit>>10)
		})
	}
}

func TestGzipBombIsBounded(t *testing.T) {
	const inflated = 256 << 20
	// A gzip stream may hold many members; the client decodes them all.
	var member, bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&member, gzip.BestCompression)
	zw.Write(make([]byte, 1<<20))
	zw.Close()
	for range inflated >> 20 {
		bomb.Write(member.Bytes())
	}
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", fmt.Sprint(bomb.Len()))
		w.Write(bomb.Bytes())
	}))
	const limit = 1 << 20
	var out *output
	alloc := allocDuring(func() {
		out = mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL, "maxBytes": limit}, 0))
	})
	if !out.Truncated || out.Bytes != limit || out.Format != "text" {
		t.Errorf("truncated %v, bytes %d, format %s; want decoded text cut at %d", out.Truncated, out.Bytes, out.Format, limit)
	}
	if alloc > 16<<20 {
		t.Errorf("allocated %d bytes for a %d-byte gzip body inflating to %d; decompression is not bounded", alloc, bomb.Len(), inflated)
	}
	t.Logf("gzip body %d KiB inflating to %d MiB: allocated %d KiB", bomb.Len()>>10, inflated>>20, alloc>>10)
}

func TestUndecodedEncodingIsBase64(t *testing.T) {
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Encoding", "br")
		w.Write([]byte{0x1b, 0x03, 0x00, 0xf8})
	}))
	out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL}, 0))
	if out.Format != "base64" || out.Body != "GwMA+A==" || !strings.Contains(out.Note, `"br"`) {
		t.Errorf("format %s body %v note %q", out.Format, out.Body, out.Note)
	}
}

const page = `<!doctype html><html><head><title>T</title><style>body{color:red}</style>
<script>var secret = "do-not-show";</script></head>
<body><h1>Release notes</h1><p>See <a href="other.html">the other page</a> and <b>bold</b> text.</p>
<ul><li>one</li><li>two</li></ul></body></html>`

func TestBodyFormats(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/docs/page.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	})
	mux.HandleFunc("/latin1", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html><head><meta charset=\"iso-8859-1\"></head><body><p>caf\xe9</p></body></html>"))
	})
	mux.HandleFunc("/bad.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"unterminated": `)
	})
	mux.HandleFunc("/untyped-json", func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil // no sniffing by the server
		fmt.Fprint(w, `[1, 2, 3]`)
	})
	mux.HandleFunc("/image", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00"))
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such page", http.StatusNotFound)
	})
	srv, _ := serve(t, "127.0.0.1:0", mux)
	o := Options{AllowCIDRs: allowLoopback()}
	get := func(path, format string) *output {
		t.Helper()
		a := map[string]any{"url": srv.URL + path}
		if format != "" {
			a["format"] = format
		}
		return mustOK(t)(call(t, o, "http__get", a, 0))
	}

	md := get("/docs/page.html", "")
	body, _ := md.Body.(string)
	if md.Format != "markdown" {
		t.Fatalf("format %s, want markdown", md.Format)
	}
	for _, want := range []string{"# Release notes", "[the other page](" + srv.URL + "/docs/other.html)", "**bold**", "- one"} {
		if !strings.Contains(body, want) {
			t.Errorf("markdown lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "do-not-show") || strings.Contains(body, "color:red") || strings.Contains(body, "<") {
		t.Errorf("markdown keeps scripts, styles or tags:\n%s", body)
	}
	if md := get("/docs/page.html", "markdown"); md.Format != "markdown" {
		t.Errorf("format markdown gave %s", md.Format)
	}
	if raw := get("/docs/page.html", "text"); raw.Format != "text" || raw.Body != page {
		t.Errorf("format text: %s %q, want the HTML unchanged", raw.Format, raw.Body)
	}
	if l := get("/latin1", ""); !strings.Contains(l.Body.(string), "café") {
		t.Errorf("latin-1 page: %q, want café decoded", l.Body)
	}
	if bad := get("/bad.json", ""); bad.Format != "text" || bad.Body != `{"unterminated": ` || !strings.Contains(bad.Note, "not valid JSON") {
		t.Errorf("invalid JSON: %s %q note %q", bad.Format, bad.Body, bad.Note)
	}
	if js := get("/untyped-json", ""); js.Format != "json" || string(js.Body.(json.RawMessage)) != "[1, 2, 3]" {
		t.Errorf("untyped JSON: %s %v", js.Format, js.Body)
	}
	if js := get("/untyped-json", "text"); js.Format != "text" || js.Body != "[1, 2, 3]" {
		t.Errorf("JSON as text: %s %v", js.Format, js.Body)
	}
	if img := get("/image", ""); img.Format != "base64" || img.Body != "iVBORw0KGgoAAA==" || !strings.Contains(img.Note, "image/png") {
		t.Errorf("image: %s %v note %q", img.Format, img.Body, img.Note)
	}
	if raw := get("/image", "raw"); raw.Format != "base64" {
		t.Errorf("raw binary: %s", raw.Format)
	}
	miss := get("/missing", "")
	if miss.Status != 404 || miss.Body != "no such page\n" {
		t.Errorf("404: status %d body %q; a non-2xx status is a normal result", miss.Status, miss.Body)
	}
}

func TestPost(t *testing.T) {
	type seen struct{ method, ctype, body, custom string }
	got := make(chan seen, 4)
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.Header.Get("Content-Type"), string(b), r.Header.Get("X-Custom")}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id": 7}`)
	}))
	o := Options{AllowCIDRs: allowLoopback()}
	out := mustOK(t)(call(t, o, "http__post", map[string]any{"url": srv.URL, "body": `{"name": "x"}`, "headers": map[string]string{"X-Custom": "c"}}, 0))
	if out.Status != 201 || string(out.Body.(json.RawMessage)) != `{"id": 7}` {
		t.Errorf("output %+v", out)
	}
	if s := <-got; s != (seen{"POST", "application/json", `{"name": "x"}`, "c"}) {
		t.Errorf("server saw %+v", s)
	}
	mustOK(t)(call(t, o, "http__post", map[string]any{"url": srv.URL, "body": "a=1"}, 0))
	if s := <-got; s.ctype != "text/plain; charset=utf-8" || s.body != "a=1" {
		t.Errorf("server saw %+v", s)
	}
	mustOK(t)(call(t, o, "http__post", map[string]any{"url": srv.URL, "body": "a=1", "headers": map[string]string{"content-type": "application/x-www-form-urlencoded"}}, 0))
	if s := <-got; s.ctype != "application/x-www-form-urlencoded" {
		t.Errorf("server saw %+v", s)
	}
	mustRefuse(t)(call(t, Options{MaxRequestBytes: 4, AllowCIDRs: allowLoopback()}, "http__post", map[string]any{"url": srv.URL, "body": "12345"}, 0))("at most 4")
}

func TestHostLists(t *testing.T) {
	srv, ln := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/to-bad" {
			http.Redirect(w, r, "http://bad.test:"+r.URL.Query().Get("p")+"/", http.StatusFound)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	p := port(srv)
	res := testResolver{"a.good.test": addrs("127.0.0.1"), "bad.test": addrs("127.0.0.1"), "evil.test": addrs("127.0.0.1")}
	o := Options{AllowCIDRs: allowLoopback(), AllowHosts: []string{"*.good.test"}, DenyHosts: []string{"evil.test"}, Resolver: res}

	mustOK(t)(call(t, o, "http__get", map[string]any{"url": "http://a.good.test:" + p + "/"}, 0))
	before := ln.accepted.Load()
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": "http://bad.test:" + p + "/"}, 0))("not in the operator's list of allowed hosts")
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": "http://EVIL.test.:" + p + "/"}, 0))("denied by the operator")
	if n := ln.accepted.Load() - before; n != 0 {
		t.Errorf("refused hosts made %d connections", n)
	}
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": "http://a.good.test:" + p + "/to-bad?p=" + p}, 0))("redirect to http://bad.test")

	// An allowed host is still subject to the address check.
	o.AllowCIDRs = nil
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": "http://a.good.test:" + p + "/"}, 0))("127.0.0.1 is a loopback address")
}

func TestHTTPSAndHostVerification(t *testing.T) {
	ln := listen(t, "127.0.0.1:0")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls ok") }))
	srv.Listener = ln
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	// The test certificate is valid for example.com and 127.0.0.1.
	res := testResolver{"example.com": addrs("127.0.0.1"), "wrong.test": addrs("127.0.0.1")}
	o := Options{AllowCIDRs: allowLoopback(), Resolver: res, RootCAs: pool}
	out := mustOK(t)(call(t, o, "http__get", map[string]any{"url": "https://example.com:" + port(srv) + "/"}, 0))
	if out.Body != "tls ok" {
		t.Errorf("body %q", out.Body)
	}
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": "https://wrong.test:" + port(srv) + "/"}, 0))("certificate")
	o.RootCAs = nil
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": "https://example.com:" + port(srv) + "/"}, 0))("certificate")
}

func TestTimeoutAndUnresolvable(t *testing.T) {
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	o := Options{AllowCIDRs: allowLoopback(), Resolver: testResolver{}}
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": srv.URL, "timeoutMs": 200}, 0))("no response within 200ms")
	mustRefuse(t)(call(t, o, "http__get", map[string]any{"url": "http://nowhere.test/"}, 0))("could not resolve host nowhere.test")
}

func TestOutputFitsLimit(t *testing.T) {
	text := strings.Repeat("line with \"quotes\" and \\ and ünïcode\n", 500)
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/json" {
			w.Header().Set("Content-Type", "application/json")
			b, _ := json.Marshal(map[string]string{"text": text})
			w.Write(b)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, text)
	}))
	for _, path := range []string{"/text", "/json"} {
		const limit = 2000
		out := mustOK(t)(call(t, Options{AllowCIDRs: allowLoopback()}, "http__get", map[string]any{"url": srv.URL + path}, limit))
		n := jsonLen(out)
		body, _ := out.Body.(string)
		if n > limit || n < limit-noteRoom("", limit) || !out.Truncated || body == "" || !strings.HasPrefix(text, strings.TrimPrefix(body, `{"text":"`)[:10]) {
			t.Errorf("%s: output %d bytes (limit %d), truncated %v, body %d bytes", path, n, limit, out.Truncated, len(body))
		}
		if !strings.Contains(out.Note, "output limit") {
			t.Errorf("%s: note %q", path, out.Note)
		}
	}
}

func TestThroughExecutor(t *testing.T) {
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<h2>Hi</h2>")
	}))
	reg, err := registry.New(registry.Defaults{Timeout: 10e9, MaxOutputBytes: 64 << 10, ErrorMessageLimit: 1000},
		Tools(Options{Version: "9.9", AllowCIDRs: allowLoopback(), MaxBytes: 1 << 20})...)
	if err != nil {
		t.Fatalf("registry.New: %v", err)
	}
	ex := registry.NewExecutor(registry.Options{Registry: reg})
	run := func(args string) *registry.Result {
		t.Helper()
		res, err := ex.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "http__get", Arguments: json.RawMessage(args)})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}

	res := run(`{"url": "` + srv.URL + `"}`)
	var out output
	if res.Status != registry.StatusOK || json.Unmarshal(res.Output, &out) != nil || out.Body != "## Hi" || out.Status != 200 {
		t.Fatalf("result %s %s %+v", res.Status, res.Output, res.Error)
	}
	if tool, _ := reg.Lookup("http__post"); tool.Tier != registry.SideEffecting {
		t.Errorf("http__post tier %s", tool.Tier)
	}

	res = run(`{"url": "http://169.254.169.254/latest/meta-data/"}`)
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "metadata") {
		t.Errorf("metadata URL: %s %+v", res.Status, res.Error)
	}
	res = run(`{"url": "` + srv.URL + `", "maxBytes": 2000000}`)
	if res.Code() != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, "maxBytes") {
		t.Errorf("maxBytes over the operator limit: %+v", res.Error)
	}
	res = run(`{"url": "` + srv.URL + `", "body": "x"}`)
	if res.Code() != registry.CodeInvalidArguments {
		t.Errorf("body on http__get: %+v", res.Error)
	}
}

// BenchmarkGetHTML measures a fetch of a 100 KB HTML page over loopback,
// converted to Markdown.
func BenchmarkGetHTML(b *testing.B) {
	html := "<html><body>" + strings.Repeat(`<h2>Section</h2><p>Some <a href="/x">linked</a> text with <em>emphasis</em>.</p><ul><li>a</li><li>b</li></ul>`, 1000) + "</body></html>"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, html)
	}))
	defer srv.Close()
	tool := Tools(Options{AllowCIDRs: allowLoopback()})[0]
	req := &registry.Request{Name: "http__get", Arguments: json.RawMessage(`{"url": "` + srv.URL + `"}`)}
	b.SetBytes(int64(len(html)))
	for b.Loop() {
		if _, err := tool.Handler.Run(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// TestNoProxyFromEnvironment sets proxy variables that would capture the
// request if the client honoured them; the proxy must see nothing.
func TestNoProxyFromEnvironment(t *testing.T) {
	_, proxyLn := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "via proxy") }))
	for _, k := range []string{"HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"} {
		t.Setenv(k, "http://"+proxyLn.Addr().String())
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
	srv, _ := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "direct") }))
	o := Options{AllowCIDRs: allowLoopback(), Resolver: testResolver{"site.test": addrs("127.0.0.1")}}
	out := mustOK(t)(call(t, o, "http__get", map[string]any{"url": "http://site.test:" + port(srv) + "/"}, 0))
	if out.Body != "direct" || proxyLn.accepted.Load() != 0 {
		t.Errorf("body %q, proxy connections %d; want a direct request", out.Body, proxyLn.accepted.Load())
	}
}
