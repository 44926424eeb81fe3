package httpfetch

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// output is the result of http__get and http__post.
type output struct {
	Status      int               `json:"status"`
	Headers     map[string]string `json:"headers"`
	ContentType string            `json:"contentType"`
	// Format says what Body holds: markdown, text, json (a parsed value)
	// or base64.
	Format string `json:"format"`
	Body   any    `json:"body"`
	Bytes  int    `json:"bytes"`
	// TotalBytes is the size of the whole body when it was cut (at least
	// that much when counting it stopped at its own bound).
	TotalBytes int64  `json:"totalBytes,omitempty"`
	Truncated  bool   `json:"truncated"`
	FinalURL   string `json:"finalUrl"`
	Note       string `json:"note,omitempty"`
}

func (o *output) addNote(s string) {
	if o.Note != "" {
		o.Note += "; "
	}
	o.Note += s
}

// safeResponseHeaders are the response headers a result shows; others
// (Set-Cookie above all) are left out.
func safeResponseHeaders() []string {
	return []string{
		"Age", "Allow", "Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Length", "Content-Type", "Date", "Etag", "Expires", "Last-Modified", "Link", "Location",
		"Retry-After", "Vary", "Www-Authenticate",
	}
}

// maxHeaderValue bounds each header value in a result.
const maxHeaderValue = 512

func safeHeaders(h http.Header) map[string]string {
	out := map[string]string{}
	for _, k := range safeResponseHeaders() {
		vs := h.Values(k)
		if len(vs) == 0 {
			continue
		}
		v := strings.ToValidUTF8(strings.Join(vs, ", "), "\uFFFD")
		if len(v) > maxHeaderValue {
			v = string(registry.TrimPartialRune([]byte(v[:maxHeaderValue]))) + "…"
		}
		out[strings.ToLower(k)] = v
	}
	return out
}

// bodyKind is what a body is, from its media type or, when that says
// little, from its bytes.
type bodyKind int

const (
	kindBinary bodyKind = iota
	kindText
	kindHTML
	kindJSON
)

func classify(contentType string, data []byte) bodyKind {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt, _, _ = strings.Cut(strings.ToLower(contentType), ";")
		mt = strings.TrimSpace(mt)
	}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return kindHTML
	case mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json"):
		return kindJSON
	case strings.HasPrefix(mt, "text/") || strings.HasSuffix(mt, "+xml") || strings.HasSuffix(mt, "+yaml"):
		return kindText
	}
	switch mt {
	case "application/xml", "application/javascript", "application/ecmascript", "application/x-javascript",
		"application/x-www-form-urlencoded", "application/yaml", "application/x-yaml", "application/toml",
		"application/x-ndjson", "application/jsonl", "application/graphql", "application/sql", "application/x-sh":
		return kindText
	case "", "application/octet-stream", "binary/octet-stream", "application/unknown":
		sniffed := http.DetectContentType(data)
		switch {
		case strings.HasPrefix(sniffed, "text/html"):
			return kindHTML
		case strings.HasPrefix(sniffed, "text/"):
			if json.Valid(bytes.TrimSpace(data)) && len(bytes.TrimSpace(data)) > 0 {
				return kindJSON
			}
			return kindText
		}
	}
	return kindBinary
}

// render sets out.Format and out.Body from the body bytes. ctx is the
// request's, which its timeoutMs bounds; htmlLimit bounds the HTML that is
// converted to Markdown (see convertLimit).
func render(ctx context.Context, out *output, data []byte, contentEncoding, format string, htmlLimit int) {
	if ce := strings.ToLower(strings.TrimSpace(contentEncoding)); ce != "" && ce != "identity" {
		// The transport decodes gzip itself and removes the header, so
		// anything left is an encoding the tool does not decode.
		setBase64(out, data)
		out.addNote(fmt.Sprintf("the body has Content-Encoding %q, which is not decoded; it is returned base64-encoded", contentEncoding))
		return
	}
	kind := classify(out.ContentType, data)
	if format == "raw" {
		if d := registry.TrimPartialRune(data); utf8.Valid(d) {
			out.Format, out.Body = "text", string(d)
			return
		}
		setBase64(out, data)
		return
	}
	if kind == kindBinary {
		setBase64(out, data)
		out.addNote(fmt.Sprintf("binary content (%s) is returned base64-encoded", orUnknown(out.ContentType)))
		return
	}
	if format == "json" || (format == "auto" && kind == kindJSON) {
		if !out.Truncated && json.Valid(data) {
			out.Format, out.Body = "json", json.RawMessage(data)
			return
		}
		switch {
		case out.Truncated:
			out.addNote("the JSON body was truncated, so it is returned as text")
		case jsonDepth(data) > maxJSONDepth:
			out.addNote(fmt.Sprintf("the JSON body nests deeper than %d levels, more than the JSON parser accepts, so it is returned as text", maxJSONDepth))
		default:
			out.addNote("the body is not valid JSON, so it is returned as text")
		}
	}
	text := decodeText(data, out.ContentType)
	if kind == kindHTML && (format == "auto" || format == "markdown") {
		if md, ok := convertHTML(ctx, out, text, htmlLimit); ok {
			out.Format, out.Body = "markdown", md
			return
		}
	}
	out.Format, out.Body = "text", text
}

// maxJSONDepth is how deeply encoding/json lets arrays and objects nest.
const maxJSONDepth = 10000

// jsonDepth returns how deeply the arrays and objects of data nest.
func jsonDepth(data []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			deepest = max(deepest, depth)
		case c == ']' || c == '}':
			depth--
		}
	}
	return deepest
}

func orUnknown(s string) string {
	if s == "" {
		return "no Content-Type"
	}
	return s
}

func setBase64(out *output, data []byte) {
	out.Format, out.Body = "base64", base64.StdEncoding.EncodeToString(data)
}

// decodeText converts text to UTF-8 from the charset the Content-Type
// declares; without one, valid UTF-8 is kept, and anything else is decoded
// from the charset an HTML <meta> tag names, or else windows-1252, as
// browsers do.
func decodeText(data []byte, contentType string) string {
	data = registry.TrimPartialRune(data)
	_, params, _ := mime.ParseMediaType(contentType)
	if params["charset"] == "" && utf8.Valid(data) {
		return string(data)
	}
	enc, name, _ := charset.DetermineEncoding(data, contentType)
	if name != "utf-8" && enc != nil {
		if d, err := enc.NewDecoder().Bytes(data); err == nil {
			data = d
		}
	}
	return strings.ToValidUTF8(string(data), "\uFFFD")
}

// fit cuts the body so the marshalled output stays within limit bytes, so
// the result stays structured instead of being cut by the executor.
func (o *output) fit(limit int) {
	if limit <= 0 || jsonLen(o) <= limit {
		return
	}
	if raw, ok := o.Body.(json.RawMessage); ok {
		o.Body, o.Format = string(raw), "text"
		o.addNote("the JSON body is larger than the output limit, so it is returned as text")
	}
	o.Truncated = true
	o.addNote(fmt.Sprintf("body cut to fit the %d-byte output limit; ask for less with maxBytes or a narrower URL", limit))
	body, _ := o.Body.(string)
	o.Body = ""
	budget := max(limit-jsonLen(o), 0)
	if o.Format == "base64" {
		n := min(len(body), budget/4*4)
		o.Body = body[:n]
		return
	}
	o.Body = cutEscaped(body, budget)
}

func jsonLen(v any) int {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return 0
	}
	return buf.Len() - 1
}

// cutEscaped returns the longest prefix of s whose JSON string escaping
// takes at most budget bytes (quotes not counted).
func cutEscaped(s string, budget int) string {
	n := 0
	for i, r := range s {
		w := utf8.RuneLen(r)
		switch {
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			w = 2
		case r < 0x20 || r == '\u2028' || r == '\u2029' || r == utf8.RuneError:
			w = 6
		}
		if n+w > budget {
			return s[:i]
		}
		n += w
	}
	return s
}
