package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// requestLimit bounds one request frame: the arguments have passed the
// service's body limit already, so this only guards against a broken pipe.
const requestLimit = 64 << 20

// Serve is the worker side: args are the arguments after Command (the
// memory ceiling in bytes). It makes its own process the OOM killer's
// first choice (oom_score_adj 1000, on Linux), applies the ceiling to it,
// and then answers calls of tools, one at a time, from in until in closes.
func Serve(args []string, tools []*registry.Tool, in io.Reader, out io.Writer) error {
	if len(args) != 1 {
		return errors.New("worker: usage: " + Command + " <memory-limit-bytes>")
	}
	limit, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || limit < MinMemoryLimit {
		return fmt.Errorf("worker: bad memory limit %q", args[0])
	}
	preferOOMKill()
	if err := applyCeiling(limit); err != nil {
		return err
	}
	// The garbage collector works hard before the ceiling is reached, so
	// that a call that needs much memory briefly (but not all at once)
	// succeeds, and the stack may not grow past a quarter of it.
	debug.SetMemoryLimit(limit * 3 / 4)
	debug.SetMaxStack(int(min(limit/4, 256<<20)))

	byName := make(map[string]registry.Handler, len(tools))
	for _, t := range tools {
		byName[t.Name] = t.Handler
	}
	r := bufio.NewReader(in)
	w := bufio.NewWriter(out)
	heap := newHeapGauge()
	for {
		b, err := readFrame(r, requestLimit)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("worker: reading a request: %w", err)
		}
		msg := answer(byName, b)
		if err := writeFrame(w, msg); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
		msg = nil
		if heap.held() > releaseAbove {
			debug.FreeOSMemory()
		}
	}
}

// answer runs one request and encodes its response.
func answer(byName map[string]registry.Handler, b []byte) []byte {
	msg, err := encode(serveOne(byName, b))
	if err != nil {
		// The output was encoded, but reads back deeper than json allows.
		msg, _ = encode(&response{Error: unencodable(err)})
	}
	return msg
}

// encode writes a response as the executor writes outputs, without
// escaping <, > and &: json.Marshal would escape them again in the
// output, which is already encoded, and a text of angle brackets would
// cost six times its size in the output limit.
func encode(res *response) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(res); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// maxMessage is the most of an error message a worker returns, in bytes:
// the service keeps no more than TOOLSVC_ERROR_MESSAGE_LIMIT characters
// of it (1000 by default), and a message of many megabytes, such as a jq program's
// error("x" * 20000000), would otherwise be refused as an output larger
// than a confined tool may return.
const maxMessage = 64 << 10

// clipMessage cuts s to about maxMessage bytes, keeping its beginning and
// its end around a mark of what was left out.
func clipMessage(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	head := registry.Clip(s, maxMessage/4)
	tail := s[len(s)-maxMessage/2:]
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	omitted := utf8.RuneCountInString(s[len(head) : len(s)-len(tail)])
	return fmt.Sprintf("%s … [%d characters omitted] … %s", head, omitted, tail)
}

// serveOne runs one request; a panic in the handler is its failure, not
// the worker's.
func serveOne(byName map[string]registry.Handler, b []byte) (res *response) {
	defer func() {
		if res.Error != nil {
			e := *res.Error
			e.Message = clipMessage(e.Message)
			res.Error = &e
		}
		res.Failure = clipMessage(res.Failure)
	}()
	var req request
	if err := json.Unmarshal(b, &req); err != nil {
		return &response{Failure: "worker: bad request: " + err.Error()}
	}
	h, ok := byName[req.Tool]
	if !ok {
		return &response{Failure: "worker: no tool " + strconv.Quote(req.Tool)}
	}
	ctx := context.Background()
	if req.TimeoutMs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMs)*time.Millisecond)
		defer cancel()
	}
	defer func() {
		if v := recover(); v != nil {
			res = &response{Failure: fmt.Sprintf("panic in %s: %v", req.Tool, v)}
		}
	}()
	rr := &registry.Request{Name: req.Tool, CallID: req.CallID, Arguments: req.Arguments, Context: req.Context, MaxOutputBytes: req.MaxOutputBytes}
	if d, ok := ctx.Deadline(); ok {
		rr.Deadline = d
	}
	v, err := h.Run(ctx, rr)
	if err != nil {
		var e *registry.Error
		if errors.As(err, &e) {
			return &response{Error: e}
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return &response{Error: registry.Errorf(registry.CodeTimeout, "the call timed out")}
		}
		return &response{Failure: err.Error()}
	}
	// Encoded as the executor encodes outputs, so the service sees the
	// same bytes it would have produced itself.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return &response{Error: unencodable(err)}
	}
	_, isString := v.(string)
	return &response{Output: bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), String: isString}
}

// unencodable says why an output cannot be written as JSON, in the terms
// of what the tool produced rather than of Go's encoder.
func unencodable(err error) *registry.Error {
	var uv *json.UnsupportedValueError
	msg := "the output cannot be written as JSON"
	switch {
	case errors.As(err, &uv):
		msg = "the output holds a number JSON cannot represent (" + uv.Str + ")"
	case strings.Contains(err.Error(), "exceeded max depth"):
		msg = "the output nests deeper than JSON output allows (10000 levels)"
	}
	return &registry.Error{Code: registry.CodeTool, Message: msg,
		Suggestion: "Change the program so that its result is plain JSON: finite numbers, nested at most a few thousand levels."}
}

// releaseAbove is how much heap a worker may keep between calls: above it,
// it gives the heap back to the kernel, so an idle worker does not hold
// what its last call needed.
const releaseAbove = 32 << 20

// heapGauge reads the heap the process holds from the kernel (not given
// back), through runtime/metrics: unlike runtime.ReadMemStats it does not
// stop the world, which cost ~2 % of a worker call's CPU.
type heapGauge struct{ s []metrics.Sample }

func newHeapGauge() *heapGauge {
	return &heapGauge{s: []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}}
}

// held is what runtime.MemStats calls HeapSys - HeapReleased.
func (g *heapGauge) held() uint64 {
	metrics.Read(g.s)
	var n uint64
	for _, s := range g.s {
		if s.Value.Kind() == metrics.KindUint64 {
			n += s.Value.Uint64()
		}
	}
	return n
}
