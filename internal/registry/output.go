package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// encodeResult encodes a tool's output into res under the tool's output
// limit. An output over the limit is cut (never into invalid JSON) and,
// when the service keeps spills, kept whole in the spill store, with a
// marker that says how to read on. A tool that cut its own output
// (ReportTruncated) makes the result truncated with the size it reported.
func (e *Executor) encodeResult(ctx context.Context, tool *Tool, req *Request, out any, res *Result) error {
	mark := func(full string, kept int, total, omitted int64) string {
		return e.spillCut(ctx, req, full, kept, total, omitted)
	}
	if raw, ok := out.(json.RawMessage); ok && tool.Type != "builtin" {
		// What exec, HTTP and MCP tools write reaches every client: JSON
		// that parsers read differently (or not at all) is passed on as
		// the text it is, or refused where an output schema promises an
		// object.
		if err := e.jsonCheck.interoperable(raw); err != nil && json.Valid(raw) {
			if tool.output != nil {
				return e.faultyOutput(ctx, tool, outputError(tool, []Detail{{Message: "output is not interoperable JSON (RFC 7493): " + err.Error()}}))
			}
			if e.log != nil {
				e.log.WarnContext(ctx, "tool output is not interoperable JSON (RFC 7493); passed on as text", "tool", tool.Name, "type", tool.Type, "source", tool.Source, "error", err.Error())
			}
			out = string(raw)
		}
	}
	raw, truncated, original, err := encodeOutputMark(out, tool.MaxOutputBytes, mark)
	if err != nil {
		return fmt.Errorf("%w: output is not JSON-serialisable: %v", errInternal, err)
	}
	if err := e.checkOutput(ctx, tool, raw, truncated); err != nil {
		return err
	}
	res.Output, res.Truncated = raw, truncated
	switch {
	case truncated:
		res.OriginalBytes = max(original, req.cut)
	case req.cut > 0:
		res.Truncated, res.OriginalBytes = true, req.cut
	}
	return nil
}

// spillCut writes the whole text of an output the executor cut to the
// spill store, and returns the marker: how to read on from the kept
// bytes, or that the rest was not kept.
func (e *Executor) spillCut(ctx context.Context, req *Request, full string, kept int, total, omitted int64) string {
	sink := req.SpillStream(ctx, SpillStreamOutput)
	if sink == nil {
		return CutMarker(omitted, total, req.CallID, SpillStreamOutput, 0, nil)
	}
	for i := 0; i < len(full); i += SpillChunkBytes {
		_, _ = sink.Write([]byte(full[i:min(i+SpillChunkBytes, len(full))]))
	}
	info, err := sink.Close()
	if err != nil {
		info = nil
	}
	return CutMarker(omitted, total, req.CallID, SpillStreamOutput, int64(kept), info)
}

// ErrNoSpill means this service keeps no cut outputs.
var ErrNoSpill = errors.New("this service keeps no cut outputs (TOOLSVC_SPILL_MAX_BYTES is 0)")

// ReadOutput reads a range of the kept output of one of caller's calls
// (see Spiller.Read), checked against the registry in use.
func (e *Executor) ReadOutput(ctx context.Context, caller *Caller, catalog []string, toolCallID, stream string, offset int64, limit int) (*SpillInfo, []byte, error) {
	if e.spill == nil || e.spill.store == nil {
		return nil, nil, ErrNoSpill
	}
	return e.spill.Read(ctx, e.Registry(), caller, catalog, toolCallID, stream, offset, limit)
}
