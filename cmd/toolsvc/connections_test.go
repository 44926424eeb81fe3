package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestConnectionLimit: past TOOLSVC_MAX_CONNECTIONS a new connection
// waits to be accepted while every slot is busy (here, each in the middle
// of sending a request), so clients cannot take the descriptors the calls
// of others need, and it is served as soon as one closes. (Idle
// connections make room at once: TestIdleConnectionsMakeRoom.)
func TestConnectionLimit(t *testing.T) {
	p := startBinary(t, "TOOLSVC_MAX_CONNECTIONS=4")
	addr := strings.TrimPrefix(p.base, "http://")
	healthz := func(c net.Conn) error {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return errors.New(resp.Status)
		}
		return nil
	}
	var held []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		// Busy: a request begun and not finished (the header timeout,
		// 10 s, is longer than the test). A connection that has had an
		// answer counts as idle until its next request's headers are in.
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	extra.SetDeadline(time.Now().Add(time.Second))
	if err := healthz(extra); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a fifth connection while four are open: %v, want no answer", err)
	}
	// The connection is still waiting for its answer; one closing frees a slot.
	held[0].Close()
	extra.SetDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(extra), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the waiting connection once another closed: %v %v", err, resp)
	}
	resp.Body.Close()
	// The request held[1] began is still served.
	if _, err := io.WriteString(held[1], "\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(bufio.NewReader(held[1]), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a connection held all along: %v %v", err, resp)
	}
	resp.Body.Close()
}

func TestMaxConnectionsDefault(t *testing.T) {
	if n := maxConnections(7); n != 7 {
		t.Errorf("configured 7: %d", n)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if n := maxConnections(0); rl.Cur <= 1<<30 && n != max(16, int(rl.Cur/2)) {
		t.Errorf("default with an open-file limit of %d: %d", rl.Cur, n)
	}
}
