package fs

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// fileLocks serialises this service's writes to one file (fs__write,
// fs__edit), keyed by device and inode. An edit reads the file and then
// writes it back whole: another call's write in between would be lost
// while both answered ok. Programs that shell__exec or exec tools run do
// not take these locks.
type fileLocks struct {
	mu   sync.Mutex
	held map[fileKey]*fileLock
}

type fileKey struct{ dev, ino uint64 }

// fileLock is held by whoever took the one token of ch; refs counts the
// calls holding or waiting for it, so the entry lives as long as they do.
type fileLock struct {
	ch   chan struct{}
	refs int
}

// lock waits, within ctx, until no other call of this service writes the
// file fi describes, and returns the function that lets the next one in.
// A file it cannot identify is not locked.
func (l *fileLocks) lock(ctx context.Context, rel string, fi os.FileInfo) (unlock func(), err error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return func() {}, nil
	}
	key := fileKey{uint64(st.Dev), st.Ino}
	l.mu.Lock()
	if l.held == nil {
		l.held = map[fileKey]*fileLock{}
	}
	fl := l.held[key]
	if fl == nil {
		fl = &fileLock{ch: make(chan struct{}, 1)}
		l.held[key] = fl
	}
	fl.refs++
	l.mu.Unlock()
	done := func() {
		l.mu.Lock()
		if fl.refs--; fl.refs == 0 {
			delete(l.held, key)
		}
		l.mu.Unlock()
	}
	select {
	case fl.ch <- struct{}{}:
		return func() { <-fl.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, registry.ToolError(fmt.Sprintf("%s is being written by another call, which did not finish in time; nothing was changed", quoteShort(rel)),
			"Try again once the other call has finished.")
	}
}
