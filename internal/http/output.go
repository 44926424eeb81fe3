package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/http/ui"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// OutputReader reads the kept output of cut results;
// *registry.Executor implements it.
type OutputReader interface {
	ReadOutput(ctx context.Context, caller *registry.Caller, catalog []string, toolCallID, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error)
}

// The most and the default bytes one GET /calls/{id}/output returns, and
// the most it holds in memory at once: a range is read from the store and
// written out piece by piece, a chunk of the store's at a time, so a
// client that reads slowly holds one chunk, not its whole range.
const (
	maxOutputRead     = 16 << 20
	defaultOutputRead = 1 << 20
	outputPiece       = registry.SpillChunkBytes
)

// handleGetOutput serves a range of the kept full output of a cut call of
// this caller, as raw bytes, with its sizes and the next offset in
// headers.
func (s *Server) handleGetOutput(w http.ResponseWriter, r *http.Request) error {
	reader, ok := s.deps.Executor.(OutputReader)
	if !ok {
		return problem(kindNotFound, "this service keeps no cut outputs")
	}
	q := r.URL.Query()
	offset, err := queryInt(q.Get("offset"), 0, 0, 1<<53, "offset")
	if err != nil {
		return err
	}
	limit, err := queryInt(q.Get("limit"), defaultOutputRead, 1, maxOutputRead, "limit")
	if err != nil {
		return err
	}
	stream := q.Get("stream")
	switch stream {
	case "", registry.SpillStreamOutput, "stdout", "stderr", "body":
	default:
		return problem(kindInvalidParameter, "stream must be output, stdout, stderr or body")
	}
	id := ui.PathParam(r, "toolCallId")
	if err := checkPathID(id); err != nil {
		return err
	}
	caller := CallerFrom(r.Context())
	first := min(limit, outputPiece)
	info, data, err := reader.ReadOutput(r.Context(), caller, nil, id, stream, offset, int(first))
	var te *registry.Error
	switch {
	case errors.Is(err, registry.ErrNotFound) && s.stillRunning(r.Context(), caller, id):
		return problem(kindNotFound, "call "+id+" has not ended (it runs, or waits for approval); an output that is cut is kept once its call ends: wait for it with GET /calls/"+url.PathEscape(id)+"?wait=30s")
	case errors.Is(err, registry.ErrNotFound), errors.Is(err, registry.ErrNoSpill):
		return problem(kindNotFound, err.Error())
	case errors.As(err, &te):
		return problem(kindNotFound, te.Message)
	case err != nil:
		// Anything else is the store failing (ReadOutput's other errors
		// are the ones above): 503 and Retry-After, as GET /calls/{id}
		// answers, not 500.
		return storeFailed(err, "")
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Toolsvc-Tool-Name", info.ToolName)
	h.Set("Toolsvc-Total-Bytes", strconv.FormatInt(info.TotalBytes, 10))
	h.Set("Toolsvc-Stored-Bytes", strconv.FormatInt(info.StoredBytes, 10))
	n := int64(len(data))
	if n == first {
		// A full first piece: the range goes on to the limit or to the
		// end of what is stored.
		n = max(n, min(limit, info.StoredBytes-offset))
	}
	h.Set("Toolsvc-Next-Offset", strconv.FormatInt(offset+n, 10))
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(data); err != nil {
		return nil
	}
	for at := offset + int64(len(data)); at < offset+n; {
		again, data, err := reader.ReadOutput(r.Context(), caller, nil, id, stream, at, int(min(offset+n-at, outputPiece)))
		if err == nil && !sameSpill(info, again) {
			// The call ran again under its id and its output was replaced:
			// what follows is another output's.
			err = errors.New("the kept output was replaced while it was read")
		}
		if err != nil || len(data) == 0 {
			// The output went away (retention) or the store failed after
			// the length was promised: end the connection short, so the
			// client sees a truncated body, not a complete one.
			s.deps.Logger.WarnContext(r.Context(), "output read broke off", "toolCallId", id, "offset", at, "error", err)
			panic(http.ErrAbortHandler)
		}
		if _, err := w.Write(data); err != nil {
			return nil
		}
		at += int64(len(data))
	}
	return nil
}

// checkPathID answers, as not found, an id from a path that is longer
// than any id the service gives or takes (a toolCallId is at most
// maxCallText characters; approval ids are shorter): no record has it,
// so the store is not asked to look up a 200 KB key.
func checkPathID(id string) error {
	if len(id) <= maxCallText {
		return nil
	}
	if n := utf8.RuneCountInString(id); n > maxCallText {
		return problem(kindNotFound, fmt.Sprintf("no record has an id of %d characters; ids are at most %d", n, maxCallText))
	}
	return nil
}

// sameSpill reports whether two reads found the same kept output.
func sameSpill(a, b *registry.SpillInfo) bool {
	return b != nil && a.CreatedAt.Equal(b.CreatedAt) && a.TotalBytes == b.TotalBytes && a.StoredBytes == b.StoredBytes
}

// queryInt parses an integer query parameter in [lo, hi]; empty is def.
func queryInt(v string, def, lo, hi int64, name string) (int64, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < lo || n > hi {
		return 0, problem(kindInvalidParameter, name+" must be an integer from "+strconv.FormatInt(lo, 10)+" to "+strconv.FormatInt(hi, 10))
	}
	return n, nil
}

// stillRunning reports whether caller's call id is recorded as running or
// waiting for approval, so that a read of its output, which is kept only
// once it ends, is not answered as if the output had expired.
func (s *Server) stillRunning(ctx context.Context, caller *registry.Caller, id string) bool {
	rec, err := s.deps.Executor.GetCall(ctx, caller.ID, id) // ErrNoStore without a store
	return err == nil && rec.State != registry.CallDone
}
