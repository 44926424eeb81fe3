package telemetry

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// lockedBuffer counts the writes it gets; while failing is set, each
// write fails with it instead.
type lockedBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	writes  int
	failing error
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing != nil {
		return 0, l.failing
	}
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failing = err
}

// eventually fails t unless cond holds within 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(time.Millisecond)
	}
}

// dropped is toolsvc_log_lines_dropped_total by reason, gathered by a
// pedantic registry (which also checks Describe against Collect).
func dropped(t *testing.T, b *BufferedWriter) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(b)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "toolsvc_log_lines_dropped_total" {
			t.Errorf("unexpected metric %s", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestBufferedWriterGathersAndCloses: lines are held (an hour's
// interval never fires here) until LogBufferBytes are, then written out
// together, and the rest on Close; a write after Close goes straight
// through, and a line larger than the backlog is written whole.
func TestBufferedWriterGathersAndCloses(t *testing.T) {
	out := &lockedBuffer{}
	b := NewBufferedWriter(out, time.Hour)
	line := strings.Repeat("x", 99) + "\n"
	n := LogBufferBytes/len(line) + 1
	for range n - 1 {
		if _, err := b.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if out.String() != "" {
		t.Fatalf("%d bytes written out before LogBufferBytes were held", len(out.String()))
	}
	_, _ = b.Write([]byte(line))
	eventually(t, "LogBufferBytes held were not written out", func() bool { return len(out.String()) == n*len(line) })
	if out.writes != 1 {
		t.Errorf("%d lines written out in %d writes, want 1", n, out.writes)
	}
	_, _ = b.Write([]byte("last\n"))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(out.String()); got != n*len(line)+len("last\n") {
		t.Errorf("after Close: %d bytes out, want %d", got, n*len(line)+len("last\n"))
	}
	_, _ = b.Write([]byte("late\n"))
	if !strings.HasSuffix(out.String(), "late\n") {
		t.Error("a write after Close was held")
	}
	big := strings.Repeat("y", LogBacklogBytes+1)
	b2 := NewBufferedWriter(out, time.Hour)
	_, _ = b2.Write([]byte(big))
	_ = b2.Close()
	if !strings.HasSuffix(out.String(), big) {
		t.Error("a line larger than the backlog was not written")
	}
	if d := dropped(t, b2); d["full"] != 0 {
		t.Errorf("dropped: %v", d)
	}
}

// TestBufferedWriterFlushesOnInterval: a held line is written out by the
// periodic flush, without Close.
func TestBufferedWriterFlushesOnInterval(t *testing.T) {
	out := &lockedBuffer{}
	b := NewBufferedWriter(out, time.Millisecond)
	defer b.Close()
	_, _ = b.Write([]byte("one\n"))
	eventually(t, "the line was not written out by the periodic flush", func() bool { return out.String() == "one\n" })
}

// TestBufferedWriterWritesAtOnceWithoutInterval: with an interval of 0 a
// line is out when Write returns, as the tests that read the log right
// after a call need.
func TestBufferedWriterWritesAtOnceWithoutInterval(t *testing.T) {
	out := &lockedBuffer{}
	b := NewBufferedWriter(out, 0)
	defer b.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				line := fmt.Sprintf("g%d line %d\n", g, i)
				_, _ = b.Write([]byte(line))
				if !strings.Contains(out.String(), line) {
					t.Errorf("%q is not out when Write returns", line)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestBufferedWriterNeverWaitsForAStalledOutput: the log's reader stops
// reading (an io.Pipe nobody reads blocks its writer forever, as a full
// pipe blocks write(2)). Write still returns at once, holding up to
// LogBacklogBytes and dropping whole lines after that, counted; Flush
// and Close give up at their deadline. When the reader reads again, the
// held lines come out, then one line that says how many were dropped.
func TestBufferedWriterNeverWaitsForAStalledOutput(t *testing.T) {
	for _, interval := range []time.Duration{100 * time.Millisecond, 0} {
		t.Run("interval="+interval.String(), func(t *testing.T) {
			r, w := io.Pipe()
			defer r.Close()
			b := NewBufferedWriter(w, interval)
			line := `{"msg":"tool call","n":` + strings.Repeat("1", 400) + "}\n"
			const goroutines = 4
			perGoroutine := 3 * LogBacklogBytes / len(line) / goroutines
			total := goroutines * perGoroutine
			var mu sync.Mutex
			var slowest time.Duration
			start := time.Now()
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for range perGoroutine {
						t0 := time.Now()
						if n, err := b.Write([]byte(line)); n != len(line) || err != nil {
							t.Errorf("Write: %d, %v", n, err)
						}
						mu.Lock()
						slowest = max(slowest, time.Since(t0))
						mu.Unlock()
					}
				})
			}
			wrote := make(chan struct{})
			go func() {
				wg.Wait()
				close(wrote)
			}()
			select {
			case <-wrote:
			case <-time.After(10 * time.Second):
				t.Fatalf("%d writes to a stalled output had not returned after 10s", total)
			}
			// The first write with an interval of 0 waits logLineWait
			// for the output; no other waits at all.
			if elapsed := time.Since(start); slowest > logLineWait+time.Second || elapsed > 5*time.Second {
				t.Errorf("%d writes to a stalled output took %s, the slowest %s", total, elapsed, slowest)
			}
			full := int(dropped(t, b)["full"])
			if full < total/3 || full >= total {
				t.Errorf("%d of %d lines dropped, want the ones past the backlog of %d bytes", full, total, LogBacklogBytes)
			}
			t0 := time.Now()
			if err := b.Flush(); err != errLogStalled {
				t.Errorf("Flush with the output stalled: %v", err)
			}
			if err := b.Close(); err != errLogStalled {
				t.Errorf("Close with the output stalled: %v", err)
			}
			if d := time.Since(t0); d > 2*LogFlushTimeout+time.Second {
				t.Errorf("Flush and Close took %s with a deadline of %s each", d, LogFlushTimeout)
			}
			if _, err := b.Write([]byte(line)); err != nil { // after a Close that gave up: still held, or dropped
				t.Error(err)
			}

			// The reader reads again: what was held comes out, and the
			// line that tells of the gap.
			out := &lockedBuffer{}
			go func() { _, _ = io.Copy(out, r) }()
			notice := `"level":"WARN","msg":"log lines dropped: the log's output did not take them in time, or writing them failed","lines":`
			eventually(t, "no line tells of the dropped lines", func() bool { return strings.Contains(out.String(), notice) })
			_ = w.Close()
			full = int(dropped(t, b)["full"])
			got := out.String()
			if n := strings.Count(got, line); n != total+1-full {
				t.Errorf("%d lines came out, want the %d written less the %d dropped", n, total+1, full)
			}
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			if last, want := lines[len(lines)-1], fmt.Sprintf("%s%d}", notice, full); !strings.HasPrefix(last, `{"time":"`) || !strings.HasSuffix(last, want) {
				t.Errorf("the last line is\n%s\nwant one ending\n%s", last, want)
			}
			if d := dropped(t, b); d["error"] != 0 {
				t.Errorf("dropped: %v", d)
			}
		})
	}
}

// TestBufferedWriterCountsLinesAWriteLost: when writing fails (the
// reader went away: EPIPE), the lines of that write are counted as
// lost, and once writing works again the first write out says how many
// were, in the lines' format (here slog's text).
func TestBufferedWriterCountsLinesAWriteLost(t *testing.T) {
	out := &lockedBuffer{}
	b := NewBufferedWriter(out, time.Hour)
	out.fail(syscall.EPIPE)
	for i := range 3 {
		_, _ = fmt.Fprintf(b, "time=now level=INFO msg=%d\n", i)
	}
	if err := b.Flush(); err != syscall.EPIPE {
		t.Errorf("Flush: %v, want EPIPE", err)
	}
	if d := dropped(t, b); d["error"] != 3 || d["full"] != 0 {
		t.Errorf("dropped after a failed write of 3 lines: %v", d)
	}
	out.fail(nil)
	_, _ = b.Write([]byte("time=now level=INFO msg=back\n"))
	_ = b.Close()
	want := "time=now level=INFO msg=back\ntime="
	wantEnd := ` level=WARN msg="log lines dropped: the log's output did not take them in time, or writing them failed" lines=3` + "\n"
	if got := out.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, wantEnd) || strings.Count(got, "\n") != 2 {
		t.Errorf("after writing works again:\n%s\nwant the line, then one ending%s", got, wantEnd)
	}
}
