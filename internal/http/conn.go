package http

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// Why the server watches its connections' reads.
//
// Once a handler has read an HTTP/1.x request body to its end, net/http
// starts a goroutine that reads the connection in the background (to
// notice a client that goes away), and after the handler returns it waits
// for that goroutine before reading the next request. The new goroutine
// is queued to run next on the current P, but the executor then wakes
// another goroutine (the tool's runner, the store's committer), which
// takes that place and sends the background read to the back of the run
// queue. So the connection's next request waits behind every goroutine
// queued on that P: under load this was most of the read-only p99 (36 ms
// against a p50 of 1.6 ms, on one CPU).
//
// A handler that calls awaitBackgroundRead after reading the body parks
// until the background read has begun: that goroutine is then parked in
// the network poller, not queued, when the executor wakes anything.
// Under TLS the server does not wait (see awaitBackgroundRead).

// Listener wraps ln so that awaitBackgroundRead can tell when a
// connection's read begins. The http.Server that serves it must have
// ConnContext as its ConnContext.
func Listener(ln net.Listener) net.Listener { return watchListener{ln} }

type watchListener struct{ net.Listener }

func (l watchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &watchedConn{Conn: c, started: make(chan struct{}, 1)}, nil
}

// ConnContext puts a plain connection of a Listener in the context of its
// requests.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if wc, ok := c.(*watchedConn); ok {
		return context.WithValue(ctx, watchedConnKey{}, wc)
	}
	return ctx
}

type watchedConnKey struct{}

// watchedConn is a connection that reports when a read begins.
type watchedConn struct {
	net.Conn
	mu      sync.Mutex
	reading bool // a Read is in progress
	lastLen int  // the length asked of the last Read begun
	waiting bool // awaitBackgroundRead waits for started
	started chan struct{}
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.reading, c.lastLen = true, len(p)
	if c.waiting {
		c.waiting = false
		c.started <- struct{}{} // never blocks: one waiter, one slot
	}
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.reading = false
	c.mu.Unlock()
	return n, err
}

// CloseWrite half-closes a TCP connection, as net/http does to let a
// client read an error before the connection closes.
func (c *watchedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// awaitBackgroundRead returns once net/http's background read of r's
// connection has begun, which it starts as the body is read to its end,
// and reports whether it waited for it or found it begun. It returns
// false at once for HTTP/2, for TLS and for connections not from a
// Listener, and when r's context ends.
//
// No timer bounds the wait (one per request cost ~6 % of a read-only
// call's CPU): on a plain HTTP/1.x connection the background read always
// starts, and its read is the only one of a single byte (net/http reads
// requests through a 4 KiB buffer), so a read of one byte already begun
// and ended means it has run. TLS is left out because its reads of the
// connection do not keep those sizes.
func awaitBackgroundRead(r *http.Request) bool {
	c, _ := r.Context().Value(watchedConnKey{}).(*watchedConn)
	if c == nil || r.ProtoMajor != 1 || r.TLS != nil {
		return false
	}
	c.mu.Lock()
	if c.reading || c.lastLen == 1 {
		c.mu.Unlock()
		return true
	}
	c.waiting = true
	c.mu.Unlock()
	select {
	case <-c.started:
		return true
	case <-r.Context().Done():
	}
	c.mu.Lock()
	signalled := !c.waiting
	c.waiting = false
	c.mu.Unlock()
	if signalled {
		<-c.started // sent under the lock, before Read cleared waiting
	}
	return signalled
}
