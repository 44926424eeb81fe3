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
	var spill *registry.SpillInfo
	if s.sink != nil {
		spill, _ = s.sink.Close() // a failed spill is logged; the marker says it was not kept
	}
	head, tail, omitted := s.Parts()
	if omitted == 0 {
		return string(head) + string(tail)
	}
	marker := registry.CutMarker(omitted, s.Total(), req.CallID, s.name, int64(len(head)), spill)
	return string(head) + "\n" + marker + "\n" + string(tail)
}
