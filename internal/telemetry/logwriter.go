package telemetry

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// LogBufferBytes is how much a BufferedWriter holds before it writes it
// out without waiting for the interval.
const LogBufferBytes = 64 << 10

// LogBacklogBytes bounds what a BufferedWriter holds while its output
// does not take what it writes (a reader that stopped reading a pipe): a
// line that would go past it is dropped, and counted.
const LogBacklogBytes = 1 << 20

// LogFlushTimeout is how long Flush and Close wait for the output to
// take what is held.
const LogFlushTimeout = time.Second

// logLineWait is how long a write waits for its line to be written out
// when the interval is 0, unless the output is known to have stalled.
const logLineWait = 100 * time.Millisecond

// errLogStalled is what Flush and Close return when the output did not
// take what was held within LogFlushTimeout.
var errLogStalled = errors.New("log output did not take the held lines in time")

// BufferedWriter gathers log lines in memory and has one goroutine of
// its own write them out together, every interval and when
// LogBufferBytes are held, so that a busy service makes one write system
// call for many lines instead of one each.
//
// Write never waits for the output: a reader that stops reading (a full
// pipe) or a broken pipe must not stop the calls that log, readiness or
// a drain. While the output does not take what is written, lines are
// held up to LogBacklogBytes; after that whole lines are dropped until
// the output takes the held ones, counted in
// toolsvc_log_lines_dropped_total (a BufferedWriter is that collector;
// NewSpanWriter's counts spans instead), and the first line written after
// says how many were lost. Lines that a
// failed write lost (EPIPE) are counted the same way.
//
// Close writes out the rest, waiting at most LogFlushTimeout; the service
// closes it last when it stops, so no line logged before that is lost
// unless the output stalls (a process killed with SIGKILL loses at most
// one interval's lines).
type BufferedWriter struct {
	w        io.Writer
	interval time.Duration
	desc     *prometheus.Desc
	tellLost bool          // write a line saying how many lines were lost
	kick     chan struct{} // the writer goroutine should write out now
	stop     chan struct{}
	done     chan struct{}

	mu       sync.Mutex
	buf      []byte // the lines held
	lines    uint64 // how many lines buf holds
	spare    []byte // the buffer the writer goroutine gave back
	kicked   bool   // kick has been sent and not yet taken
	stalled  bool   // with interval 0, a write waited logLineWait for the output in vain
	dropping bool   // lines are dropped until the writer goroutine takes buf
	// unreported counts lines lost since the last line saying so was
	// written.
	unreported uint64
	appended   uint64        // bytes ever held
	written    uint64        // of appended, those the output has had
	progress   chan struct{} // closed (and replaced) after each write-out
	err        error         // the last write error, returned by Flush
	closed     bool
	finished   bool // the writer goroutine has written everything and stopped

	full   atomic.Uint64 // lines dropped because LogBacklogBytes were held
	failed atomic.Uint64 // lines lost to failed writes
}

// NewBufferedWriter returns a writer that writes to w every interval and
// when LogBufferBytes are held. With an interval of 0 each line is
// written out at once: Write returns when the writer goroutine has
// written it (with the lines other goroutines wrote meanwhile), or after
// logLineWait when the output does not take it, and at once while the
// output stays stalled.
func NewBufferedWriter(w io.Writer, interval time.Duration) *BufferedWriter {
	return newBufferedWriter(w, interval, prometheus.NewDesc("toolsvc_log_lines_dropped_total",
		"Log lines that never reached the log's output: reason=full when it did not take them in time (the log buffer was full), error when writing them failed (its reader went away).",
		[]string{"reason"}, nil), true)
}

// NewSpanWriter returns the writer the console span exporter writes to:
// a BufferedWriter over w (stdout) that writes each span out at once, as
// NewBufferedWriter does with an interval of 0, so that a span ending
// never waits for a reader of stdout that stopped reading, not even at
// shutdown. Each write of the exporter is one span, one line, held or
// dropped whole. The spans it drops are counted in
// toolsvc_console_spans_dropped_total (it is that collector) and nothing
// else is written among them: every line of w stays one span.
func NewSpanWriter(w io.Writer) *BufferedWriter {
	return newBufferedWriter(w, 0, prometheus.NewDesc("toolsvc_console_spans_dropped_total",
		"Spans of the console exporter that never reached stdout: reason=full when it did not take them in time (1 MiB held), error when writing them failed (its reader went away).",
		[]string{"reason"}, nil), false)
}

// newBufferedWriter returns a BufferedWriter counting its drops in desc;
// tellLost says whether the first line written after a drop says how
// many lines were lost.
func newBufferedWriter(w io.Writer, interval time.Duration, desc *prometheus.Desc, tellLost bool) *BufferedWriter {
	b := &BufferedWriter{
		w: w, interval: interval, desc: desc, tellLost: tellLost,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		buf: make([]byte, 0, LogBufferBytes), spare: make([]byte, 0, LogBufferBytes),
		progress: make(chan struct{}),
	}
	go b.writeOutEvery(interval)
	return b
}

// writeOutEvery is the writer goroutine: the only one that writes to w
// until Close has written out the rest.
func (b *BufferedWriter) writeOutEvery(interval time.Duration) {
	defer close(b.done)
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-tick:
		case <-b.kick:
		case <-b.stop:
			for b.writeOut() {
			}
			return
		}
		b.writeOut()
	}
}

// writeOut writes what is held to w, and reports whether it held
// anything; once Close has stopped the writer goroutine and nothing is
// held, later lines go straight to w.
func (b *BufferedWriter) writeOut() bool {
	b.mu.Lock()
	b.kicked = false
	if len(b.buf) == 0 {
		b.finished = b.closed
		b.mu.Unlock()
		return false
	}
	batch, lines, upTo, lost := b.buf, b.lines, b.appended, b.unreported
	if !b.tellLost {
		lost, b.unreported = 0, 0
	}
	b.buf, b.spare, b.lines, b.dropping = b.spare[:0], nil, 0, false
	b.mu.Unlock()

	if lost > 0 {
		batch = appendLostLine(batch, lost)
	}
	_, err := b.w.Write(batch)

	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.err = err
		b.failed.Add(lines)
		b.unreported += lines
	} else {
		b.unreported -= lost
	}
	b.written, b.stalled = upTo, false
	if cap(batch) <= 2*LogBacklogBytes { // not one huge line's
		b.spare = batch[:0]
	} else {
		b.spare = make([]byte, 0, LogBufferBytes)
	}
	close(b.progress)
	b.progress = make(chan struct{})
	return true
}

// appendLostLine appends to batch a line saying lost lines were lost, in
// the format of the batch's lines: JSON, or slog's text.
func appendLostLine(batch []byte, lost uint64) []byte {
	now := time.Now()
	const msg = "log lines dropped: the log's output did not take them in time, or writing them failed"
	if len(batch) > 0 && batch[0] != '{' {
		return fmt.Appendf(batch, "time=%s level=WARN msg=%q lines=%d\n", now.Format("2006-01-02T15:04:05.000Z07:00"), msg, lost)
	}
	return fmt.Appendf(batch, `{"time":%q,"level":"WARN","msg":%q,"lines":%d}`+"\n", now.Format(time.RFC3339Nano), msg, lost)
}

// Write holds p (one log line) for the writer goroutine and returns at
// once; when LogBacklogBytes are held, p is dropped and counted. A line
// larger than that is held alone. After Close has written out the rest,
// every write goes straight to the underlying writer.
func (b *BufferedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	if b.finished {
		defer b.mu.Unlock()
		n, err := b.w.Write(p)
		if err != nil {
			b.failed.Add(1)
		}
		return n, err
	}
	// Once one line is dropped the rest are, until the held lines go
	// out: the log then has one gap, with the line that tells of it.
	if b.dropping || len(b.buf) > 0 && len(b.buf)+len(p) > LogBacklogBytes {
		b.dropping = true
		b.unreported++
		b.full.Add(1)
		b.mu.Unlock()
		return len(p), nil
	}
	before := len(b.buf)
	b.buf = append(b.buf, p...)
	b.lines++
	b.appended += uint64(len(p))
	if b.interval <= 0 || len(b.buf) >= LogBufferBytes {
		b.kickLocked()
	}
	crossed := len(b.buf)/LogBufferBytes > before/LogBufferBytes
	waitOut := b.interval <= 0 && !b.stalled
	target := b.appended
	b.mu.Unlock()
	if waitOut {
		// "At once" means the line is out when Write returns, as with a
		// write of its own (tests read the log right after a call),
		// unless the output stalls: then this write waits logLineWait,
		// and later ones not at all until the output takes a write.
		if b.wait(target, logLineWait) == errLogStalled {
			b.mu.Lock()
			b.stalled = true
			b.mu.Unlock()
		}
	} else if crossed {
		// Another LogBufferBytes held: let the writer goroutine, which
		// the kick queued on this P, run now rather than when the
		// scheduler preempts a caller that keeps the CPU busy, which
		// can be after the backlog is full.
		runtime.Gosched()
	}
	return len(p), nil
}

func (b *BufferedWriter) kickLocked() {
	if !b.kicked {
		b.kicked = true
		select {
		case b.kick <- struct{}{}:
		default: // a tick took the write-out the last kick asked for
		}
	}
}

// Flush has what is held written out, and waits for that at most
// LogFlushTimeout. It returns the last write error, or an error when the
// output did not take the lines in time.
func (b *BufferedWriter) Flush() error {
	b.mu.Lock()
	target := b.appended
	if !b.finished && b.written < target {
		b.kickLocked()
	}
	b.mu.Unlock()
	return b.wait(target, LogFlushTimeout)
}

// wait waits, at most timeout, until the output has had the first
// target bytes ever held.
func (b *BufferedWriter) wait(target uint64, timeout time.Duration) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.finished || b.written >= target {
			err := b.err
			b.mu.Unlock()
			return err
		}
		progress := b.progress
		b.mu.Unlock()
		select {
		case <-progress:
		case <-timer.C:
			return errLogStalled
		}
	}
}

// Close stops the periodic write-out and writes out what is held,
// waiting for that at most LogFlushTimeout; later writes go straight to
// the underlying writer once the held lines are out.
func (b *BufferedWriter) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	close(b.stop)
	timer := time.NewTimer(LogFlushTimeout)
	defer timer.Stop()
	select {
	case <-b.done:
	case <-timer.C:
		return errLogStalled
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Describe implements prometheus.Collector.
func (b *BufferedWriter) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

// Collect implements prometheus.Collector: toolsvc_log_lines_dropped_total.
func (b *BufferedWriter) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.CounterValue, float64(b.full.Load()), "full")
	ch <- prometheus.MustNewConstMetric(b.desc, prometheus.CounterValue, float64(b.failed.Load()), "error")
}
