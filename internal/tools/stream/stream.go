// Package stream captures one output stream of a process-backed tool (the
// shell's stdout and stderr, an exec tool's stdout) for its result: its
// beginning and end within a limit, and the whole stream in the spill
// store once it outgrows the limit.
package stream

import (
	"context"
	"io"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// Stream is one captured output stream of a call; it is the io.Writer the
// program writes to.
type Stream struct {
	*sandbox.Capture
	name string
	sink *registry.SpillSink
}

// New captures the stream called name ("stdout", "stderr") of req's call,
// keeping at most limit bytes of it in memory.
func New(ctx context.Context, req *registry.Request, name string, limit int) *Stream {
	s := &Stream{Capture: sandbox.NewHeadTail(limit, req.HeadBytes(limit)), name: name}
	s.SpillTo(func() io.Writer {
		s.sink = req.SpillStream(ctx, name)
		if s.sink == nil {
			return nil
		}
		return s.sink
	})
	return s
}

// Text is the stream as the model sees it: all of it, or its beginning,
// the marker (how much was omitted and how to read on) and its end. It
// finishes the spill.
func (s *Stream) Text(req *registry.Request) string {
	return s.TextWithin(req, -1)
}

// TextWithin is Text, a cut stream's written as a JSON string in at most
// budget bytes (quotes included; negative: no bound): a beginning and end
// that escape to more than that (control characters take six bytes each)
// are cut further, in the same proportion, so that the marker and the
// stream's end are what the model sees, not what a cut from the front
// leaves. A stream that was not cut is returned whole.
func (s *Stream) TextWithin(req *registry.Request, budget int) string {
	var spill *registry.SpillInfo
	if s.sink != nil {
		spill, _ = s.sink.Close() // a failed spill is logged; the marker says it was not kept
	}
	h, t, omitted := s.Parts()
	if omitted == 0 {
		return string(h) + string(t)
	}
	return Fit(req.CallID, s.name, string(h), string(t), s.Total(), spill, budget)
}

// Fit returns head and tail of a text of total bytes (stream name of the
// call callID, kept in spill, or not when nil) around the marker of what
// is left out between them, cut so that it takes at most budget bytes as
// a JSON string (no bound when budget < 0): the marker first, then head
// and tail in proportion to their lengths.
func Fit(callID, name, head, tail string, total int64, spill *registry.SpillInfo, budget int) string {
	if budget >= 0 {
		// The marker with the most digits it can have, and its two
		// newlines, come first.
		room := budget - registry.QuotedLen(registry.CutMarker(total, total, callID, name, total, spill)) - 4
		headRoom := room * len(head) / max(len(head)+len(tail), 1)
		head = head[:registry.QuotedPrefix(head, max(headRoom, 0))]
		tail = tail[registry.QuotedSuffix(tail, max(room-registry.QuotedLen(head)+2, 0)):]
	}
	marker := registry.CutMarker(total-int64(len(head)+len(tail)), total, callID, name, int64(len(head)), spill)
	return head + "\n" + marker + "\n" + tail
}
