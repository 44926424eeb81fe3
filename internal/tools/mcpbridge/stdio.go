package mcpbridge

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// stream is what the service learns, while one session with a stdio
// server lasts, about what the server writes: how its own messages are
// paced, and the first thing it wrote that is not a JSON-RPC message.
type stream struct {
	pace *pacer
	// drops paces the notifications that are dropped unread by the SDK
	// (see maxDroppedMessages).
	drops *pacer
	out   *lineRecorder
	// noted logs a bad message once it is found.
	noted func(*notJSONRPCError)

	mu  sync.Mutex
	bad *notJSONRPCError
	// failed says that reading failed: the session has ended.
	failed bool
}

// read checks an error of the connection's Read: one that says the server
// wrote something that is not a JSON-RPC message is recorded (the first
// one only: the session ends with it) and returned as a notJSONRPCError,
// which says so in plain words; any other error is returned as it is.
func (s *stream) read(err error) error {
	if s == nil || err == nil {
		return err
	}
	s.mu.Lock()
	s.failed = true
	s.mu.Unlock()
	what, ok := notJSONRPC(err)
	if !ok {
		return err
	}
	bad := &notJSONRPCError{what: what, raw: err}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		bad.quote, bad.cut = s.out.lineAt(se.Offset - 1)
	} else if what == whatTrailing {
		bad.quote, bad.cut = s.out.lineAt(-1)
	}
	s.mu.Lock()
	first := s.bad == nil
	if first {
		s.bad = bad
	}
	s.mu.Unlock()
	if first && s.noted != nil {
		s.noted(bad)
	}
	return bad
}

// readFailed reports whether reading the server's output failed.
func (s *stream) readFailed() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// badMessage returns the first thing the server wrote that is not a
// JSON-RPC message, or nil.
func (s *stream) badMessage() *notJSONRPCError {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bad
}

// behind reports whether reading was held back by either pace within
// behindWindow of now (see pacer.behind).
func (s *stream) behind(now time.Time) bool {
	return s.pace.behind(now) || s.drops != nil && s.drops.behind(now)
}

// lastLine returns the start of the last line the server wrote, as
// lineRecorder.lineAt quotes it.
func (s *stream) lastLine() string {
	if s == nil {
		return ""
	}
	quote, _ := s.out.lineAt(-1)
	return quote
}

// explain returns why a session ended: what the server wrote that is
// not a JSON-RPC message, if it did, rather than err, the SDK's account,
// which quotes the JSON parser ("ping: connection closed: calling
// \"ping\": client is closing: invalid character 'L' looking for
// beginning of value").
func (s *stream) explain(err error) error {
	if bad := s.badMessage(); bad != nil {
		return bad
	}
	return err
}

// What a server wrote that is not a JSON-RPC message.
const (
	whatSyntax     = "a line that is not JSON"
	whatTrailing   = "a line with more than one JSON value"
	whatNotMessage = "JSON that is not a JSON-RPC 2.0 message"
	whatDeep       = "a message nested deeper than " + maxDepthText + " levels (the most toolsvc reads)"
)

// notJSONRPC reports whether err, from the SDK's reading of a stdio
// server's output, says the server wrote something other than JSON-RPC
// messages, one a line, and what. The SDK gives the JSON parser's error
// for text that is not JSON, a *jsonrpc.Error (parse error, invalid
// request) for some JSON that is not a message, and text only for the
// rest.
func notJSONRPC(err error) (string, bool) {
	if _, deep := tooDeep(err); deep {
		// Valid JSON, perhaps, but more deeply nested than the SDK (or
		// the JSON parser, past 10,000 levels) reads.
		return whatDeep, true
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return whatSyntax, true
	}
	var we *jsonrpc.Error
	if errors.As(err, &we) && (we.Code == jsonrpc.CodeParseError || we.Code == jsonrpc.CodeInvalidRequest) {
		return whatNotMessage, true
	}
	s := err.Error()
	if strings.Contains(s, "invalid trailing data at the end of stream") {
		return whatTrailing, true
	}
	for _, t := range []string{"unmarshaling jsonrpc message", "invalid message version tag", "empty batch", "JSON-RPC batching is not supported", "duplicate message ID"} {
		if strings.Contains(s, t) {
			return whatNotMessage, true
		}
	}
	return "", false
}

// notJSONRPCError says that a stdio server wrote something that is not a
// JSON-RPC message, quoting the start of the line when it is known. Its
// text goes to the server's status and the log, what it says the server
// wrote (wrote) to the model with the server's name; the parser's own
// error (raw) is only logged.
type notJSONRPCError struct {
	what string
	// quote is the start of the line (at most maxQuote bytes), cut says
	// whether the line was longer.
	quote string
	cut   bool
	raw   error
}

// maxQuote bounds what is quoted of a line a server wrote that is not a
// JSON-RPC message: enough to recognise a log line or a banner, too little
// to carry much of whatever else the server printed.
const maxQuote = 64

// Error is what the server's status and the log say.
func (e *notJSONRPCError) Error() string {
	if e.what == whatDeep {
		return "the server " + e.wrote("")
	}
	return "the server " + e.wrote("") + "; an MCP server over stdio may write only JSON-RPC messages there, one a line (logs belong on standard error)"
}

// wrote says what the server wrote, then aside (which says what may go
// there: not said of a message too deep to read), then the start of the
// line.
func (e *notJSONRPCError) wrote(aside string) string {
	if e.what == whatDeep {
		aside = ""
	}
	s := "wrote " + e.what + " to its standard output" + aside
	if e.quote != "" {
		s += fmt.Sprintf(": %q", e.quote)
		if e.cut {
			s += "…"
		}
	}
	return s
}

func (e *notJSONRPCError) Unwrap() error { return e.raw }

// commandTransport is mcp.CommandTransport, with the server's standard
// output read through a lineRecorder, so that what a server writes that
// is not a JSON-RPC message can be quoted: the SDK's error says only
// where the JSON parser stopped. Framing and batches stay the SDK's
// (mcp.IOTransport); closing is CommandTransport's: close the server's
// stdin, wait terminate, SIGTERM, wait, SIGKILL.
type commandTransport struct {
	cmd       *exec.Cmd
	terminate time.Duration
	out       *lineRecorder
}

func (t *commandTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	stdout, err := t.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := t.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := t.cmd.Start(); err != nil {
		return nil, err
	}
	t.out.r = bufio.NewReaderSize(stdout, recorderBuffer)
	// The connection is closed by closing the server's stdin, not its
	// stdout, as CommandTransport does.
	return (&mcp.IOTransport{Reader: io.NopCloser(t.out), Writer: &serverInput{stdin: stdin, cmd: t.cmd, terminate: t.terminate}}).Connect(ctx)
}

// serverInput is a stdio server's stdin; closing it ends the server.
type serverInput struct {
	stdin     io.WriteCloser
	cmd       *exec.Cmd
	terminate time.Duration
}

func (w *serverInput) Write(p []byte) (int, error) { return w.stdin.Write(p) }

// Close closes the server's stdin and waits for it to exit, sending
// SIGTERM after terminate and SIGKILL after as long again, as the MCP
// specification asks of a client ending a stdio session (and as
// mcp.CommandTransport does).
func (w *serverInput) Close() error {
	if err := w.stdin.Close(); err != nil {
		return fmt.Errorf("closing stdin: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- w.cmd.Wait() }()
	wait := func() (error, bool) {
		t := time.NewTimer(w.terminate)
		defer t.Stop()
		select {
		case err := <-exited:
			return err, true
		case <-t.C:
			return nil, false
		}
	}
	if err, ok := wait(); ok {
		return err
	}
	if w.cmd.Process.Signal(syscall.SIGTERM) == nil {
		if err, ok := wait(); ok {
			return err
		}
	}
	if err := w.cmd.Process.Kill(); err != nil {
		return err
	}
	if err, ok := wait(); ok {
		return err
	}
	return errors.New("unresponsive subprocess")
}

// recorderBuffer is the buffer a lineRecorder reads a server's output
// into. It is small: what it holds is read ahead of the pace, and a
// server's answers wait behind it (64 KiB held 700 more notifications of
// a server that floods, 7 s more at the pace, and its pings then timed
// out); a longer line comes a buffer at a time.
const recorderBuffer = 4 << 10

// lineRecorder passes a stdio server's output on to the SDK's reader at
// most a line at a time, and remembers the start of the last two lines it
// passed on and where they began. The SDK's JSON decoder then never reads
// past the line it is decoding, and the offset in the stream where it
// fails (json.SyntaxError.Offset) falls in one of those two lines.
type lineRecorder struct {
	// r, pending and pendErr are the reading goroutine's: Read is called
	// by one goroutine, and must not hold mu while it waits for the
	// server.
	r       *bufio.Reader
	pending []byte // of the current slice of r, not yet passed on
	pendErr error  // to return once pending is passed on
	// drops paces the lines dropped (see Read), dropBatch at a time;
	// nil drops none. dropped counts those not yet paced.
	drops   *pacer
	dropped int
	// lineStart says that the next slice of r starts a line.
	lineStart bool

	mu        sync.Mutex
	pos       int64 // bytes passed on
	atStart   bool  // the next byte passed on starts a line
	cur, prev recordedLine
}

// recordedLine is the start of one line a server wrote.
type recordedLine struct {
	start int64
	head  []byte // at most maxQuote+headSlack bytes
	bytes int64  // bytes passed on of it, its newline included
	valid bool
}

// headSlack is what a recorded line keeps beyond maxQuote: enough for
// leading spaces and to tell a line of maxQuote bytes from a longer one.
const headSlack = 8

func newLineRecorder() *lineRecorder { return &lineRecorder{atStart: true, lineStart: true} }

func (l *lineRecorder) Read(p []byte) (int, error) {
	for len(l.pending) == 0 {
		if err := l.pendErr; err != nil {
			l.pendErr = nil
			return 0, err
		}
		// The slice is r's until r is read again, which is only once it
		// has all been passed on.
		line, err := l.r.ReadSlice('\n')
		whole := l.lineStart && err == nil
		l.lineStart = err == nil
		if errors.Is(err, bufio.ErrBufferFull) {
			err = nil // the rest of a long line comes next
		}
		if whole && l.drops != nil && unasked(line) {
			// Not passed on: the SDK would spend 30-60 µs decoding it
			// (see maxDroppedMessages), to do nothing with it. A wait of
			// its own for each would cost more than the drop.
			if l.dropped++; l.dropped == dropBatch {
				l.dropped = 0
				_ = l.drops.wait(context.Background(), nil, dropBatch)
			}
			continue
		}
		if len(line) == 0 {
			return 0, err
		}
		l.pending, l.pendErr = line, err
	}
	n := copy(p, l.pending)
	if n > 0 {
		l.note(l.pending[:n])
		l.pending = l.pending[n:]
	}
	return n, nil
}

// dropBatch is how many dropped lines are paced at once.
const dropBatch = 100

// unasked reports whether line, a whole line a stdio server wrote, is a
// progress notification. toolsvc asks for no progress (its requests
// carry no progressToken), so such a notification is for no call in
// flight: the SDK would decode it and drop it. Lines that do not name the
// method as it is usually written are left to the SDK.
func unasked(line []byte) bool {
	if !bytes.Contains(line, []byte(`"notifications/progress"`)) {
		return false
	}
	var msg struct {
		Version string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
	}
	return json.Unmarshal(line, &msg) == nil && msg.Version == "2.0" && msg.ID == nil && msg.Method == "notifications/progress"
}

// note records b, the bytes passed on next.
func (l *lineRecorder) note(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.atStart {
		l.prev = l.cur
		l.cur = recordedLine{start: l.pos, valid: true}
		l.atStart = false
	}
	if room := maxQuote + headSlack - len(l.cur.head); room > 0 {
		l.cur.head = append(l.cur.head, b[:min(room, len(b))]...)
	}
	l.cur.bytes += int64(len(b))
	l.pos += int64(len(b))
	l.atStart = b[len(b)-1] == '\n'
}

// lineAt returns the start of the line that holds the byte at offset in
// the stream (offset < 0: the last line passed on), without its line
// ending and surrounding spaces, cut at maxQuote bytes on a character
// boundary, and whether the line is longer than that. It returns "" when
// that line is no longer recorded.
func (l *lineRecorder) lineAt(offset int64) (quote string, cut bool) {
	if l == nil {
		return "", false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.cur
	if offset >= 0 && offset < l.cur.start {
		line = l.prev
	}
	if !line.valid || (offset >= 0 && offset < line.start) {
		return "", false
	}
	text := strings.TrimSpace(string(line.head))
	quote = registry.Clip(text, maxQuote)
	whole := int64(len(line.head)) == line.bytes && bytes.HasSuffix(line.head, []byte{'\n'})
	return quote, !whole || len(quote) < len(text)
}
