package registry

import "time"

// runnerIdle is how long a handler goroutine waits for the next call
// before it exits.
const runnerIdle = 5 * time.Second

// runners are the goroutines that run tool handlers. A call is handed to
// one that is idle, or to a new one when none is; each exits after
// runnerIdle without work. A goroutine starts with a small stack that a
// handler's JSON decoding and file system calls grow (copying it) on
// every call; one that is reused keeps the stack it grew. The number of
// runners follows the calls in flight, which admission bounds.
type runners struct {
	jobs chan func()
	idle time.Duration
}

func newRunners(idle time.Duration) *runners {
	return &runners{jobs: make(chan func()), idle: idle}
}

// Go runs f on an idle runner, or on a new one.
func (r *runners) Go(f func()) {
	select {
	case r.jobs <- f:
	default:
		go r.run(f)
	}
}

func (r *runners) run(f func()) {
	f()
	t := time.NewTimer(r.idle)
	defer t.Stop()
	for {
		select {
		case f := <-r.jobs:
			f()
			t.Reset(r.idle)
		case <-t.C:
			return
		}
	}
}
