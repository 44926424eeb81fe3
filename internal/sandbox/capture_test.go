package sandbox

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadTailKeepsBothEnds(t *testing.T) {
	var want bytes.Buffer
	c := NewHeadTail(100, 40)
	var spilled bytes.Buffer
	opened := 0
	c.SpillTo(func() io.Writer { opened++; return &spilled })
	for i := range 10000 {
		line := strconv.Itoa(i) + "\n"
		want.WriteString(line)
		// Writes of every size, so the ring wraps in every way.
		for p := []byte(line); len(p) > 0; {
			n := min(len(p), 1+i%3)
			c.Write(p[:n])
			p = p[n:]
		}
	}
	head, tail, omitted := c.Parts()
	w := want.Bytes()
	if !bytes.Equal(head, w[:40]) || !bytes.Equal(tail, w[len(w)-60:]) {
		t.Errorf("head %q, tail %q", head, tail)
	}
	if omitted != int64(len(w)-100) || c.Total() != int64(len(w)) || c.Dropped() != omitted || !c.Truncated() {
		t.Errorf("omitted %d, total %d, want %d and %d", omitted, c.Total(), len(w)-100, len(w))
	}
	if opened != 1 || !bytes.Equal(spilled.Bytes(), w) {
		t.Errorf("spill opened %d times, holds %d bytes of %d (equal: %v)", opened, spilled.Len(), len(w), bytes.Equal(spilled.Bytes(), w))
	}
}

func TestHeadTailUnderLimitIsWhole(t *testing.T) {
	c := NewHeadTail(100, 50)
	opened := false
	c.SpillTo(func() io.Writer { opened = true; return io.Discard })
	c.Write([]byte(strings.Repeat("x", 60)))
	c.Write([]byte(strings.Repeat("y", 40)))
	if c.Truncated() || opened || c.String() != strings.Repeat("x", 60)+strings.Repeat("y", 40) {
		t.Errorf("truncated %v, spill opened %v, %q", c.Truncated(), opened, c.String())
	}
}

func TestHeadTailCutsOnRuneBoundaries(t *testing.T) {
	c := NewHeadTail(11, 5)
	c.Write([]byte(strings.Repeat("é", 20))) // 40 bytes, two per rune
	head, tail, omitted := c.Parts()
	if !utf8.Valid(head) || !utf8.Valid(tail) || string(head) != "éé" || string(tail) != "ééé" || omitted != 40-10 {
		t.Errorf("head %q, tail %q, omitted %d", head, tail, omitted)
	}
}

func TestHeadTailSingleHugeWrite(t *testing.T) {
	c := NewHeadTail(10, 0)
	c.Write([]byte("0123456789abcdefghij"))
	c.Write([]byte("KL"))
	if _, tail, om := c.Parts(); string(tail) != "cdefghijKL" || om != 12 {
		t.Errorf("tail %q, omitted %d", tail, om)
	}
}
