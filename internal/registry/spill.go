package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SpillChunkBytes is the size of every stored chunk of a spill but the
// last, so that a read at an offset finds its chunks by arithmetic.
const SpillChunkBytes = 256 << 10

// SpillStreamOutput names the spill of a result's whole output, cut by the
// executor; process tools spill "stdout" and "stderr" under their names.
const SpillStreamOutput = "output"

// SpillInfo describes one spilled stream of a call.
type SpillInfo struct {
	CallerID   string `json:"-"`
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	Stream     string `json:"stream"`
	// TotalBytes is how many bytes the stream had; StoredBytes how many of
	// them (from the start) are kept, at most the spill limit.
	TotalBytes  int64     `json:"totalBytes"`
	StoredBytes int64     `json:"storedBytes"`
	CreatedAt   time.Time `json:"createdAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	// Unreadable says that the call's caller cannot call ReadOnTool (it
	// is not in its catalog, or not in the call's), so the cut marker
	// names the HTTP route instead.
	Unreadable bool `json:"-"`
	// Unrecorded says that the spill's call has no record (a read_only
	// call): its spill must not replace that of a recorded call with the
	// same toolCallId, whose stored result points to it.
	Unrecorded bool `json:"-"`
	// TotalReached says that StoredBytes stops short of TotalBytes because
	// the kept outputs of all calls together reached
	// SpillOptions.TotalBytes, not because of the spill limit.
	TotalReached bool `json:"-"`
	// NoRoom says that StoredBytes stops short of TotalBytes because the
	// store's volume had no more room for kept outputs (ErrSpillNoRoom).
	NoRoom bool `json:"-"`
}

// ErrSpillNoRoom is a SpillWriter's error for a chunk that would take the
// room the store keeps for call records on its volume. The chunks written
// before it stay a readable beginning of the output.
var ErrSpillNoRoom = errors.New("the store's volume has no room for more kept output")

// ErrSpillOfRecordedCall is CreateSpill's error for the spill of an
// unrecorded call whose toolCallId names a recorded call.
var ErrSpillOfRecordedCall = errors.New("the toolCallId names a recorded call, whose kept output stays; give a new call a new toolCallId")

// SpillStore keeps the full output of cut results, in chunks of
// SpillChunkBytes, keyed by (caller, toolCallId, stream). Only complete
// spills are read.
type SpillStore interface {
	// CreateSpill starts the spill of info's stream (replacing an earlier
	// one under the same key) and returns the writer its bytes go to; for
	// an Unrecorded spill whose toolCallId names a recorded call of its
	// caller it fails with ErrSpillOfRecordedCall and replaces nothing.
	CreateSpill(ctx context.Context, info *SpillInfo) (SpillWriter, error)
	// ReadSpill returns up to limit bytes of a complete spill from offset
	// (fewer at its end), or ErrNotFound (also when it has expired).
	ReadSpill(ctx context.Context, callerID, toolCallID, stream string, offset int64, limit int) (*SpillInfo, []byte, error)
	// ListSpills returns the complete, unexpired spills of one call.
	ListSpills(ctx context.Context, callerID, toolCallID string) ([]*SpillInfo, error)
	// DeleteExpiredSpills deletes the spills that expired at or before
	// now, complete or not, and returns how many.
	DeleteExpiredSpills(ctx context.Context, now time.Time) (int64, error)
	// SpillBytes returns the bytes of spilled output the store holds.
	SpillBytes(ctx context.Context) (int64, error)
}

// SpillWriter receives a spill's bytes. WriteChunk is given whole chunks
// of SpillChunkBytes, but the last; Commit marks the spill complete with
// the stream's total size; Abort drops what was written.
type SpillWriter interface {
	WriteChunk(ctx context.Context, seq int, p []byte) error
	Commit(ctx context.Context, totalBytes, storedBytes int64) error
	Abort(ctx context.Context)
}

// SpillOptions configure a Spiller.
type SpillOptions struct {
	// Store keeps the spills; nil keeps none (the spiller then only sets
	// the head and tail split).
	Store SpillStore
	// MaxBytes bounds what one stream keeps; the rest is counted only.
	// 0 means 64 MiB.
	MaxBytes int64
	// TotalBytes bounds what the store holds of all spills: streams take
	// from it as they write, and a stream that finds it used up keeps no
	// more (nothing, when it had kept nothing), until spills expire. 0
	// means no bound.
	TotalBytes int64
	// Retention is how long a spill is kept; 0 means 1 hour.
	Retention time.Duration
	// HeadPercent is the share of a process stream's limit given to its
	// beginning, the rest going to its end; 0 means 50, 100 keeps only
	// the beginning.
	HeadPercent int
	Logger      *slog.Logger
	// Registerer receives toolsvc_spill_* metrics; nil registers none.
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Spiller keeps the full output of cut results in a SpillStore, bounded
// per stream, and sweeps expired spills.
type Spiller struct {
	store     SpillStore
	max       int64
	retention time.Duration
	head      int
	log       *slog.Logger
	now       func() time.Time
	written   prometheus.Counter
	clipped   prometheus.Counter
	failed    prometheus.Counter

	// total is SpillOptions.TotalBytes. held is what the store held when
	// last asked (at most once a second, at heldAt) less what open streams
	// had written to it then, plus what streams committed since; granted
	// is what open streams have taken of the total (written or buffered),
	// flushed what they have written. heldMu keeps a count of the store
	// and the end of a stream apart.
	total   int64
	held    atomic.Int64
	heldAt  atomic.Int64
	granted atomic.Int64
	flushed atomic.Int64
	heldMu  sync.Mutex
	// refusals counts the streams the total stopped since the last log
	// line that said so, written at refusedAt (unix nanoseconds).
	refusals  atomic.Int64
	refusedAt atomic.Int64
}

// errSpillFull is the failure of a stream that kept nothing because the
// spills held already reached SpillOptions.TotalBytes.
var errSpillFull = errors.New("the spill store holds its limit of kept outputs (TOOLSVC_SPILL_TOTAL_BYTES)")

// NewSpiller returns a spiller over o.Store.
func NewSpiller(o SpillOptions) *Spiller {
	s := &Spiller{store: o.Store, max: cmp.Or(o.MaxBytes, 64<<20), retention: cmp.Or(o.Retention, time.Hour),
		head: cmp.Or(o.HeadPercent, 50), log: cmp.Or(o.Logger, slog.New(slog.DiscardHandler)), now: o.Now, total: o.TotalBytes}
	if s.now == nil {
		s.now = time.Now
	}
	s.head = min(max(s.head, 1), 100)
	if o.Registerer != nil && o.Store != nil {
		s.written = prometheus.NewCounter(prometheus.CounterOpts{Name: "toolsvc_spill_written_bytes_total",
			Help: "Bytes of cut outputs written to the spill store."})
		s.clipped = prometheus.NewCounter(prometheus.CounterOpts{Name: "toolsvc_spill_clipped_total",
			Help: "Spilled streams longer than TOOLSVC_SPILL_MAX_BYTES, kept only up to it."})
		s.failed = prometheus.NewCounter(prometheus.CounterOpts{Name: "toolsvc_spill_failures_total",
			Help: "Spills that could not be written, or that TOOLSVC_SPILL_TOTAL_BYTES cut short or refused (the result says the rest is not kept)."})
		stored := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "toolsvc_spill_stored_bytes",
			Help: "Bytes of spilled output the store holds now (bounded by TOOLSVC_SPILL_MAX_BYTES per stream and the retention)."},
			func() float64 {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				n, err := s.store.SpillBytes(ctx)
				if err != nil {
					return -1
				}
				return float64(n)
			})
		o.Registerer.MustRegister(s.written, s.clipped, s.failed, stored)
	}
	return s
}

// MaxBytes is the most one spilled stream keeps.
func (s *Spiller) MaxBytes() int64 { return s.max }

// Store returns the store spills go to.
func (s *Spiller) Store() SpillStore { return s.store }

// HeadBytes is how much of limit a process stream gives to its beginning.
func (s *Spiller) HeadBytes(limit int) int {
	if s == nil {
		return limit / 2
	}
	return limit * s.head / 100
}

// Sweep deletes expired spills every interval until ctx ends.
func (s *Spiller) Sweep(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := s.store.DeleteExpiredSpills(sctx, s.now())
		cancel()
		if err != nil && ctx.Err() == nil {
			s.log.Warn("spill: deleting expired spills failed", "err", err)
		} else if n > 0 {
			s.log.Info("spill: deleted expired spills", "count", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// open starts a spill of one stream of a call. The stream takes from the
// total only as it writes (SpillSink.take): taking the whole spill limit
// up front let a few dozen streams of a few KiB each hold the total, and
// refused the next ones with the store nearly empty.
func (s *Spiller) open(ctx context.Context, callerID, toolCallID, toolName, stream string, unrecorded bool) *SpillSink {
	if s.total > 0 && s.total-s.heldBytes(ctx)-s.granted.Load() <= 0 {
		s.refused()
		return &SpillSink{s: s, ctx: ctx, err: errSpillFull, stream: stream, callID: toolCallID}
	}
	now := s.now()
	w, err := s.store.CreateSpill(ctx, &SpillInfo{CallerID: callerID, ToolCallID: toolCallID, ToolName: toolName,
		Stream: stream, CreatedAt: now, ExpiresAt: now.Add(s.retention), Unrecorded: unrecorded})
	k := &SpillSink{s: s, ctx: ctx, w: w, err: err, stream: stream, callID: toolCallID, limit: s.max}
	if err != nil {
		k.fail(err)
	}
	return k
}

// take gives an open stream up to n more bytes of the total, and returns
// how many it got: fewer only when the total is reached.
func (s *Spiller) take(ctx context.Context, n int64) int64 {
	held := s.heldBytes(ctx)
	for {
		g := s.granted.Load()
		got := min(n, s.total-held-g)
		if got <= 0 {
			return 0
		}
		if s.granted.CompareAndSwap(g, g+got) {
			return got
		}
	}
}

// refused counts a stream that the total stopped, and says so in the log
// at most once a minute, with how many streams it stopped since.
func (s *Spiller) refused() {
	if s.failed != nil {
		s.failed.Inc()
	}
	s.refusals.Add(1)
	last, now := s.refusedAt.Load(), time.Now().UnixNano()
	if now-last < int64(time.Minute) || !s.refusedAt.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("spill: kept outputs reach TOOLSVC_SPILL_TOTAL_BYTES; cut outputs are kept in part or not at all until spills expire",
		"totalBytes", s.total, "heldBytes", s.held.Load(), "openBytes", s.granted.Load(),
		"streamsRefused", s.refusals.Swap(0), "retention", s.retention.String())
}

// heldBytes is what the store holds of all spills but what open streams
// write, asked at most once a second (with what committed since added),
// so that writing a stream costs no query of its own.
func (s *Spiller) heldBytes(ctx context.Context) int64 {
	at := s.heldAt.Load()
	if time.Since(time.Unix(0, at)) < time.Second {
		return s.held.Load()
	}
	// A count under way, or a stream ending, leaves the last figure, once
	// there is one.
	if at == 0 {
		s.heldMu.Lock()
	} else if !s.heldMu.TryLock() {
		return s.held.Load()
	}
	defer s.heldMu.Unlock()
	if time.Since(time.Unix(0, s.heldAt.Load())) >= time.Second {
		// What open streams wrote is in the count and in granted: taken
		// off here, it is counted once. (A chunk written during the count
		// may be counted twice until the next one.)
		open := s.flushed.Load()
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		n, err := s.store.SpillBytes(qctx)
		cancel()
		if err == nil {
			s.held.Store(n - open)
		}
		// A failed count keeps the last one; the next try is in a second.
		s.heldAt.Store(time.Now().UnixNano())
	}
	return s.held.Load()
}

// SpillSink streams one output stream into the spill store in chunks,
// keeping at most the spill limit and counting the rest. Memory is one
// chunk. It is safe for concurrent use.
type SpillSink struct {
	s      *Spiller
	ctx    context.Context
	w      SpillWriter
	stream string
	callID string
	// unreadable: see SpillInfo.Unreadable.
	unreadable bool
	// limit is what the stream may keep: the spill limit.
	limit int64

	mu     sync.Mutex
	buf    []byte
	seq    int
	stored int64
	total  int64
	err    error
	done   bool
	// taken is what the stream has of the spiller's total (its share of
	// Spiller.granted), stored and buffered bytes and none more; full
	// says the total (or, with noRoom, the store's volume) refused it
	// more, which ends what it keeps.
	taken  int64
	full   bool
	noRoom bool
}

// Write keeps p (up to the limit) and never fails: a spill that cannot be
// written is given up, and the result says so.
func (k *SpillSink) Write(p []byte) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.total += int64(len(p))
	if k.err != nil || k.done || k.full {
		return len(p), nil
	}
	n := min(int64(len(p)), max(k.limit-k.stored-int64(len(k.buf)), 0))
	if k.s.total > 0 {
		n = k.take(n)
	}
	q := p[:n]
	for len(q) > 0 {
		if k.buf == nil {
			k.buf = make([]byte, 0, SpillChunkBytes)
		}
		n := min(len(q), SpillChunkBytes-len(k.buf))
		k.buf = append(k.buf, q[:n]...)
		q = q[n:]
		if len(k.buf) == SpillChunkBytes {
			k.flush()
			if k.err != nil {
				break
			}
		}
	}
	return len(p), nil
}

// take makes n more bytes of the stream taken from the spiller's total,
// and returns how many are: fewer when the total is reached, and then the
// stream keeps no more (a kept output is always a beginning).
func (k *SpillSink) take(n int64) int64 {
	have := k.taken - k.stored - int64(len(k.buf))
	if n <= have {
		return n
	}
	got := k.s.take(k.ctx, n-have)
	k.taken += got
	if got < n-have {
		k.full = true
		k.s.refused()
	}
	return have + got
}

func (k *SpillSink) flush() {
	if len(k.buf) == 0 {
		return
	}
	if err := k.w.WriteChunk(k.ctx, k.seq, k.buf); err != nil {
		if errors.Is(err, ErrSpillNoRoom) {
			// What is written stays a readable beginning, as when the
			// total is reached; only this chunk and the rest are lost.
			k.s.log.Warn("spill: the store's volume is nearly full; the rest of this cut output is not kept", "toolCallId", k.callID, "stream", k.stream, "keptBytes", k.stored, "err", err)
			if k.s.failed != nil {
				k.s.failed.Inc()
			}
			k.full, k.noRoom = true, true
			k.buf = k.buf[:0]
			return
		}
		k.fail(err)
		return
	}
	if k.s.written != nil {
		k.s.written.Add(float64(len(k.buf)))
	}
	if k.s.total > 0 {
		k.s.flushed.Add(int64(len(k.buf)))
	}
	k.seq++
	k.stored += int64(len(k.buf))
	k.buf = k.buf[:0]
}

func (k *SpillSink) fail(err error) {
	k.err = err
	switch {
	case errors.Is(err, ErrSpillOfRecordedCall):
		// The caller's doing, not the store's.
		k.s.log.Info("spill: not kept", "toolCallId", k.callID, "stream", k.stream, "reason", err.Error())
	default:
		k.s.log.Warn("spill: writing a cut output failed; the rest is not kept", "toolCallId", k.callID, "stream", k.stream, "err", err)
		if k.s.failed != nil {
			k.s.failed.Inc()
		}
	}
	if k.w != nil {
		k.w.Abort(context.WithoutCancel(k.ctx))
	}
}

// drop gives up a spill that was not closed; see Request.dropSpills.
func (k *SpillSink) drop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return
	}
	k.done = true
	k.release(false)
	if k.err == nil && k.w != nil {
		k.w.Abort(context.WithoutCancel(k.ctx))
	}
}

// release gives back what the stream took of the total; kept says the
// store now holds what it stored.
func (k *SpillSink) release(kept bool) {
	if k.s.total <= 0 || k.taken <= 0 {
		return
	}
	k.s.heldMu.Lock()
	defer k.s.heldMu.Unlock()
	k.s.granted.Add(-k.taken)
	k.s.flushed.Add(-k.stored)
	if kept {
		k.s.held.Add(k.stored)
	}
}

// Close writes what is buffered and marks the spill complete. It returns
// the spill as stored, or an error when nothing readable was kept.
func (k *SpillSink) Close() (*SpillInfo, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return nil, errors.New("spill closed twice")
	}
	k.done = true
	// The store now holds what the stream kept, until the next count.
	defer func() { k.release(k.err == nil) }()
	if k.err == nil {
		k.flush()
	}
	if k.err == nil && k.stored == 0 && k.full {
		// The total or the volume refused the stream its first byte:
		// nothing to read on from (refused or flush has counted and
		// logged it).
		k.err = errSpillFull
		if k.noRoom {
			k.err = ErrSpillNoRoom
		}
		k.w.Abort(context.WithoutCancel(k.ctx))
	}
	if k.err == nil {
		// The commit is the spill's record: it must land even when the
		// call's context has just ended.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(k.ctx), 10*time.Second)
		defer cancel()
		if err := k.w.Commit(cctx, k.total, k.stored); err != nil {
			k.fail(err)
		}
	}
	if k.err != nil {
		return nil, k.err
	}
	if k.stored < k.total && !k.full && k.s.clipped != nil {
		k.s.clipped.Inc()
	}
	return &SpillInfo{ToolCallID: k.callID, Stream: k.stream, TotalBytes: k.total, StoredBytes: k.stored, Unreadable: k.unreadable,
		TotalReached: k.full && !k.noRoom && k.stored < k.total, NoRoom: k.noRoom && k.stored < k.total}, nil
}

// SpillStream starts the spill of one named stream of this call's output
// ("stdout", "stderr"), or returns nil when this service keeps no spills.
// A tool that cuts a stream writes the whole stream to it and closes it,
// then says how to read on with ReadOnHint.
func (r *Request) SpillStream(ctx context.Context, stream string) *SpillSink {
	if r.spiller == nil || r.spiller.store == nil || r.Caller == nil {
		return nil
	}
	k := r.spiller.open(ctx, r.Caller.ID, r.CallID, r.Name, stream, !r.recorded)
	k.unreadable = !r.mayCall(ReadOnTool)
	r.sinksMu.Lock()
	r.sinks = append(r.sinks, k)
	r.sinksMu.Unlock()
	return k
}

// dropSpills gives up the spills the handler started and did not close
// (it failed, or timed out, before it said how its output ended): what
// they wrote is deleted and what they were granted of the total is given
// back.
func (r *Request) dropSpills() {
	r.sinksMu.Lock()
	sinks := r.sinks
	r.sinks = nil
	r.sinksMu.Unlock()
	for _, k := range sinks {
		k.drop()
	}
}

// mayCall reports whether the request's caller may call tool name within
// the request's catalog (true when the request knows no registry).
func (r *Request) mayCall(name string) bool {
	if r.reg == nil {
		return true
	}
	t, ok := r.reg.Lookup(name)
	return ok && r.Caller.Sees(&t.Definition) && (len(r.Catalog) == 0 || containsString(r.Catalog, name))
}

// CountPast bounds how much of a cut stream CountRest reads only to count
// it: past what its spill keeps, or past the cut when nothing is kept. A
// size is worth a few MiB of reading, not the whole of an endless body.
const CountPast = 8 << 20

// CountRest counts a stream that was cut after read: it reads the rest
// from rest, within ctx, spilling the whole stream when this service
// keeps spills. It reads at most bound bytes more, and at most CountPast
// beyond what the spill keeps. It returns the stream's size, whether that
// size is exact (false when a bound stopped the count or the read
// failed), and the spill (nil when none was kept).
func (r *Request) CountRest(ctx context.Context, stream string, read []byte, rest io.Reader, bound int64) (total int64, exact bool, spill *SpillInfo) {
	var w io.Writer = io.Discard
	keep := int64(0)
	sink := r.SpillStream(ctx, stream)
	if sink != nil {
		_, _ = sink.Write(read)
		w = sink
		keep = max(sink.limit-int64(len(read)), 0)
	}
	bound = min(bound, keep+CountPast)
	n, err := io.Copy(w, io.LimitReader(rest, bound))
	if sink != nil {
		spill, _ = sink.Close() // a failed spill is logged; the marker says it was not kept
	}
	return int64(len(read)) + n, err == nil && n < bound, spill
}

// HeadBytes is how much of a stream limit a process tool keeps from the
// stream's beginning; the rest of the limit keeps its end.
func (r *Request) HeadBytes(limit int) int { return r.spiller.HeadBytes(limit) }

// ReportTruncated tells the executor that the tool cut its output, which
// was originalBytes long in all; the result then says truncated with that
// size even when what the tool returns fits the output limit.
func (r *Request) ReportTruncated(originalBytes int64) {
	r.cut = max(originalBytes, 1)
}

// ReadOnTool is the name of the built-in tool that reads spilled output.
const ReadOnTool = "result__read"

// CutMarker is the text put where output was cut: how much was omitted,
// and, when the stream was spilled, exactly how to read on (and why the
// spill does not hold all of it, when it does not: the spill limit, or the
// total of all kept outputs).
func CutMarker(omitted, total int64, toolCallID, stream string, readOffset int64, spill *SpillInfo) string {
	m := fmt.Sprintf("[output truncated: %d bytes total, %d omitted", total, omitted)
	if spill == nil {
		return m + "; the full output was not kept]"
	}
	if spill.Unreadable {
		m += fmt.Sprintf("; the full output is kept, and the operator can read it with GET /calls/%s/output?offset=%d", url.PathEscape(toolCallID), readOffset)
		if stream != SpillStreamOutput {
			m += "&stream=" + url.QueryEscape(stream)
		}
	} else {
		// The hint is JSON a model can send as it is: Go's %q would write
		// some characters in escapes JSON does not have (\U000e0041).
		m += "; read on with " + ReadOnTool + ` {"toolCallId":` + string(appendQuoted(nil, toolCallID))
		if stream != SpillStreamOutput {
			m += `,"stream":` + string(appendQuoted(nil, stream))
		}
		m += fmt.Sprintf(`,"offset":%d}`, readOffset)
	}
	if spill.StoredBytes < spill.TotalBytes {
		why := "the spill limit"
		switch {
		case spill.TotalReached:
			why = "the kept outputs of all calls reached their total limit"
		case spill.NoRoom:
			why = "the service's disk has no room for more"
		}
		m += fmt.Sprintf("; only the first %d bytes are kept (%s)", spill.StoredBytes, why)
	}
	return m + "]"
}

// Read returns up to limit bytes from offset of a spilled stream of one
// of caller's calls, under the rules of the original call: only the
// caller that made it reads it, and only while its tool is in the
// caller's catalog (and in catalog, the request's narrowing, when that is
// not empty). An unknown, expired or foreign spill is ErrNotFound; a tool
// out of the catalog is an *Error with CodeToolNotInCatalog.
func (s *Spiller) Read(ctx context.Context, reg *Registry, caller *Caller, catalog []string, toolCallID, stream string, offset int64, limit int) (*SpillInfo, []byte, error) {
	if stream == "" {
		stream = SpillStreamOutput
	}
	info, data, err := s.store.ReadSpill(ctx, caller.ID, toolCallID, stream, offset, limit)
	if errors.Is(err, ErrNotFound) {
		return nil, nil, s.notFound(ctx, caller, toolCallID, stream)
	}
	if err != nil {
		return nil, nil, err
	}
	t, ok := reg.Lookup(info.ToolName)
	if !ok || !caller.Sees(&t.Definition) || (len(catalog) > 0 && !containsString(catalog, info.ToolName)) {
		return nil, nil, &Error{Code: CodeToolNotInCatalog,
			Message:    fmt.Sprintf("the output of %s came from tool %s, which is not in this caller's catalog", toolCallID, info.ToolName),
			Suggestion: "Read only the output of calls to tools you were given."}
	}
	return info, data, nil
}

// notFound says that a spill does not exist, naming the streams the call
// does have when there are others.
func (s *Spiller) notFound(ctx context.Context, caller *Caller, toolCallID, stream string) error {
	msg := fmt.Sprintf("no kept output %q of call %s (kept outputs expire after %s)", stream, toolCallID, s.retention)
	if list, err := s.store.ListSpills(ctx, caller.ID, toolCallID); err == nil && len(list) > 0 {
		names := make([]string, len(list))
		for i, in := range list {
			names[i] = in.Stream
		}
		msg += fmt.Sprintf("; this call kept %q", names)
	}
	return fmt.Errorf("%w: %s", ErrNotFound, msg)
}
