package http

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// signalFirstRead closes started on the first Read of the body it wraps.
type signalFirstRead struct {
	io.ReadCloser
	started chan struct{}
	once    bool
}

func (b *signalFirstRead) Read(p []byte) (int, error) {
	if !b.once {
		b.once = true
		close(b.started)
	}
	return b.ReadCloser.Read(p)
}

// TestDrainDoesNotWaitForBodiesStillArriving: a client that sends a
// call's body a trickle at a time has no call running yet. Counted as one,
// it held every shutdown for the whole TOOLSVC_SHUTDOWN_TIMEOUT (and made
// it fail); now the drain cuts its body off and answers 503 draining.
func TestDrainDoesNotWaitForBodiesStillArriving(t *testing.T) {
	e := newEnv(t)
	started := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &signalFirstRead{ReadCloser: r.Body, started: started}
		e.srv.ServeHTTP(w, r)
	}))
	defer ts.Close()

	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 100 bytes declared, one sent: the server reads on, waiting for more.
	if _, err := io.WriteString(conn, "POST /calls HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the server never read the body")
	}

	e.srv.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !e.srv.WaitIdle(ctx) {
		t.Error("a body still arriving counts as a call in flight: the drain waits for it")
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to the call whose body was still arriving when the drain began: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), `"draining"`) {
		t.Errorf("answer: %d %s; want 503 draining", resp.StatusCode, body)
	}
}
