package telemetry

import (
	"io"
	"sync"
	"time"
)

// LogBufferBytes bounds what a BufferedWriter holds: a write that would
// go past it first writes out what is held.
const LogBufferBytes = 64 << 10

// BufferedWriter gathers log lines and writes them out together, every
// interval and when LogBufferBytes are held, so that a busy service makes
// one write system call for many lines instead of one each. Close writes
// out the rest; the service closes it last when it stops, so no line
// logged before that is lost (a process killed with SIGKILL loses at most
// one interval's lines).
type BufferedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	err    error // the last write error, returned by Flush
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// NewBufferedWriter returns a writer that writes to w every interval
// (which must be positive) and when its buffer is full.
func NewBufferedWriter(w io.Writer, interval time.Duration) *BufferedWriter {
	b := &BufferedWriter{w: w, buf: make([]byte, 0, LogBufferBytes), stop: make(chan struct{}), done: make(chan struct{})}
	go b.flushEvery(interval)
	return b
}

func (b *BufferedWriter) flushEvery(interval time.Duration) {
	defer close(b.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = b.Flush()
		case <-b.stop:
			return
		}
	}
}

// Write holds p (one log line) until the next flush. A line larger than
// the buffer is written through at once; after Close every write is.
func (b *BufferedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return b.w.Write(p)
	}
	if len(b.buf)+len(p) > cap(b.buf) {
		b.flushLocked()
		if len(p) > cap(b.buf) {
			return b.w.Write(p)
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes out what is held and returns the last write error.
func (b *BufferedWriter) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.flushLocked()
	return b.err
}

func (b *BufferedWriter) flushLocked() {
	if len(b.buf) == 0 {
		return
	}
	if _, err := b.w.Write(b.buf); err != nil {
		b.err = err
	}
	b.buf = b.buf[:0]
}

// Close stops the periodic flush and writes out what is held; later
// writes go straight to the underlying writer.
func (b *BufferedWriter) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.stop)
	b.flushLocked()
	err := b.err
	b.mu.Unlock()
	<-b.done
	return err
}
