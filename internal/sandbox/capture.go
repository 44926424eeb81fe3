package sandbox

import (
	"io"
	"sync"
	"unicode/utf8"
)

// Capture is an io.Writer that keeps the first and the last bytes written
// to it, at most limit in all, and counts the rest, so memory stays
// O(limit) whatever a program prints. With a spill set (SpillTo), the
// whole stream also goes there from the moment it outgrows the limit.
// It is safe for concurrent use.
type Capture struct {
	mu    sync.Mutex
	limit int
	// head keeps the first bytes (at most hcap); ring the last ones (at
	// most tcap), written at rpos once full.
	head       []byte
	hcap       int
	ring       []byte
	tcap, rpos int
	total      int64

	open func() io.Writer
	sink io.Writer
}

// NewCapture returns a capture that keeps the first limit bytes.
func NewCapture(limit int) *Capture {
	limit = max(limit, 0)
	return &Capture{limit: limit, hcap: limit}
}

// NewHeadTail returns a capture that keeps the first head bytes and the
// last limit-head bytes (head is clamped to [0, limit]).
func NewHeadTail(limit, head int) *Capture {
	limit = max(limit, 0)
	head = min(max(head, 0), limit)
	return &Capture{limit: limit, hcap: head, tcap: limit - head}
}

// SpillTo sets open, called once when the stream first outgrows the
// limit; the writer it returns (nil: none) receives everything written so
// far and everything after, so it holds the whole stream. Call it before
// the first Write.
func (c *Capture) SpillTo(open func() io.Writer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open = open
}

// Write keeps what fits and drops the rest; it never fails, so a program
// writing a flood is not stopped by a broken pipe.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if c.sink == nil && c.open != nil && c.total > int64(c.limit) {
		// Until now nothing was dropped: head and ring hold the stream.
		open := c.open
		c.open = nil
		if w := open(); w != nil {
			c.sink = w
			_, _ = w.Write(c.head)
			_, _ = w.Write(c.ring)
		}
	}
	if c.sink != nil {
		_, _ = c.sink.Write(p)
	}
	rest := p
	if room := c.hcap - len(c.head); room > 0 {
		n := min(room, len(rest))
		if c.head == nil {
			c.head = make([]byte, 0, min(c.hcap, max(n, 512)))
		}
		c.head = append(c.head, rest[:n]...)
		rest = rest[n:]
	}
	c.keepTail(rest)
	return len(p), nil
}

// keepTail puts p at the end of the ring.
func (c *Capture) keepTail(p []byte) {
	if c.tcap == 0 || len(p) == 0 {
		return
	}
	if len(p) >= c.tcap {
		c.ring = append(c.ring[:0], p[len(p)-c.tcap:]...)
		c.rpos = 0
		return
	}
	if room := c.tcap - len(c.ring); room > 0 {
		n := min(room, len(p))
		c.ring = append(c.ring, p[:n]...)
		p = p[n:]
	}
	for len(p) > 0 {
		n := copy(c.ring[c.rpos:], p)
		p = p[n:]
		c.rpos = (c.rpos + n) % c.tcap
	}
}

// Parts returns copies of the kept beginning and end of the stream and
// how many bytes between them were dropped. When something was dropped,
// a UTF-8 sequence cut at either side of the gap is removed (and
// counted as omitted).
func (c *Capture) Parts() (head, tail []byte, omitted int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	head = append([]byte(nil), c.head...)
	tail = make([]byte, 0, len(c.ring))
	tail = append(tail, c.ring[c.rpos:]...)
	tail = append(tail, c.ring[:c.rpos]...)
	if c.total > int64(len(c.head)+len(c.ring)) {
		head = trimPartialRune(head)
		tail = trimLeadingContinuation(tail)
	}
	return head, tail, c.total - int64(len(head)+len(tail))
}

// Bytes returns a copy of what was kept, the beginning then the end. When
// something was dropped, an incomplete UTF-8 sequence at a cut is removed.
func (c *Capture) Bytes() []byte {
	head, tail, _ := c.Parts()
	return append(head, tail...)
}

// String returns Bytes as a string.
func (c *Capture) String() string { return string(c.Bytes()) }

// Truncated reports whether anything was dropped.
func (c *Capture) Truncated() bool { return c.Dropped() > 0 }

// Dropped returns the number of bytes not kept.
func (c *Capture) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total - int64(len(c.head)+len(c.ring))
}

// Total returns the number of bytes written.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// trimPartialRune drops a trailing, incomplete UTF-8 sequence (at most
// three bytes), leaving complete or invalid-anyway bytes alone. It is
// registry.TrimPartialRune, which this package, importing nothing of
// toolsvc's, does not reach.
func trimPartialRune(b []byte) []byte {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if c < 0x80 {
			return b // ASCII: nothing pending
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// trimLeadingContinuation drops the continuation bytes (at most three)
// a cut left at the start of b.
func trimLeadingContinuation(b []byte) []byte {
	for i := 0; i < 3 && len(b) > 0 && !utf8.RuneStart(b[0]); i++ {
		b = b[1:]
	}
	return b
}
