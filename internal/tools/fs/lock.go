package fs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// fileLocks serialises this service's writes to one file (fs__write,
// fs__edit), keyed by device and inode, and then takes the file's flock,
// which serialises them with the other replicas' on a workspace volume they
// share (a ReadWriteMany volume; on NFS, Linux makes flock a lock of the
// whole file that every client sees). An edit reads the file and then
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

// lock waits, within ctx, until no other call of this service (or of a
// replica sharing the volume) writes f, which fi describes, and returns
// the function that lets the next one in. A file it cannot identify is
// not locked; one whose file system has no flock is locked in this
// process only.
func (l *fileLocks) lock(ctx context.Context, rel string, f *os.File, fi os.FileInfo) (unlock func(), err error) {
	here, err := l.lockHere(ctx, rel, fi)
	if err != nil {
		return nil, err
	}
	if err := flockWithin(ctx, f); err != nil {
		here()
		return nil, registry.ToolError(fmt.Sprintf("%s is being written by another call, which did not finish in time; nothing was changed", quoteShort(rel)),
			"Try again once the other call has finished.")
	}
	return func() {
		// Closing f releases the flock too; a file closed already is left
		// alone (its number may be another file's by now).
		_ = flock(f, syscall.LOCK_UN)
		here()
	}, nil
}

// flock applies how to f's flock, through the file's own descriptor
// (Fd would make it blocking, and is no guard against a closed file).
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = syscall.Flock(int(fd), how) }); err != nil {
		return err
	}
	return ferr
}

// flockWithin takes f's exclusive flock, trying again until ctx ends (a
// blocking flock would outlive the call's deadline). A file system that
// has no flock (ENOLCK, EINVAL, ENOTSUP) leaves the file unlocked.
func flockWithin(ctx context.Context, f *os.File) error {
	wait := time.Millisecond
	for {
		err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// lockHere is lock among the calls of this process.
func (l *fileLocks) lockHere(ctx context.Context, rel string, fi os.FileInfo) (unlock func(), err error) {
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
