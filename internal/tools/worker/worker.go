// Package worker runs the tools whose memory a model drives (jq programs,
// text transforms, data parsing) in child processes of the toolsvc binary
// under a kernel-enforced memory ceiling (RLIMIT_DATA and RLIMIT_AS), so
// that a runaway call fails alone, as an E_TOOL result naming the limit,
// instead of taking the service down.
//
// The children form a pool of at most Size processes: a worker serves one
// call at a time, goes back to the pool when the call ends normally, and
// is killed when the call's context ends (its timeout or the client's
// cancellation), so a timed-out call stops burning CPU at once. A worker
// that dies (the ceiling, a crash) is replaced by a fresh one on the next
// call. A call that finds all Size workers busy waits for one, within its
// own deadline: the tools are CPU-bound, so more processes than that
// would only share the same cores, and the pool's memory stays within
// Size × MemoryLimit. Callers with calls waiting take turns, so one
// caller's many calls do not queue another's behind them all.
package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// Command is the first argument with which the pool re-executes the
// toolsvc binary as a worker. The main program must hand the remaining
// arguments to Serve when it sees it.
const Command = "__tool-worker"

// The defaults of Options.
const (
	DefaultMemoryLimit   = 512 << 20
	DefaultResponseLimit = 16 << 20
	// MinMemoryLimit is the least ceiling a worker can work under. The
	// address space it bounds grows in the Go heap's arenas of 64 MiB, and
	// every new thread takes a stack of 8 MiB in a binary built with cgo:
	// under 64 MiB, an allocation of 8 MiB after four threads failed one
	// start in seven, wherever the runtime's first arena happened to be
	// full.
	MinMemoryLimit = 128 << 20
)

// LimitSetting is the setting that configures the ceiling; error messages
// name it so that an operator knows what to raise.
const LimitSetting = "TOOLSVC_TOOL_MEMORY_LIMIT"

// Options configure a Pool.
type Options struct {
	// Exe is the binary to re-execute (os.Executable() of toolsvc).
	Exe string
	// MemoryLimit is each worker's ceiling in bytes: how much private
	// writable memory (RLIMIT_DATA: the heap, stacks) and address space
	// (RLIMIT_AS) it may map beyond what it holds at start; default
	// 512 MiB.
	MemoryLimit int64
	// Size is how many workers may run at once, idle ones included;
	// zero or less means DefaultSize.
	Size int
	// ResponseLimit bounds the bytes of one call's output a worker may
	// send back (default 16 MiB); a larger output is an E_TOOL error.
	ResponseLimit int
	// Env is the workers' environment. Leave the service's settings out
	// (its credentials have no business in a process that runs
	// model-supplied programs); the Go runtime's own variables (GODEBUG,
	// GOMAXPROCS) may go in.
	Env []string
	// Logger receives worker failures; nil discards them.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = DefaultMemoryLimit
	}
	if o.Size <= 0 {
		o.Size = DefaultSize()
	}
	if o.ResponseLimit <= 0 {
		o.ResponseLimit = DefaultResponseLimit
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// DefaultSize is the pool's size when Options leave it out: two workers
// per CPU the Go runtime may use.
func DefaultSize() int { return 2 * runtime.GOMAXPROCS(0) }

// Pool starts, reuses and kills worker processes.
type Pool struct {
	o Options
	// slots are the Size workers calls may hold, taken by callers in turn.
	slots *turns
	// outputs bounds the bytes of the outputs the executor is still
	// encoding and spilling (Size times ResponseLimit: as much again as
	// the workers may hold), so workers go on making outputs while
	// others are encoded, and those waiting are bounded.
	outputs *semaphore.Weighted
	mu      sync.Mutex
	idle    []*proc
	closed  bool
	// started counts the processes started, for tests.
	started atomic.Int64
}

// New returns a pool; no process is started until the first call.
func New(o Options) (*Pool, error) {
	o = o.withDefaults()
	if o.Exe == "" {
		return nil, errors.New("worker: no executable")
	}
	if o.MemoryLimit < MinMemoryLimit {
		return nil, fmt.Errorf("%s is %d bytes; a worker needs at least %d", LimitSetting, o.MemoryLimit, MinMemoryLimit)
	}
	return &Pool{o: o, slots: newTurns(o.Size), outputs: semaphore.NewWeighted(int64(o.Size) * int64(o.ResponseLimit))}, nil
}

// MemoryLimit returns the ceiling of each worker.
func (p *Pool) MemoryLimit() int64 { return p.o.MemoryLimit }

// Size returns how many workers may run at once.
func (p *Pool) Size() int { return p.o.Size }

// Close kills the idle workers; calls in flight finish or are killed by
// their contexts.
func (p *Pool) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, w := range idle {
		w.kill()
	}
}

// Confine returns copies of tools whose handlers run in the pool's
// workers. The worker must serve the same tools (Serve).
func (p *Pool) Confine(tools []*registry.Tool) []*registry.Tool {
	out := make([]*registry.Tool, len(tools))
	for i, t := range tools {
		c := *t
		name := t.Name
		c.Handler = registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
			return p.Call(ctx, name, req)
		})
		out[i] = &c
	}
	return out
}

// request is what the parent sends a worker for one call.
type request struct {
	Tool           string               `json:"tool"`
	CallID         string               `json:"callId,omitempty"`
	Arguments      json.RawMessage      `json:"arguments"`
	Context        registry.CallContext `json:"context,omitzero"`
	MaxOutputBytes int                  `json:"maxOutputBytes,omitempty"`
	// TimeoutMs is the time left when the call was sent, plus a second;
	// the worker's handler gets a context with that deadline (the parent
	// kills the worker when the call's own context ends).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
}

// response is a worker's answer: output, or the tool's error, or a
// failure of another kind.
type response struct {
	Output  json.RawMessage `json:"output,omitempty"`
	Error   *registry.Error `json:"error,omitempty"`
	Failure string          `json:"failure,omitempty"`
	// String says the output was a Go string, which the executor cuts as
	// text rather than as JSON.
	String bool `json:"string,omitempty"`
}

// Call runs tool in a worker with req's arguments.
func (p *Pool) Call(ctx context.Context, tool string, req *registry.Request) (any, error) {
	r := request{Tool: tool, CallID: req.CallID, Arguments: req.Arguments, Context: req.Context, MaxOutputBytes: req.MaxOutputBytes}
	if d, ok := ctx.Deadline(); ok {
		// A second later than the call's: the parent's deadline kills the
		// worker and answers as every tool's timeout does; the worker's
		// own is a backstop.
		r.TimeoutMs = max(time.Until(d).Milliseconds(), 1) + 1000
	}
	msg, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	// Wait for a worker of the Size the pool may run, within the call's
	// deadline, taking turns with other callers' calls.
	var caller string
	if req.Caller != nil {
		caller = req.Caller.ID
	}
	if err := p.slots.acquire(ctx, caller); err != nil {
		return nil, err
	}
	out, err := p.run(ctx, msg)
	if n := int64(outputBytes(out)); n > int64(req.MaxOutputBytes) {
		// An output the executor will cut, and spill whole, is counted
		// against the pool's output budget until that is done, and the
		// slot is kept until it fits: with nothing but the slot, workers
		// made outputs of up to ResponseLimit faster than they were
		// encoded and spilled, and every call in flight held one in the
		// service's memory (120 calls of a 15 MB string: 1.7 GB).
		if err := p.outputs.Acquire(ctx, n); err != nil {
			p.slots.release(caller)
			return nil, err
		}
		req.AfterOutput(func() { p.outputs.Release(n) })
	}
	p.slots.release(caller)
	return out, err
}

// run sends msg to a worker and returns its answer. An idle worker may
// have died since its last call; a failed write to it is retried once on
// a fresh one.
func (p *Pool) run(ctx context.Context, msg []byte) (any, error) {
	for attempt := 0; ; attempt++ {
		w, fresh, err := p.get()
		if err != nil {
			return nil, err
		}
		out, sent, err := p.exchange(ctx, w, msg)
		if !sent && !fresh && attempt == 0 && ctx.Err() == nil {
			w.kill()
			continue
		}
		return out, err
	}
}

// outputBytes is the size of a worker's output as the executor gets it.
func outputBytes(out any) int {
	switch o := out.(type) {
	case string:
		return len(o)
	case json.RawMessage:
		return len(o)
	}
	return 0
}

// exchange sends msg to w and waits for its answer or ctx's end. sent
// says whether the request reached the worker.
func (p *Pool) exchange(ctx context.Context, w *proc, msg []byte) (any, bool, error) {
	type reply struct {
		res  *response
		sent bool
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		if err := writeFrame(w.stdin, msg); err != nil {
			done <- reply{err: err}
			return
		}
		b, err := readFrame(w.stdout, p.o.ResponseLimit)
		if err != nil {
			done <- reply{sent: true, err: err}
			return
		}
		var res response
		if err := json.Unmarshal(b, &res); err != nil {
			done <- reply{sent: true, err: fmt.Errorf("worker: bad response: %w", err)}
			return
		}
		done <- reply{res: &res, sent: true}
	}()
	select {
	case <-ctx.Done():
		// The handler is abandoned: kill the worker so its CPU and
		// memory are given back now, not when the computation ends.
		w.kill()
		<-done
		return nil, true, ctx.Err()
	case r := <-done:
		if r.err != nil {
			return nil, r.sent, p.failed(w, r.err)
		}
		p.put(w)
		switch {
		case r.res.Error != nil:
			return nil, true, r.res.Error
		case r.res.Failure != "":
			return nil, true, errors.New(r.res.Failure)
		}
		if r.res.String {
			var s string
			if err := json.Unmarshal(r.res.Output, &s); err != nil {
				return nil, true, fmt.Errorf("worker: bad string output: %w", err)
			}
			return s, true, nil
		}
		return r.res.Output, true, nil
	}
}

// failed turns a broken exchange into the call's error, after the worker
// has exited: the memory ceiling, a stack overflow, or another death.
func (p *Pool) failed(w *proc, err error) error {
	var big *tooLargeError
	if errors.As(err, &big) {
		w.kill()
		return registry.ToolError(
			fmt.Sprintf("the output is %d bytes, more than the %d bytes a confined tool may return", big.n, big.limit),
			"Ask for fewer results (maxResults, limit) or a smaller part of the input.")
	}
	state := w.kill()
	tail := w.stderr.String()
	limit := formatBytes(p.o.MemoryLimit)
	why := firstLine(tail)
	if why == "" {
		why = state
	}
	p.o.Logger.Warn("tool worker died during a call", "limit", p.o.MemoryLimit, "peakRSS", w.peak(), "state", state, "stderr", why, "err", err)
	switch {
	case strings.HasSuffix(state, "signal: killed") && !sandbox.OutOfMemory(tail) && w.peak() < p.o.MemoryLimit:
		// The ceiling makes an allocation fail, which the runtime reports
		// and exits on; SIGKILL below it came from outside, most often the
		// kernel's out-of-memory killer of a container with less memory
		// than the tools may take.
		return registry.ToolError(
			fmt.Sprintf("the process running the call was killed (SIGKILL) holding %s, below the tool memory limit of %s (%s): most likely by the kernel's out-of-memory killer, when the container's or the machine's memory ran out",
				formatBytes(w.peak()), limit, LimitSetting),
			"Retry later or with a smaller input. If this recurs, the operator should give the service more memory, or lower "+LimitSetting+" or TOOLSVC_TOOL_WORKERS to fit the memory it has.")
	case strings.Contains(tail, "stack overflow") || strings.Contains(tail, "stack exceeds"):
		return registry.ToolError(
			fmt.Sprintf("the call recursed too deeply for the tool memory limit of %s (%s) and was stopped", limit, LimitSetting),
			"The program recurses without end or the input is nested too deeply; add a base case or flatten the input.")
	case sandbox.OutOfMemory(tail) || w.peak() >= p.o.MemoryLimit/2:
		return registry.ToolError(
			fmt.Sprintf("the call needed more memory than the tool memory limit of %s (%s) and was stopped", limit, LimitSetting),
			"The program or input grows without bound; make it smaller (fewer repetitions, less nesting, a smaller input).")
	}
	// Handlers' panics come back as answers, so a worker that dies has
	// almost always failed to get memory where the Go runtime cannot say
	// so (a thread, the collector's own structures).
	return registry.ToolError(
		fmt.Sprintf("the process running the call died (%s), most likely at the tool memory limit of %s (%s)", why, limit, LimitSetting),
		"The program or input grows without bound; make it smaller (fewer repetitions, less nesting, a smaller input).")
}

// get returns an idle worker or starts one; fresh says it was started now.
func (p *Pool) get() (*proc, bool, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, false, nil
	}
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, false, errors.New("worker pool closed")
	}
	w, err := p.start()
	return w, true, err
}

func (p *Pool) put(w *proc) {
	p.mu.Lock()
	if !p.closed && len(p.idle) < p.o.Size {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	w.kill()
}

// proc is one worker process.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	stderr *headBuffer
	once   sync.Once
	state  string
}

// runtimeEnv is what a worker's runtimes are told: no goroutine dump on a
// fatal error (the first line says it all), and, in a binary built with
// cgo, one C malloc arena: glibc reserves 64 MiB of address space for the
// arena of every thread that calls malloc, which the ceiling counts.
func runtimeEnv() []string {
	return []string{"GOTRACEBACK=none", "MALLOC_ARENA_MAX=1"}
}

func (p *Pool) start() (*proc, error) {
	p.started.Add(1)
	cmd := exec.Command(p.o.Exe, Command, strconv.FormatInt(p.o.MemoryLimit, 10))
	cmd.Env = append(runtimeEnv(), p.o.Env...)
	cmd.SysProcAttr = procAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	w := &proc{cmd: cmd, stdin: stdin, stdout: stdout, stderr: &headBuffer{max: 4096}}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a tool worker: %w", err)
	}
	return w, nil
}

// kill ends the worker (if it has not ended) and reaps it, once; it
// returns how it ended.
func (w *proc) kill() string {
	w.once.Do(func() {
		_ = w.stdin.Close()
		_ = w.cmd.Process.Kill()
		err := w.cmd.Wait()
		w.state = w.cmd.ProcessState.String()
		if err != nil && w.cmd.ProcessState == nil {
			w.state = err.Error()
		}
	})
	return w.state
}

// peak returns the most memory (RSS) the ended worker held, in bytes.
func (w *proc) peak() int64 {
	if w.cmd.ProcessState == nil {
		return 0
	}
	if ru, ok := w.cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10 // kilobytes on Linux
	}
	return 0
}

func writeFrame(w io.Writer, b []byte) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(b)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(b)
	return err
}

type tooLargeError struct{ n, limit int }

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("frame of %d bytes exceeds %d", e.n, e.limit)
}

func readFrame(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > limit {
		return nil, &tooLargeError{n: n, limit: limit}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// headBuffer keeps the first max bytes written to it: the Go runtime's
// fatal error comes first, before any traceback.
type headBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *headBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := t.max - len(t.b); n > 0 {
		t.b = append(t.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// formatBytes writes n in the largest binary unit that divides it.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
