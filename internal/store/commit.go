package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCommitterClosed is the error of a write given to a Committer after
// Close.
var ErrCommitterClosed = errors.New("store: the store is closed")

// CommitOptions configure a Committer over transactions of type T.
type CommitOptions[T any] struct {
	// InTx runs fn in one transaction: begin, fn, commit; it rolls back
	// and returns fn's error when fn fails. Required.
	InTx func(ctx context.Context, fn func(tx T) error) error
	// Exec runs one statement without arguments in tx: the committer's
	// SAVEPOINT, RELEASE and ROLLBACK TO (the syntax SQLite and
	// PostgreSQL share), used only when a transaction of several writes
	// failed and runs again. Nil runs the writes of a transaction without
	// savepoints (each costs a round trip to a database server); then, when
	// the transaction fails with an error Alone accepts, every write is run
	// again in a transaction of its own, so a failing write still fails
	// alone.
	Exec func(ctx context.Context, tx T, stmt string) error
	// Alone reports whether a failed transaction surely did not commit and
	// its writes may be run again one by one (a statement's error, not a
	// lost connection). Used only without Exec; nil is never.
	Alone func(err error) bool
	// MaxOps bounds the writes in one transaction; 0 means 128.
	MaxOps int
	// MaxBytes bounds the sum of the writes' sizes in one transaction; 0
	// means 4 MiB. A single larger write commits alone.
	MaxBytes int
	// Detached runs the writes with a context that never ends; the
	// transaction's own context still does, so a transaction that outlives
	// every caller waiting for it is rolled back between its writes, just
	// not in the middle of one. For a driver that watches the context of
	// every statement on a goroutine of its own (the pure-Go SQLite does),
	// that goroutine costs more than the one-row write it could interrupt.
	Detached bool
	// Window is how long the committer waits for more writes after the
	// first one of a transaction arrives. 0 (the default) adds no wait:
	// a transaction takes what is already waiting, which is what piled up
	// while the previous transaction committed.
	Window time.Duration
}

// Committer is group commit: one goroutine that runs the writes waiting
// for it in one transaction, so they share one commit (and one fsync).
// When a write of a transaction that holds several fails, the transaction
// is rolled back and its writes run again, each inside a savepoint of its
// own (or, without savepoints, each alone in a transaction of its own), so
// one that fails leaves nothing behind and fails alone, and
// every write sees what the writes before it in the transaction wrote, as
// it would in transactions of their own. Do returns only after the commit
// of the transaction that holds its write succeeded; a commit that fails
// fails every write in it.
type Committer[T any] struct {
	o    CommitOptions[T]
	wake chan struct{}
	done chan struct{}

	mu     sync.Mutex
	queue  []*commitOp[T]
	closed bool

	txs, writes atomic.Uint64
}

// Stats returns how many transactions the committer has run and how many
// writes they held.
func (c *Committer[T]) Stats() (txs, writes uint64) { return c.txs.Load(), c.writes.Load() }

// Op states: queued until the committer takes it into a transaction, or
// abandoned when its caller gave up first (then it never runs).
const (
	opQueued int32 = iota
	opTaken
	opAbandoned
)

type commitOp[T any] struct {
	ctx   context.Context
	fn    func(ctx context.Context, tx T) error
	size  int
	state atomic.Int32
	done  chan error // buffered: the committer never blocks on a caller that left
}

// NewCommitter starts the committer's goroutine; Close stops it.
func NewCommitter[T any](o CommitOptions[T]) *Committer[T] {
	o.MaxOps = cmp.Or(o.MaxOps, 128)
	o.MaxBytes = cmp.Or(o.MaxBytes, 4<<20)
	c := &Committer[T]{o: o, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.loop()
	return c
}

// Do runs fn in the next transaction and returns once that transaction
// has committed: nil when fn succeeded and the commit did, fn's error
// when fn failed (its savepoint rolled back; the other writes of the
// transaction are not affected), the commit's error when the commit
// failed. size counts toward MaxBytes (the bytes fn writes, roughly).
//
// fn may run more than once: when another write of its transaction
// fails, what fn did is rolled back and it runs again. It must therefore
// set, not accumulate, what it hands back through captured variables.
//
// fn runs on the committer's goroutine with a context whose deadline is
// the latest of the transaction's writes (with Detached, one that never
// ends); what it returns to the caller
// (through variables it captures) may be read once Do returned nil. When
// ctx ends first, Do returns ctx's error: before fn was taken into a
// transaction it never runs; after, its outcome is unknown to the caller,
// as with any write whose answer is lost.
func (c *Committer[T]) Do(ctx context.Context, size int, fn func(ctx context.Context, tx T) error) error {
	return c.DoOrSettle(ctx, size, fn, nil)
}

// DoOrSettle is Do for a write whose writer must learn its outcome even
// after it stopped waiting: when ctx ends after fn was taken into a
// transaction, DoOrSettle returns without the outcome, as Do does, and
// settle (when not nil) is called with it once the transaction has ended
// (nil: fn's writes committed), on a goroutine of its own.
func (c *Committer[T]) DoOrSettle(ctx context.Context, size int, fn func(ctx context.Context, tx T) error, settle func(error)) error {
	op, err := c.enqueue(ctx, size, fn)
	if err != nil {
		return err
	}
	return c.await(ctx, op, settle)
}

// Queue is Do without the wait: fn joins the queue before Queue returns,
// so a write queued after it, by Queue or Do, commits in the same
// transaction as it (after it) or in a later one; done is called with
// what Do would have returned, on a goroutine of its own.
func (c *Committer[T]) Queue(ctx context.Context, size int, fn func(ctx context.Context, tx T) error, done func(error)) {
	op, err := c.enqueue(ctx, size, fn)
	if err != nil {
		go done(err)
		return
	}
	go func() { done(c.await(ctx, op, nil)) }()
}

// enqueue puts fn in the queue and wakes the committer.
func (c *Committer[T]) enqueue(ctx context.Context, size int, fn func(ctx context.Context, tx T) error) (*commitOp[T], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	op := &commitOp[T]{ctx: ctx, fn: fn, size: size, done: make(chan error, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrCommitterClosed
	}
	c.queue = append(c.queue, op)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return op, nil
}

// await waits for op's outcome as DoOrSettle does.
func (c *Committer[T]) await(ctx context.Context, op *commitOp[T], settle func(error)) error {
	select {
	case err := <-op.done:
		return err
	case <-ctx.Done():
		if op.state.CompareAndSwap(opQueued, opAbandoned) {
			return ctx.Err()
		}
		// Taken: the commit may be under way; wait no longer than the
		// caller's deadline, but take the answer if it is already there.
		select {
		case err := <-op.done:
			return err
		default:
			if settle != nil {
				go func() { settle(<-op.done) }() // every write taken is answered
			}
			return fmt.Errorf("store: outcome of the write unknown: %w", ctx.Err())
		}
	}
}

// Close commits what is queued and stops the committer; later writes fail
// with ErrCommitterClosed.
func (c *Committer[T]) Close() {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if !already {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	<-c.done
}

func (c *Committer[T]) loop() {
	defer close(c.done)
	var window *time.Timer
	for {
		<-c.wake
		if c.o.Window > 0 {
			if window == nil {
				window = time.NewTimer(c.o.Window)
			} else {
				window.Reset(c.o.Window)
			}
			c.waitWindow(window)
		}
		for {
			batch, closed := c.take()
			if len(batch) > 0 {
				c.commit(batch)
				continue
			}
			if closed {
				return
			}
			break
		}
	}
}

// waitWindow waits for the window to pass or a full transaction's worth
// of writes, whichever comes first.
func (c *Committer[T]) waitWindow(t *time.Timer) {
	for {
		c.mu.Lock()
		full := len(c.queue) >= c.o.MaxOps || c.closed
		c.mu.Unlock()
		if full {
			t.Stop() // no stale tick is left behind (Go 1.23 timers)
			return
		}
		select {
		case <-t.C:
			return
		case <-c.wake:
		}
	}
}

// take removes the next transaction's writes from the queue, within the
// bounds, skipping the ones abandoned.
func (c *Committer[T]) take() ([]*commitOp[T], bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var batch []*commitOp[T]
	bytes, i := 0, 0
	for ; i < len(c.queue) && len(batch) < c.o.MaxOps; i++ {
		op := c.queue[i]
		if len(batch) > 0 && bytes+op.size > c.o.MaxBytes {
			break
		}
		if !op.state.CompareAndSwap(opQueued, opTaken) {
			continue
		}
		batch = append(batch, op)
		bytes += op.size
	}
	n := copy(c.queue, c.queue[i:])
	clear(c.queue[n:])
	c.queue = c.queue[:n]
	return batch, c.closed
}

// commit runs batch in one transaction and answers every write in it.
func (c *Committer[T]) commit(batch []*commitOp[T]) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	c.txs.Add(1)
	c.writes.Add(uint64(len(batch)))
	errs := make([]error, len(batch))
	wctx := ctx // the writes' context
	if c.o.Detached {
		wctx = context.WithoutCancel(ctx)
	}
	if c.o.Exec == nil {
		err := c.o.InTx(ctx, func(tx T) error {
			for i, op := range batch {
				if errs[i] = op.ctx.Err(); errs[i] != nil {
					continue // its caller has left: do not write it
				}
				if err := op.fn(wctx, tx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && len(batch) > 1 && c.o.Alone != nil && c.o.Alone(err) {
			for i, op := range batch {
				if errs[i] == nil {
					c.txs.Add(1)
					errs[i] = c.o.InTx(ctx, func(tx T) error { return op.fn(wctx, tx) })
				}
			}
			err = nil
		}
		for i, op := range batch {
			op.done <- cmp.Or(errs[i], err)
		}
		return
	}
	savepoints := len(batch) > 1
	if savepoints {
		// First without savepoints, which cost two statements per write:
		// when every write succeeds, as they nearly always do, that is
		// the whole commit. When one fails, the transaction is rolled back
		// and the group runs again, each write in a savepoint of its own.
		failed := false
		err := c.o.InTx(ctx, func(tx T) error {
			for i, op := range batch {
				if errs[i] = op.ctx.Err(); errs[i] != nil {
					continue // its caller has left: do not write it
				}
				if err := op.fn(wctx, tx); err != nil {
					failed = true
					return err
				}
			}
			return nil
		})
		if !failed {
			for i, op := range batch {
				op.done <- cmp.Or(errs[i], err)
			}
			return
		}
		clear(errs)
		c.txs.Add(1)
	}
	err := c.o.InTx(ctx, func(tx T) error {
		for i, op := range batch {
			if err := op.ctx.Err(); err != nil {
				errs[i] = err // its caller has left: do not write it
				continue
			}
			if !savepoints {
				errs[i] = op.fn(wctx, tx)
				return errs[i]
			}
			if err := c.o.Exec(wctx, tx, `SAVEPOINT op`); err != nil {
				return err
			}
			if errs[i] = op.fn(wctx, tx); errs[i] != nil {
				// A failed savepoint means the transaction itself is gone
				// (the database rolled it back): fail them all.
				if err := c.o.Exec(wctx, tx, `ROLLBACK TO op`); err != nil {
					return fmt.Errorf("store: rolling back one write of a group commit: %w (after %w)", err, errs[i])
				}
			}
			if err := c.o.Exec(wctx, tx, `RELEASE op`); err != nil {
				return err
			}
		}
		return nil
	})
	for i, op := range batch {
		switch {
		case errs[i] != nil:
			op.done <- errs[i]
		default:
			op.done <- err
		}
	}
}

// batchContext is the context of one transaction: it ends at the latest
// deadline of its writes (none when one of them has none), so it is never
// cut short for a write whose caller is still waiting, and a stalled
// database fails it once nobody waits any more.
func batchContext[T any](batch []*commitOp[T]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, op := range batch {
		d, ok := op.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
