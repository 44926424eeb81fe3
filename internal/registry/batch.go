package registry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// MaxBatchCalls is the most calls one batch (or plan) may hold.
const MaxBatchCalls = 50

// Defaults of BatchOptions.
const (
	DefaultBatchParallelism = 10
	DefaultCapacityWait     = 2 * time.Second
)

// ErrBatchTooLarge means a batch holds more than MaxBatchCalls calls.
var ErrBatchTooLarge = fmt.Errorf("a batch holds at most %d calls", MaxBatchCalls)

// BatchOptions shape how ExecuteBatch schedules calls.
type BatchOptions struct {
	// Parallelism bounds the read_only calls of a batch that run at once;
	// 0 means DefaultBatchParallelism.
	Parallelism int
	// CapacityWait is how long a call of the batch waits for a free slot
	// when the executor's MaxConcurrency is reached, before it is answered
	// as not run; 0 means DefaultCapacityWait. A batch thus never runs
	// more calls than the global limit allows.
	CapacityWait time.Duration
	// Positions, when it holds one number per call, gives each call's
	// position (1 for the first) in the request the calls came in, for a
	// request some of whose calls were answered before the batch (a call
	// that could not be read, an id another call has): the messages that
	// name a call of the batch ("not started: call N ...") name it by its
	// position in the request. Otherwise call i is at position i+1.
	Positions []int
}

func (o BatchOptions) withDefaults() BatchOptions {
	if o.Parallelism <= 0 {
		o.Parallelism = DefaultBatchParallelism
	}
	if o.CapacityWait <= 0 {
		o.CapacityWait = DefaultCapacityWait
	}
	return o
}

// ExecuteBatch runs calls for caller and returns their results in request
// order. Each call goes through Execute, so lookup, validation, policy,
// timeouts and metrics apply to each. Consecutive calls of read_only tools
// (and of unknown names, which only produce an error) run concurrently, at
// most o.Parallelism at once; a call of any other tier is a barrier: it
// starts once everything before it has finished, runs alone, and what
// follows waits for it. One call's failure never stops the others. Once
// the executor drains (Drain), calls not started are not started, and get
// E_CANCELED results saying that the service is shutting down. When
// ctx ends, running calls are cancelled and calls not started get
// E_CANCELED results (one whose tool is not read_only and had started
// says that its side effects are unknown).
//
// A call that waits for approval (or is still running, answered from the
// record of an earlier call with its toolCallId) has not finished: the
// calls that would start only after it finished (every later call but
// the read_only ones running alongside it) do not start, and get
// E_CANCELED results that name it ("not started: call N ... waits for
// approval ..."). Nothing of them ran, so the batch sent again with the
// same toolCallIds once that call is done goes on where it stopped.
//
// A call that finds no free slot within o.CapacityWait gets an E_CANCELED
// result saying it did not run. When that happens to every call, so that
// nothing ran, the error is ErrOverloaded and there are no results. A call
// the store could not record is answered the same way (E_CANCELED, not
// run), and a batch none of whose calls could be recorded fails with
// ErrUnavailable; a call whose toolCallId names another call gets an
// E_INVALID_ARGUMENTS result. The error is ErrBatchTooLarge beyond
// MaxBatchCalls calls.
func (e *Executor) ExecuteBatch(ctx context.Context, caller *Caller, calls []*Call, o BatchOptions) ([]*Result, error) {
	if len(calls) > MaxBatchCalls {
		return nil, ErrBatchTooLarge
	}
	o = o.withDefaults()
	reg := e.Registry()
	ctx, span := e.tracer.Start(ctx, "execute_batch", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.Int("toolsvc.batch.calls", len(calls))))
	defer span.End()
	ctx = context.WithValue(ctx, capacityWaitKey{}, o.CapacityWait)

	b := &batch{e: e, caller: caller, calls: calls, results: make([]*Result, len(calls)), refused: make([]error, len(calls)), answered: make([]bool, len(calls))}
	if len(o.Positions) == len(calls) {
		b.positions = o.Positions
	}
	for i := 0; i < len(calls); {
		if ctx.Err() != nil || e.isDraining() {
			b.notStarted(ctx, i, len(calls))
			break
		}
		j := i + 1
		if concurrent(reg, calls[i]) {
			for j < len(calls) && concurrent(reg, calls[j]) {
				j++
			}
			b.group(ctx, i, j, o.Parallelism)
		} else {
			b.run(ctx, i)
		}
		if k := b.unfinished(i, j); k >= 0 {
			b.held(k, j, len(calls))
			break
		}
		i = j
	}
	results, err := b.finish(o.CapacityWait)
	// The calls the batch answered itself (not started, not run, an id
	// of another call) have the audit line the executor gives the others.
	for i, res := range results {
		if b.answered[i] {
			e.AuditRefused(ctx, caller, res)
		}
	}
	return results, err
}

// concurrent reports whether a call may run alongside its neighbours:
// read_only tools, and names that are not registered (they only produce
// an error result).
func concurrent(reg *Registry, c *Call) bool {
	t, ok := reg.Lookup(c.ToolName)
	return !ok || t.Tier == ReadOnly
}

// HeldText is in the message of a call of a batch that did not start
// because a call before it, which it would have started after, has not
// finished: it waits for approval, or still runs.
const HeldText = "would start only after it"

// ConflictText is what the result of a call of a batch says when its
// toolCallId names an earlier call with another tool, other arguments or
// another instance.
const ConflictText = "already names a call with another tool, other arguments or another context.instanceKey"

// batch is one ExecuteBatch in progress.
type batch struct {
	e       *Executor
	caller  *Caller
	calls   []*Call
	results []*Result
	// refused holds, for a call that did not run because the service had
	// no capacity or the store did not answer, why; when every call of
	// the batch was refused the batch is, with the first call's reason.
	refused []error
	// answered marks the results the batch made itself (errorResult).
	answered []bool
	// positions are the calls' positions in the request (BatchOptions),
	// or nil: call i is at i+1.
	positions []int
}

// position is call i's position in the request, 1 for the first.
func (b *batch) position(i int) int {
	if b.positions != nil {
		return b.positions[i]
	}
	return i + 1
}

func (b *batch) run(ctx context.Context, i int) {
	res, err := b.e.Execute(ctx, b.caller, b.calls[i])
	switch {
	case err == nil:
		b.results[i] = res
	case errors.Is(err, ErrOverloaded), errors.Is(err, ErrUnavailable):
		b.refused[i] = err
	case errors.Is(err, ErrConflict):
		b.results[i] = b.errorResult(i, &Error{Code: CodeInvalidArguments,
			Message:    fmt.Sprintf("not run: toolCallId %q %s", b.calls[i].ToolCallID, ConflictText),
			Suggestion: "Give a new call a new toolCallId; send the same tool and arguments to read the earlier call's result."})
	default:
		b.results[i] = b.errorResult(i, &Error{Code: CodeInternal,
			Message: "not run: the call could not be taken; nothing was executed"})
	}
}

// group runs calls[from:to] with at most n at once, and at most as many
// of one tool at once as the tool's own limit lets run, nor more in all
// than the service's: the calls beyond wait for the batch's own to end,
// rather than for a slot those hold, which they could not get within the
// capacity wait while the batch's own calls are slow. Once ctx ends,
// calls not yet started are not started.
func (b *batch) group(ctx context.Context, from, to, n int) {
	if b.e.slots != nil {
		n = min(n, cap(b.e.slots))
	}
	sem := make(chan struct{}, n)
	perTool := map[string]chan struct{}{}
	reg := b.e.Registry()
	var wg sync.WaitGroup
	for i := from; i < to; i++ {
		var own chan struct{} // nil: no limit of the tool's own
		if t, ok := reg.Lookup(b.calls[i].ToolName); ok && t.slots != nil && cap(t.slots) < n {
			if own = perTool[t.Name]; own == nil {
				own = make(chan struct{}, cap(t.slots))
				perTool[t.Name] = own
			}
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		case <-b.e.draining:
		}
		if ctx.Err() == nil && !b.e.isDraining() && own != nil {
			select {
			case own <- struct{}{}:
			case <-ctx.Done():
			case <-b.e.draining:
			}
		}
		if ctx.Err() != nil || b.e.isDraining() {
			b.notStarted(ctx, i, to)
			break
		}
		wg.Go(func() {
			defer func() {
				if own != nil {
					<-own
				}
				<-sem
			}()
			b.run(ctx, i)
		})
	}
	wg.Wait()
}

// unfinished returns the first of calls[from:to] that waits for approval
// or is still running, or -1.
func (b *batch) unfinished(from, to int) int {
	for k := from; k < to; k++ {
		if r := b.results[k]; r != nil && (r.Status == StatusPendingApproval || r.Status == StatusRunning) {
			return k
		}
	}
	return -1
}

// held answers calls[from:to], which would start only after call k
// finished, as not started: k waits for approval or still runs.
func (b *batch) held(k, from, to int) {
	what := "waits for approval"
	if b.results[k].Status == StatusRunning {
		what = "is still running"
	}
	for i := from; i < to; i++ {
		b.results[i] = b.errorResult(i, &Error{Code: CodeCanceled,
			Message: fmt.Sprintf("not started: call %d of the batch (toolCallId %q) %s, and this call %s finished; nothing was executed",
				b.position(k), b.results[k].ToolCallID, what, HeldText),
			Suggestion: fmt.Sprintf("Send this call again once call %d has finished: nothing of it ran, so its toolCallId may be used again.", b.position(k))})
	}
}

func (b *batch) notStarted(ctx context.Context, from, to int) {
	for i := from; i < to; i++ {
		err := canceledError(ctx)
		err.Message = "not started: " + err.Message
		if ctx.Err() == nil { // draining
			err.Message = "not started: the service is shutting down; nothing was executed"
			err.Suggestion = "Retry this call: another instance, or this one once restarted, will run it (nothing of it ran, so its toolCallId may be used again)."
		}
		b.results[i] = b.errorResult(i, err)
	}
}

func (b *batch) errorResult(i int, err *Error) *Result {
	b.answered[i] = true
	c := b.calls[i]
	res := &Result{ToolCallID: c.ToolCallID, ToolName: c.ToolName, Status: StatusError, Error: err}
	if res.ToolCallID == "" {
		res.ToolCallID = NewCallID()
	}
	if t, ok := b.e.Registry().Lookup(c.ToolName); ok {
		err.Name = t.Name
	}
	return res
}

func (b *batch) finish(wait time.Duration) ([]*Result, error) {
	n := 0
	for i, err := range b.refused {
		if err == nil {
			continue
		}
		n++
		e := &Error{Code: CodeCanceled,
			Message:    fmt.Sprintf("not run: the service is at its limit of calls in flight and had no capacity for this call within %s; nothing was executed", wait),
			Suggestion: "Retry this call in a moment."}
		if limit := (*ToolLimitError)(nil); errors.As(err, &limit) {
			e.Message = fmt.Sprintf("not run: tool %s runs at most %d calls at once, and none of its calls ended within %s; nothing was executed", limit.Tool, limit.Max, wait)
		}
		if errors.Is(err, ErrUnavailable) {
			e.Message = "not run: the call store did not answer, so the call could not be recorded; nothing was executed"
		}
		b.results[i] = b.errorResult(i, e)
	}
	if n > 0 && n == len(b.calls) {
		return nil, b.refused[0]
	}
	return b.results, nil
}
