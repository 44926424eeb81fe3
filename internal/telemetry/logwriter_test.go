package telemetry

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer counts the writes it gets.
type lockedBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writes++
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBufferedWriterGathersAndCloses: lines are held (an hour's
// interval never fires here), written in one write when the buffer
// would overflow, and the rest on Close; a write after Close goes
// straight through.
func TestBufferedWriterGathersAndCloses(t *testing.T) {
	out := &lockedBuffer{}
	b := NewBufferedWriter(out, time.Hour)
	line := strings.Repeat("x", 99) + "\n"
	n := LogBufferBytes/len(line) + 1
	for range n {
		if _, err := b.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if out.writes != 1 || len(out.String()) != (n-1)*len(line) {
		t.Errorf("after %d lines: %d writes, %d bytes out; want 1 write of the %d lines that fit", n, out.writes, len(out.String()), n-1)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(out.String()); got != n*len(line) {
		t.Errorf("after Close: %d bytes out, want %d", got, n*len(line))
	}
	_, _ = b.Write([]byte("late\n"))
	if !strings.HasSuffix(out.String(), "late\n") {
		t.Error("a write after Close was held")
	}
	big := strings.Repeat("y", LogBufferBytes+1)
	b2 := NewBufferedWriter(out, time.Hour)
	_, _ = b2.Write([]byte(big))
	if !strings.HasSuffix(out.String(), big) {
		t.Error("a line larger than the buffer was held")
	}
	_ = b2.Close()
}

// TestBufferedWriterFlushesOnInterval: a held line is written out by the
// periodic flush, without Close.
func TestBufferedWriterFlushesOnInterval(t *testing.T) {
	out := &lockedBuffer{}
	b := NewBufferedWriter(out, time.Millisecond)
	defer b.Close()
	_, _ = b.Write([]byte("one\n"))
	deadline := time.Now().Add(10 * time.Second)
	for out.String() != "one\n" {
		if time.Now().After(deadline) {
			t.Fatal("the line was not written out by the periodic flush")
		}
		time.Sleep(time.Millisecond)
	}
}
