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
	"golang.org/x/text/encoding"

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

	// raw is the body as read, enc the charset its text was decoded from
	// (nil: UTF-8), covered how many of its bytes the Markdown was made
	// from, and fitted the output limit fit cut the body to (0: none).
	raw     []byte
	enc     encoding.Encoding
	covered int
	fitted  int
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

// limits bound what render makes of a body: html is how much HTML is
// converted to Markdown (see convertLimit); output is the tool's output
// limit (0: none), and reserve the room in it kept for the note finish
// may add.
type limits struct {
	html, output, reserve int
}

// render sets out.Format and out.Body from the body bytes, which out.Truncated
// says were cut. ctx is the request's, which its timeoutMs bounds.
func render(ctx context.Context, out *output, data []byte, contentEncoding, format string, lim limits) {
	out.raw = data
	if ce := strings.ToLower(strings.TrimSpace(contentEncoding)); ce != "" && ce != "identity" {
		// The transport decodes gzip itself and removes the header, so
		// anything left is an encoding the tool does not decode.
		setBase64(out, data)
		out.addNote(fmt.Sprintf("the body has Content-Encoding %q, which is not decoded; it is returned base64-encoded", contentEncoding))
		return
	}
	kind := classify(out.ContentType, data)
	if format == "raw" {
		// The bytes unchanged: only a character a cut split is left out.
		d := data
		if out.Truncated {
			d = registry.TrimPartialRune(d)
		}
		if utf8.Valid(d) {
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
		var notInterop error
		if !out.Truncated && json.Valid(data) {
			// Parsers read JSON that is not I-JSON differently, or not at
			// all, and invalid UTF-8 must not reach the result.
			if notInterop = registry.Interoperable(data); notInterop == nil {
				out.Format, out.Body = "json", json.RawMessage(data)
				return
			}
		}
		switch {
		case out.Truncated:
			out.addNote("the JSON body was truncated, so it is returned as text")
		case jsonDepth(data) > maxJSONDepth:
			out.addNote(fmt.Sprintf("the JSON body nests deeper than %d levels, more than the JSON parser accepts, so it is returned as text", maxJSONDepth))
		case notInterop != nil:
			note := "the body is JSON that parsers read differently (not I-JSON, RFC 7493: " + notInterop.Error() + "), so it is returned as text"
			if !utf8.Valid(data) {
				note += ", its invalid UTF-8 replaced by U+FFFD (format raw returns the bytes base64-encoded)"
			}
			out.addNote(note)
		default:
			out.addNote("the body is not valid JSON, so it is returned as text")
		}
	}
	text, enc := decodeText(data, out.ContentType, kind == kindJSON, out.Truncated)
	out.enc = enc
	if kind == kindHTML && (format == "auto" || format == "markdown") {
		out.Format, out.Body = "markdown", ""
		budget := 0
		if lim.output > 0 {
			budget = max(lim.output-jsonLen(out)-lim.reserve, 1)
		}
		if md, covered, ok := convertHTML(ctx, out, text, lim.html, budget); ok {
			out.Body, out.covered = md, rawOffset(data, enc, covered)
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
// declares; without one, valid UTF-8 is kept, JSON is read as UTF-8, and
// anything else is decoded from the charset an HTML <meta> tag names, or
// else windows-1252, as browsers do. It returns the charset it decoded
// from, nil for UTF-8 (where invalid bytes become U+FFFD). Only a body
// that was cut loses a UTF-8 character the cut split.
func decodeText(data []byte, contentType string, isJSON, cut bool) (string, encoding.Encoding) {
	asUTF8 := data
	if cut {
		asUTF8 = registry.TrimPartialRune(data)
	}
	_, params, _ := mime.ParseMediaType(contentType)
	if params["charset"] == "" && (isJSON || utf8.Valid(asUTF8)) {
		return strings.ToValidUTF8(string(asUTF8), "\uFFFD"), nil
	}
	enc, name, _ := charset.DetermineEncoding(data, contentType)
	if name != "utf-8" && enc != nil {
		if d, err := enc.NewDecoder().Bytes(data); err == nil {
			return strings.ToValidUTF8(string(d), "\uFFFD"), enc
		}
	}
	return strings.ToValidUTF8(string(asUTF8), "\uFFFD"), nil
}

// fit cuts the body so the marshalled output stays within limit bytes,
// keeping reserve of them for the note of a cut (see finish), so the
// result stays structured instead of being cut by the executor.
func (o *output) fit(limit, reserve int) {
	if limit <= 0 {
		return
	}
	n := jsonLen(o)
	if n <= limit && (!o.cut() || n <= limit-reserve) {
		return
	}
	if raw, ok := o.Body.(json.RawMessage); ok {
		o.Body, o.Format = string(raw), "text"
		o.addNote("the JSON body is larger than the output limit, so it is returned as text")
	}
	o.fitted = limit
	body, _ := o.Body.(string)
	o.Body = ""
	budget := max(limit-reserve-jsonLen(o), 0)
	if o.Format == "base64" {
		n := min(len(body), budget/4*4)
		o.Body = body[:n]
		return
	}
	o.Body = cutEscaped(body, budget)
}

// cut reports whether the body shown is less than the body, before fit.
func (o *output) cut() bool {
	return o.Truncated || (o.Format == "markdown" && o.covered < len(o.raw))
}

// shown is how many bytes of the body, from its start, the output shows.
func (o *output) shown() int {
	body, _ := o.Body.(string)
	switch {
	case o.Format == "base64" && o.fitted > 0:
		return len(body) / 4 * 3
	case o.Format == "markdown":
		return o.covered
	case o.Format == "text":
		return rawOffset(o.raw, o.enc, len(body))
	}
	return len(o.raw)
}

// rawOffset returns how many bytes of data the first n bytes of their
// text come from: data decoded from enc, or read as UTF-8 (nil), each run
// of invalid bytes becoming one U+FFFD, as strings.ToValidUTF8 does.
func rawOffset(data []byte, enc encoding.Encoding, n int) int {
	if enc != nil {
		_, nSrc, _ := enc.NewDecoder().Transform(make([]byte, n), data, true)
		return nSrc
	}
	i, out := 0, 0
	for i < len(data) && out < n {
		if r, size := utf8.DecodeRune(data[i:]); r != utf8.RuneError || size > 1 {
			i += size
			out += size
			continue
		}
		for i < len(data) {
			if r, size := utf8.DecodeRune(data[i:]); r != utf8.RuneError || size > 1 {
				break
			}
			i++
		}
		out += len("\uFFFD")
	}
	return i
}

// bodySize is what is known of a whole body: its size (at least that much
// when !exact), and its spill when it was counted (cut at maxBytes).
type bodySize struct {
	total   int64
	exact   bool
	counted bool
	spill   *registry.SpillInfo
	// maxBytes is the limit the body was cut at, when it was.
	maxBytes int64
}

// finish says on out what of the body it does not show: when that is
// anything, the result is truncated with the body's size, the body is
// kept in the spill store (when the service keeps cut outputs), and the
// note says why, how much was omitted and where to read on.
func (o *output) finish(ctx context.Context, req *registry.Request, b bodySize) {
	if !o.cut() && o.fitted == 0 {
		return
	}
	shown := int64(o.shown())
	if shown >= b.total && b.exact {
		return
	}
	var why []string
	if b.maxBytes > 0 {
		why = append(why, fmt.Sprintf("body cut at maxBytes=%d", b.maxBytes))
	}
	if o.Format == "markdown" && o.covered < len(o.raw) {
		why = append(why, fmt.Sprintf("Markdown made from the first %d of %d bytes of HTML read (the conversion is bounded by the output limit)", o.covered, len(o.raw)))
	}
	switch {
	case o.fitted > 0 && o.Format == "markdown":
		// Only when Markdown made again from less HTML still did not fit.
		why = append(why, fmt.Sprintf("Markdown cut to fit the %d-byte output limit: its end, made from the HTML before byte %d, is not shown", o.fitted, o.covered))
	case o.fitted > 0:
		why = append(why, fmt.Sprintf("body cut to fit the %d-byte output limit", o.fitted))
	}
	spill := b.spill
	if !b.counted {
		spill = spillBody(ctx, req, o.raw)
	}
	if spill != nil && o.Format == "text" && o.enc != nil {
		// The body is kept as sent, in its own charset, and result__read
		// reads text as UTF-8: a model reading on would get U+FFFD (and
		// for UTF-16, offsets inside characters). Only the operator's
		// GET /calls/{id}/output, which gives the bytes, reads it.
		kept := *spill
		kept.Unreadable = true
		spill = &kept
	}
	o.Truncated, o.TotalBytes = true, b.total
	req.ReportTruncated(b.total)
	o.addNote(cutNote(why, b, shown, req.CallID, spill))
}

// cutNote is the note of a cut body: why, and the marker.
func cutNote(why []string, b bodySize, shown int64, callID string, spill *registry.SpillInfo) string {
	note := strings.Join(why, "; ")
	if note != "" {
		note += " "
	}
	if !b.exact {
		note += fmt.Sprintf("[the body is at least %d bytes; counting stopped there] ", b.total)
	}
	return note + registry.CutMarker(b.total-shown, b.total, callID, "body", shown, spill)
}

// noteRoom is the most bytes the note of a cut body (cutNote) adds to an
// output whose output limit is limit.
func noteRoom(callID string, limit int) int {
	const big = countBound
	why := []string{fmt.Sprintf("body cut at maxBytes=%d", big),
		fmt.Sprintf("Markdown made from the first %d of %d bytes of HTML read (the conversion is bounded by the output limit)", big, big),
		fmt.Sprintf("Markdown cut to fit the %d-byte output limit: its end, made from the HTML before byte %d, is not shown", limit, big)}
	n := 0
	for _, spill := range []*registry.SpillInfo{nil, {TotalBytes: big, StoredBytes: 1}, {TotalBytes: big, StoredBytes: 1, Unreadable: true}} {
		n = max(n, registry.QuotedLen(cutNote(why, bodySize{total: big}, big, callID, spill)))
	}
	return n + len("; ")
}

// spillBody keeps a body that was read whole, but is not shown whole, in
// the spill store, when the service keeps cut outputs.
func spillBody(ctx context.Context, req *registry.Request, data []byte) *registry.SpillInfo {
	sink := req.SpillStream(ctx, "body")
	if sink == nil {
		return nil
	}
	_, _ = sink.Write(data)
	spill, _ := sink.Close() // a failed spill is logged; the marker says it was not kept
	return spill
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
