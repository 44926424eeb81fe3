package http

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
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
// until the background read has begun, so it is parked in the network
// poller, not queued, when the executor wakes anything.

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

// ConnContext puts the connection of a Listener (under TLS too) in the
// context of its requests.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
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
	waiting bool // awaitBackgroundRead waits for started
	started chan struct{}
	timer   *time.Timer // awaitBackgroundRead's, reused
}

func (c *watchedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	c.reading = true
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

// backgroundReadWait bounds awaitBackgroundRead for a request whose
// background read does not start (a pipelined request already buffered).
const backgroundReadWait = time.Millisecond

// awaitBackgroundRead returns once a read of r's connection is under way
// (net/http's background read, started when the body was read to its
// end), or after backgroundReadWait; it reports which. It returns at once
// for HTTP/2 and for connections not from a Listener.
func awaitBackgroundRead(r *http.Request) bool {
	c, _ := r.Context().Value(watchedConnKey{}).(*watchedConn)
	if c == nil || r.ProtoMajor != 1 {
		return false
	}
	c.mu.Lock()
	if c.reading {
		c.mu.Unlock()
		return true
	}
	c.waiting = true
	c.mu.Unlock()
	if c.timer == nil {
		c.timer = time.NewTimer(backgroundReadWait)
	} else {
		c.timer.Reset(backgroundReadWait)
	}
	defer c.timer.Stop()
	select {
	case <-c.started:
		return true
	case <-c.timer.C:
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
