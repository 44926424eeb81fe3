package http

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// serveWatched serves h on loopback through Listener and ConnContext, as
// cmd/toolsvc does.
func serveWatched(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h, ConnContext: ConnContext}
	go hs.Serve(Listener(ln))
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// TestAwaitBackgroundRead: after a handler has read a request body to its
// end, net/http's background read of the connection is seen to begin, on
// each request of a kept-alive connection. Without a watched connection
// (a plain listener) it returns at once.
func TestAwaitBackgroundRead(t *testing.T) {
	var mu sync.Mutex
	var seen []bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			t.Error(err)
		}
		began := awaitBackgroundRead(r)
		mu.Lock()
		seen = append(seen, began)
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	addr := serveWatched(t, h)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	for i := range 5 {
		resp, err := client.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"n":`+strings.Repeat("1", i+1)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	mu.Lock()
	if len(seen) != 5 {
		t.Fatalf("%d requests handled, want 5", len(seen))
	}
	for i, began := range seen {
		if !began {
			t.Errorf("request %d: the background read was not seen to begin", i+1)
		}
	}
	mu.Unlock()

	plain := httptest.NewServer(h)
	defer plain.Close()
	resp, err := plain.Client().Post(plain.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 6 || seen[5] {
		t.Error("a connection not from Listener reported a read")
	}
}

// TestAwaitBackgroundReadGivesUp: with no read begun, it returns after
// its bound, reporting so; a read begun while it waits wakes it.
func TestAwaitBackgroundReadGivesUp(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	wc := &watchedConn{Conn: server, started: make(chan struct{}, 1)}
	r := httptest.NewRequest("POST", "/", nil).WithContext(context.WithValue(context.Background(), watchedConnKey{}, wc))
	if awaitBackgroundRead(r) {
		t.Error("no read began, but it reported one")
	}
	// A read that begins while it waits: the reader blocks in Read until
	// the client writes.
	done := make(chan bool)
	go func() { done <- awaitBackgroundRead(r) }()
	readDone := make(chan struct{})
	go func() {
		wc.Read(make([]byte, 1))
		close(readDone)
	}()
	if !<-done {
		// The read may have begun before the wait: then reading was set,
		// which also reports true. False means the read went unseen.
		t.Error("a read began, but it was not seen")
	}
	client.Write([]byte("x"))
	<-readDone
	// Stale signals do not leak into the next wait.
	if awaitBackgroundRead(r) {
		t.Error("after the read ended, a wait with no read reported one")
	}
}

// TestWatchedConnCloseWrite: a watched TCP connection still half-closes,
// as net/http does before closing a connection whose request it refused,
// so the client reads the answer and then EOF.
func TestWatchedConnCloseWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := Listener(ln)
	defer wl.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := wl.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := <-accepted
	defer c.Close()
	cw, ok := c.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite", c)
	}
	io.WriteString(c, "bye\n")
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(bufio.NewReader(client))
	if err != nil || string(rest) != "bye\n" {
		t.Errorf("client read %q, %v; want \"bye\\n\" then EOF", rest, err)
	}
}
