// Package result provides result__read, a read-only tool that reads on in
// the kept output of an earlier call that was cut: by range, or only the
// lines that match a regular expression.
package result

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/rematch"
)

// Name is the tool's name.
const Name = registry.ReadOnTool

// Reader reads kept output under the rules of the original call;
// *registry.Executor implements it.
type Reader interface {
	ReadOutput(ctx context.Context, caller *registry.Caller, catalog []string, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error)
}

// Options configure the tool.
type Options struct {
	// MaxLimit is the most bytes one call returns; 0 means 65536.
	MaxLimit int
	// MaxScanBytes is the most bytes one filtered call looks at; 0 means
	// 4 MiB.
	MaxScanBytes int
}

// Binder connects the tool to the executor, which is built after it.
type Binder struct {
	reader atomic.Pointer[Reader]
}

// Bind makes r serve the tool's reads from now on.
func (b *Binder) Bind(r Reader) { b.reader.Store(&r) }

const defaultLimit = 8192

// Tools returns result__read and the Binder to give it its reader.
func Tools(o Options) ([]*registry.Tool, *Binder) {
	if o.MaxLimit <= 0 {
		o.MaxLimit = 64 << 10
	}
	if o.MaxScanBytes <= 0 {
		o.MaxScanBytes = 4 << 20
	}
	b := &Binder{}
	t := &tool{o: o, b: b}
	yes, no := true, false
	return []*registry.Tool{{
		Definition: registry.Definition{
			Name: Name,
			Description: "Read on in the full output of an earlier call whose result was cut (its output ends with or contains " +
				"\"[output truncated: … read on with " + Name + " {…}]\"). Pass the toolCallId, stream and offset the marker gives; " +
				"each call returns up to `limit` bytes from `offset` and the `nextOffset` to continue with, until `eof`. " +
				"With `pattern` (a regular expression, RE2 syntax), it returns only the lines from `offset` on that match, with their offsets; " +
				"a line longer than `limit` (such as the one line of JSON of a cut structured output) comes as the text around each match in it, with the match's `matchOffset`. " +
				"Only the output of your own calls, to tools you may use, can be read, and only for a limited time.",
			Parameters:   json.RawMessage(fmt.Sprintf(schema, o.MaxLimit, defaultLimit)),
			OutputSchema: json.RawMessage(outputSchema),
			Tier:         registry.ReadOnly,
			// What it returns, plus its envelope, fits the output limit.
			MaxOutputBytes: 2*o.MaxLimit + 4096,
			Tags:           []string{"output"},
			Annotations:    &registry.Annotations{Title: "Read the rest of a cut output", ReadOnlyHint: &yes, IdempotentHint: &yes, OpenWorldHint: &no},
		},
		Handler: registry.Func(t.run),
	}}, b
}

const schema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["toolCallId"],
  "properties": {
    "toolCallId": {"type": "string", "minLength": 1, "maxLength": 256, "description": "The toolCallId of the call whose output was cut."},
    "stream": {"type": "string", "enum": ["output", "stdout", "stderr", "body"], "default": "output", "description": "Which output: stdout or stderr of a process tool, body of an HTTP tool, output otherwise (the marker says which)."},
    "offset": {"type": "integer", "minimum": 0, "maximum": 9007199254740991, "default": 0, "description": "Byte offset to read from (the marker's offset, then nextOffset)."},
    "limit": {"type": "integer", "minimum": 1, "maximum": %d, "default": %d, "description": "Most bytes to return."},
    "pattern": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "Return only the lines that match this regular expression (RE2 syntax, at most 4096 compiled instructions), e.g. \"(?i)error\". A long line is matched in pieces (64 KiB, less for complex patterns): a match across two pieces is not found, and \\b may match at a piece's edge."}
  }
}`

const outputSchema = `{
  "type": "object",
  "required": ["toolCallId", "toolName", "stream", "offset", "nextOffset", "eof", "totalBytes", "storedBytes"],
  "properties": {
    "toolCallId": {"type": "string"},
    "toolName": {"type": "string"},
    "stream": {"type": "string", "enum": ["output", "stdout", "stderr", "body"]},
    "offset": {"type": "integer", "minimum": 0},
    "nextOffset": {"type": "integer", "minimum": 0, "description": "Where the next read continues."},
    "eof": {"type": "boolean", "description": "Nothing is left of what was kept."},
    "totalBytes": {"type": "integer", "minimum": 0, "description": "Size of the whole output."},
    "storedBytes": {"type": "integer", "minimum": 0, "description": "How much of it was kept (less when it was longer than the spill limit)."},
    "content": {"type": "string", "description": "The bytes read, when no pattern was given."},
    "matches": {"type": "array", "items": {"type": "object", "required": ["offset", "line"], "properties": {
      "offset": {"type": "integer", "description": "Where line begins in the output."},
      "line": {"type": "string", "description": "The matching line, or for a line longer than limit the text around the match."},
      "matchOffset": {"type": "integer", "description": "Where the match begins, when line is only the text around it."}}}},
    "note": {"type": "string"}
  }
}`

type args struct {
	ToolCallID string `json:"toolCallId"`
	Stream     string `json:"stream"`
	Offset     int64  `json:"offset"`
	Limit      int    `json:"limit"`
	Pattern    string `json:"pattern"`
}

// Output is a range of kept output.
type Output struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	Stream     string `json:"stream"`
	Offset     int64  `json:"offset"`
	// NextOffset is where the next read continues; EOF says nothing is
	// left of what was kept.
	NextOffset int64 `json:"nextOffset"`
	EOF        bool  `json:"eof"`
	// TotalBytes is the size of the whole output; StoredBytes how much of
	// it was kept (less when it was longer than the spill limit).
	TotalBytes  int64   `json:"totalBytes"`
	StoredBytes int64   `json:"storedBytes"`
	Content     *string `json:"content,omitempty"`
	Matches     []Match `json:"matches,omitzero"`
	Note        string  `json:"note,omitempty"`
}

// Match is one line that matched the pattern, or for a line longer
// than the limit, the text around one match in it.
type Match struct {
	// Offset is where Line begins in the output.
	Offset int64  `json:"offset"`
	Line   string `json:"line"`
	// MatchOffset is where the match begins, when Line is only the text
	// around it.
	MatchOffset *int64 `json:"matchOffset,omitempty"`
}

type tool struct {
	o Options
	b *Binder
}

func invalid(msg, suggestion string) *registry.Error {
	return &registry.Error{Code: registry.CodeInvalidArguments, Message: msg, Suggestion: suggestion}
}

func (t *tool) run(ctx context.Context, req *registry.Request) (any, error) {
	var a args
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	r := t.b.reader.Load()
	if r == nil {
		return nil, errors.New("result__read is not connected to the service's store")
	}
	a.Stream = cmpOr(a.Stream, registry.SpillStreamOutput)
	a.Limit = cmpOr(a.Limit, defaultLimit)
	if a.Pattern == "" {
		info, data, err := (*r).ReadOutput(ctx, req.Caller, req.Catalog, a.ToolCallID, a.Stream, a.Offset, a.Limit+slack)
		if err != nil {
			return nil, readError(err)
		}
		return readRange(info, a, data, answerRoom(req, a)), nil
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return nil, invalid("pattern is not a valid regular expression: "+err.Error(), "Use RE2 syntax, e.g. \"(?i)error|warning\".")
	}
	insts := rematch.ProgramSize(a.Pattern)
	if insts > rematch.MaxInsts {
		return nil, invalid(fmt.Sprintf("pattern compiles to %d instructions; the limit is %d", insts, rematch.MaxInsts),
			"Use smaller repetition counts (x{1000} repeats x a thousand times) or a simpler pattern.")
	}
	return t.filter(ctx, *r, req, a, rematch.New(ctx, re, insts, maxPiece))
}

// answerRoom is how many bytes of JSON the content, or the matches, of an
// answer may take (-1: no bound): the output limit, less what the rest of
// the answer takes. Text takes more bytes in JSON than it has (a control
// character takes six), and an answer the executor had to cut would lose
// its nextOffset, or show less than it says, so the tool itself stops
// where its answer is full.
func answerRoom(req *registry.Request, a args) int {
	if req.MaxOutputBytes <= 0 {
		return -1
	}
	_, id := fitJSON([]byte(a.ToolCallID), -1)
	return max(req.MaxOutputBytes-id-envelope, minRoom)
}

// envelope bounds what an answer takes besides its toolCallId and its
// content or matches: the names of its fields, the tool's name (at most
// registry.MaxNameLength), five numbers and the notes.
const envelope = 1024

// minRoom is the least room an answer has, whatever the output limit:
// enough for a character or a short match.
const minRoom = 256

// fitJSON returns how many bytes of b (whole characters) fit in room bytes
// of a JSON string's body, and how many bytes those take there (room < 0:
// all of b). It counts as encoding/json writes answers, or more: '"', '\\',
// \n, \r and \t take two bytes; other control characters, U+2028, U+2029
// and each byte that is not UTF-8 (written as \ufffd) take six.
func fitJSON(b []byte, room int) (fit, size int) {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		e := n
		switch {
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			e = 2
		case r < 0x20 || r == '\u2028' || r == '\u2029' || (r == utf8.RuneError && n == 1):
			e = 6
		}
		if room >= 0 && size+e > room {
			return i, size
		}
		size += e
		i += n
	}
	return len(b), size
}

// readRange answers a read of a.Limit bytes from a.Offset, given data,
// the stored bytes from a.Offset (up to slack bytes more than a.Limit):
// whole characters only, so that content is the stored text and a reader
// following nextOffset always moves on. An offset inside a character
// starts at the next one; a limit too small for the character at the
// offset reads that one character. Content stops sooner where its JSON
// form would take more than room bytes. Bytes that are not UTF-8 text
// are passed on as they are.
func readRange(info *registry.SpillInfo, a args, data []byte, room int) Output {
	var notes []string
	if skip := partialStart(data); skip > 0 {
		notes = append(notes, fmt.Sprintf("offset %d is inside a character; read from %d, where the next one begins", a.Offset, a.Offset+int64(skip)))
		a.Offset += int64(skip)
		data = data[skip:]
	}
	if len(data) > a.Limit {
		whole := registry.TrimPartialRune(data[:a.Limit])
		if len(whole) == 0 {
			if _, n := utf8.DecodeRune(data); n > 1 {
				whole = data[:n]
				notes = append(notes, fmt.Sprintf("limit %d is smaller than the character at offset %d, which takes %d bytes; read that one character", a.Limit, a.Offset, n))
			} else {
				whole = data[:a.Limit]
			}
		}
		data = whole
	}
	if fit, size := fitJSON(data, room); fit < len(data) && fit > 0 {
		data = data[:fit]
		notes = append(notes, fmt.Sprintf("read %d bytes, fewer than limit: in JSON they take %d bytes (control characters take 6 each), as much as one answer holds; read on from nextOffset", fit, size))
	}
	s := string(data)
	out := output(info, a, a.Offset+int64(len(data)))
	out.Content = &s
	if out.Note != "" {
		notes = append(notes, out.Note)
	}
	out.Note = strings.Join(notes, "; ")
	return out
}

// slack is how many bytes a read takes beyond its limit: enough to finish
// the character the limit cuts and to skip one the offset starts inside.
const slack = 2 * utf8.UTFMax

// partialStart returns how many bytes at the start of b continue a
// character that began before it: 0 unless a whole character follows
// them.
func partialStart(b []byte) int {
	for i := 0; i < len(b) && i < utf8.UTFMax; i++ {
		if utf8.RuneStart(b[i]) {
			if r, _ := utf8.DecodeRune(b[i:]); i > 0 && r != utf8.RuneError {
				return i
			}
			return 0
		}
	}
	return 0
}

// maxPiece is the most of a line one match looks at: a long line is
// matched in pieces, with the deadline checked between them (rematch), so
// that a call's pattern cannot keep a core of the service busy after its
// timeout.
const maxPiece = 64 << 10

// maxSnippet is the most of a long line shown around one match in it.
const maxSnippet = 1 << 10

// window is how much of the output a filter reads at once.
const window = 256 << 10

// filter scans from a.Offset, line by line, for at most MaxScanBytes,
// and returns the matching lines until they fill a.Limit. A line longer
// than a.Limit, such as the one line of JSON a cut structured output is,
// is not returned whole: each match in it comes with the text around it
// (snippet), where that begins, and where the match is.
func (t *tool) filter(ctx context.Context, r Reader, req *registry.Request, a args, m *rematch.Matcher) (any, error) {
	f := &filtering{ctx: ctx, r: r, req: req, a: a, m: m, matches: []Match{}, snip: min(a.Limit, maxSnippet), room: answerRoom(req, a)}
	if f.room >= 0 {
		// A snippet, even of control characters, fits an answer by itself.
		f.snip = max(min(f.snip, (f.room-matchEnvelope)/6), utf8.UTFMax)
	}
	pos := a.Offset
scan:
	for scanned := 0; scanned < t.o.MaxScanBytes; {
		// The byte before pos says whether pos begins a line.
		from := max(pos-1, 0)
		in, data, err := r.ReadOutput(ctx, req.Caller, req.Catalog, a.ToolCallID, a.Stream, from, window+int(pos-from))
		if err != nil {
			return nil, readError(err)
		}
		f.info = in
		lineStart := pos == 0
		if pos > from && len(data) > 0 {
			lineStart = data[0] == '\n'
			data = data[1:]
		}
		if len(data) == 0 {
			break
		}
		last := pos+int64(len(data)) >= in.StoredBytes
		end := len(data)
		if i := bytes.LastIndexByte(data, '\n'); !last && i >= 0 {
			end = i + 1 // whole lines only
		} else if whole := len(registry.TrimPartialRune(data)); !last && whole > 0 {
			end = whole // a line longer than the window goes on in the next one, from a character's start
		}
		for start := 0; start < end; {
			stop, ends := end, false
			if i := bytes.IndexByte(data[start:end], '\n'); i >= 0 {
				stop, ends = start+i, true
			} else if last && in.StoredBytes >= in.TotalBytes {
				ends = true // the end of the output ends its last line
			}
			var part rematch.Part
			if start > 0 || lineStart {
				part |= rematch.Start
			}
			if ends {
				part |= rematch.End
			}
			next, err := f.line(pos+int64(start), data[start:stop], part)
			if err != nil {
				return nil, err
			}
			if next >= 0 {
				pos = next // the next call starts at the match that did not fit
				break scan
			}
			start = stop + 1
		}
		pos += int64(end)
		scanned += end
		if last {
			break
		}
	}
	res := output(f.info, a, pos)
	res.Matches = f.matches
	var notes []string
	if f.cut {
		notes = append(notes, fmt.Sprintf("a matching line longer than limit (or than one answer holds in JSON) is shown as up to %d bytes around each match in it: offset is where the text shown begins, matchOffset where the match does", f.snip))
	}
	if !res.EOF {
		notes = append(notes, "the search stopped before the end; call again with offset set to nextOffset to search on")
	}
	if res.Note != "" {
		notes = append(notes, res.Note)
	}
	res.Note = strings.Join(notes, "; ")
	return res, nil
}

// filtering is the state of one filtered read.
type filtering struct {
	ctx     context.Context
	r       Reader
	req     *registry.Request
	a       args
	m       *rematch.Matcher
	info    *registry.SpillInfo
	matches []Match
	// used is how many bytes of the output the matches show, against
	// limit; spent how many bytes of JSON they take, against room (-1: no
	// bound).
	used, spent, room int
	// snip is the most shown around a match in a long line; cut says
	// some match was shown so.
	snip int
	cut  bool
	// shown is where the text shown around the last match in a long line
	// ends: the search of that line goes on from there.
	shown int64
}

// line looks for the pattern in line, which begins at offset at and
// holds the edges part of a line of the output. It returns the offset
// of a match that did not fit, where the next call is to start, or -1.
func (f *filtering) line(at int64, line []byte, part rematch.Part) (int64, error) {
	// A line shown whole fits an answer by itself; one that does not (in
	// JSON) is shown as the text around each match, as a long line is.
	if part == rematch.Whole && len(line) <= f.a.Limit && (f.room < 0 || matchLen(at, line, nil) <= f.room) {
		hit, err := f.m.Find(line, part)
		if err != nil || hit < 0 {
			return -1, err
		}
		if !f.add(Match{Offset: at, Line: string(line)}) {
			return at, nil
		}
		return -1, nil
	}
	for i := int(max(f.shown-at, 0)); i < len(line); {
		p := part &^ rematch.Start
		if i == 0 {
			p = part
		}
		hit, err := f.m.Find(line[i:], p)
		if err != nil || hit < 0 {
			return -1, err
		}
		hitAt := at + int64(i+hit)
		snip, snipAt, err := f.snippet(hitAt, at, line, part)
		if err != nil {
			return -1, err
		}
		mo := hitAt
		if !f.add(Match{Offset: snipAt, Line: string(snip), MatchOffset: &mo}) {
			return hitAt, nil
		}
		f.cut = true
		// Matches in the text shown are not shown again.
		_, size := utf8.DecodeRune(line[i+hit:])
		f.shown = max(snipAt+int64(len(snip)), hitAt+int64(size))
		i = int(f.shown - at)
	}
	return -1, nil
}

// add adds m to the answer, unless it is full: the first match always
// goes in; another only while the lines shown stay within limit and their
// JSON within room.
func (f *filtering) add(m Match) bool {
	cost := matchLen(m.Offset, []byte(m.Line), m.MatchOffset)
	if len(f.matches) > 0 && (f.used+len(m.Line) > f.a.Limit || (f.room >= 0 && f.spent+cost > f.room)) {
		return false
	}
	f.matches = append(f.matches, m)
	f.used += len(m.Line)
	f.spent += cost
	return true
}

// matchLen bounds the length of a match in JSON, with the comma before it.
func matchLen(offset int64, line []byte, matchOffset *int64) int {
	_, n := fitJSON(line, -1)
	n += len(`,{"offset":,"line":""}`) + len(strconv.FormatInt(offset, 10))
	if matchOffset != nil {
		n += len(`,"matchOffset":`) + len(strconv.FormatInt(*matchOffset, 10))
	}
	return n
}

// matchEnvelope bounds what a match takes in JSON besides its line's
// text: `,{"offset":…,"line":"…","matchOffset":…}` with numbers of up to
// 20 digits.
const matchEnvelope = len(`,{"offset":,"line":"","matchOffset":}`) + 2*20

// snippet returns up to f.snip bytes of whole characters of the line
// around the match at offset hit (a quarter of them before it) and where
// they begin. line is the part of that line in the window, from offset
// at; where it is not the whole line, the rest is read from the store.
func (f *filtering) snippet(hit, at int64, line []byte, part rematch.Part) ([]byte, int64, error) {
	lo, hi := int64(0), int64(-1) // the line's bounds, where known
	if part&rematch.Start != 0 {
		lo = at
	}
	if part&rematch.End != 0 {
		hi = at + int64(len(line))
	}
	s := max(hit-int64(f.snip/4), lo)
	e := s + int64(f.snip)
	if hi >= 0 && e > hi {
		e, s = hi, max(hi-int64(f.snip), lo)
	}
	// The match's first character is shown whole, even when limit is
	// smaller.
	e = max(e, hit+1)
	var b []byte
	if s >= at && e <= at+int64(len(line)) {
		b = line[s-at : min(e+utf8.UTFMax, at+int64(len(line)))-at]
	} else {
		_, data, err := f.r.ReadOutput(f.ctx, f.req.Caller, f.req.Catalog, f.a.ToolCallID, f.a.Stream, s, int(e-s)+utf8.UTFMax)
		if err != nil {
			return nil, 0, readError(err)
		}
		b = data
	}
	h := int(hit - s)
	if h > len(b) {
		return nil, 0, fmt.Errorf("result__read: the output at offset %d ends before the match found there", hit)
	}
	// Other lines read with the snippet are not shown.
	if i := bytes.LastIndexByte(b[:h], '\n'); i >= 0 {
		b, s, h = b[i+1:], s+int64(i+1), h-(i+1)
	}
	if i := bytes.IndexByte(b[h:], '\n'); i >= 0 {
		b = b[:h+i]
	}
	// Whole characters only: from the first that begins in it, to the
	// last that ends within e (or the match's first one).
	for h > 0 && !utf8.RuneStart(b[0]) {
		b, s, h = b[1:], s+1, h-1
	}
	n := min(len(b), int(e-s))
	if _, size := utf8.DecodeRune(b[h:]); n < h+size {
		n = min(len(b), h+size)
	}
	return registry.TrimPartialRune(b[:n]), s, nil
}

func output(info *registry.SpillInfo, a args, next int64) Output {
	out := Output{ToolCallID: a.ToolCallID, Stream: a.Stream, Offset: a.Offset, NextOffset: next}
	if info != nil {
		out.ToolName, out.TotalBytes, out.StoredBytes = info.ToolName, info.TotalBytes, info.StoredBytes
		out.EOF = next >= info.StoredBytes
		switch {
		case a.Offset > info.StoredBytes && info.StoredBytes < info.TotalBytes:
			out.Note = fmt.Sprintf("offset %d is past the end of what was kept: the output was %d bytes, and only the first %d were kept; read from an offset below %d",
				a.Offset, info.TotalBytes, info.StoredBytes, info.StoredBytes)
		case a.Offset > info.StoredBytes:
			out.Note = fmt.Sprintf("offset %d is past the end: the output is %d bytes; read from an offset below %d", a.Offset, info.StoredBytes, info.StoredBytes)
		case out.EOF && info.StoredBytes < info.TotalBytes:
			out.Note = "the output was " + strconv.FormatInt(info.TotalBytes, 10) + " bytes; only the first " +
				strconv.FormatInt(info.StoredBytes, 10) + " were kept (the limit of one kept output, or the total all kept outputs may take, was reached)"
		}
	}
	return out
}

func readError(err error) error {
	var re *registry.Error
	switch {
	case errors.As(err, &re):
		return err
	case errors.Is(err, registry.ErrNotFound):
		return &registry.Error{Code: registry.CodeTool, Message: err.Error(),
			Suggestion: "Check the toolCallId and stream in the marker of the cut output; if it has expired, make the call again."}
	case errors.Is(err, registry.ErrNoSpill):
		return registry.ToolError(err.Error(), "Ask for less output instead, e.g. with head, tail or grep.")
	}
	return err
}

func cmpOr[T comparable](a, b T) T {
	var zero T
	if a != zero {
		return a
	}
	return b
}
