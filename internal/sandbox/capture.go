package sandbox

import (
	"sync"
	"unicode/utf8"
)

// Capture is an io.Writer that keeps the first Limit bytes written to it
// and counts the rest, so memory stays O(limit) whatever a program prints.
// It is safe for concurrent use.
type Capture struct {
	mu      sync.Mutex
	limit   int
	buf     []byte
	dropped int64
}

// NewCapture returns a capture that keeps at most limit bytes.
func NewCapture(limit int) *Capture {
	return &Capture{limit: max(limit, 0)}
}

// Write keeps what fits and drops the rest; it never fails, so a program
// writing a flood is not stopped by a broken pipe.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.limit - len(c.buf)
	if room > 0 {
		n := min(room, len(p))
		if need := len(c.buf) + n; need > cap(c.buf) {
			// Grow by doubling, but never past the limit.
			grown := make([]byte, len(c.buf), min(c.limit, max(need, 2*cap(c.buf), 512)))
			copy(grown, c.buf)
			c.buf = grown
		}
		c.buf = append(c.buf, p[:n]...)
		c.dropped += int64(len(p) - n)
	} else {
		c.dropped += int64(len(p))
	}
	return len(p), nil
}

// Bytes returns a copy of what was kept. When something was dropped, an
// incomplete UTF-8 sequence at the cut is removed.
func (c *Capture) Bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	if c.dropped > 0 {
		b = trimPartialRune(b)
	}
	return append([]byte(nil), b...)
}

// String returns Bytes as a string.
func (c *Capture) String() string { return string(c.Bytes()) }

// Truncated reports whether anything was dropped.
func (c *Capture) Truncated() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped > 0
}

// Dropped returns the number of bytes not kept.
func (c *Capture) Dropped() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Total returns the number of bytes written.
func (c *Capture) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(len(c.buf)) + c.dropped
}

// trimPartialRune drops a trailing, incomplete UTF-8 sequence (at most
// three bytes), leaving complete or invalid-anyway bytes alone.
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
