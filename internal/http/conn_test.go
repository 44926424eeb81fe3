package http

import (
	"bufio"
	"context"
	"crypto/tls"
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

// TestAwaitBackgroundReadStates: what it returns in each state of the
// connection's reads, on a pipe.
func TestAwaitBackgroundReadStates(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	wc := &watchedConn{Conn: server, started: make(chan struct{}, 1)}
	request := func(ctx context.Context) *http.Request {
		return httptest.NewRequest("POST", "/", nil).WithContext(context.WithValue(ctx, watchedConnKey{}, wc))
	}
	read := func(n int) chan struct{} {
		done := make(chan struct{})
		go func() {
			wc.Read(make([]byte, n))
			close(done)
		}()
		return done
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	// No read begun: only the end of the request's context ends the wait.
	if awaitBackgroundRead(request(canceled)) {
		t.Error("no read began, but it reported one")
	}
	// A request read (4 KiB) that began and ended is not the background
	// read.
	done := read(4096)
	client.Write([]byte("GET"))
	<-done
	if awaitBackgroundRead(request(canceled)) {
		t.Error("after a 4 KiB read, it reported the background read")
	}
	// A read that begins while it waits wakes it.
	waited := make(chan bool)
	go func() { waited <- awaitBackgroundRead(request(context.Background())) }()
	done = read(1)
	if !<-waited {
		t.Error("a read began, but it was not seen")
	}
	// A one-byte read that has ended: the background read has run.
	client.Write([]byte("x"))
	<-done
	if !awaitBackgroundRead(request(canceled)) {
		t.Error("after a one-byte read, it did not report the background read")
	}
	// TLS and HTTP/2 are not looked at (here they would report true).
	r := request(canceled)
	r.TLS = &tls.ConnectionState{}
	if awaitBackgroundRead(r) {
		t.Error("a TLS request was looked at")
	}
	r = request(canceled)
	r.ProtoMajor = 2
	if awaitBackgroundRead(r) {
		t.Error("an HTTP/2 request was looked at")
	}
	// No stale signal is left behind: a 4 KiB read, then no read.
	done = read(4096)
	client.Write([]byte("y"))
	<-done
	if awaitBackgroundRead(request(canceled)) {
		t.Error("a signal was left over from an earlier wait")
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
