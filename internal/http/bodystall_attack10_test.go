package http

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// arrivalBody is a request body that counts the bytes read of it and
// says when target of them were.
type arrivalBody struct {
	io.ReadCloser
	target  int64
	read    atomic.Int64
	arrived chan struct{}
}

func (b *arrivalBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if after := b.read.Add(int64(n)); n > 0 && after >= b.target && after-int64(n) < b.target {
		close(b.arrived)
	}
	return n, err
}

// stallServer serves e's handler on a server of its own whose requests'
// bodies say when sent bytes of them were read, and opens connections to
// it that send a call's headers declaring declared bytes, then sent bytes
// of its body, and then nothing.
type stallServer struct {
	t      *testing.T
	ts     *httptest.Server
	bodies chan *arrivalBody
	done   chan struct{}
}

func newStallServer(t *testing.T, e *env, sent int64, configure func(*http.Server)) *stallServer {
	s := &stallServer{t: t, bodies: make(chan *arrivalBody, 1), done: make(chan struct{}, 64)}
	s.ts = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := &arrivalBody{ReadCloser: r.Body, target: sent, arrived: make(chan struct{})}
		r.Body = b
		s.bodies <- b
		e.srv.ServeHTTP(w, r)
		s.done <- struct{}{}
	}))
	if configure != nil {
		configure(s.ts.Config)
	}
	s.ts.Start()
	t.Cleanup(s.ts.Close)
	return s
}

// stall opens a connection that sends sent bytes of a body that declares
// declared, and returns it once the server has read them (read true) or
// answered without reading them all (read false). With sent 0, it
// returns once the server has begun to handle the request.
func (s *stallServer) stall(declared, sent int64) (conn net.Conn, read bool) {
	s.t.Helper()
	conn, err := net.Dial("tcp", s.ts.Listener.Addr().String())
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	body := `{"toolName":"text__transform","arguments":{"operation":"upper","text":"` + strings.Repeat("a", int(sent))
	if _, err := fmt.Fprintf(conn, "POST /calls HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", declared, body[:sent]); err != nil {
		s.t.Fatal(err)
	}
	b := <-s.bodies
	if sent == 0 {
		return conn, true
	}
	select {
	case <-b.arrived:
		return conn, true
	case <-s.done:
		return conn, false
	}
}

// answer reads the answer on conn.
func answer(t *testing.T, conn net.Conn) (int, string) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestStalledBodiesCannotRefuseEveryCall: 32 connections that each
// declared a body of 1 MiB, sent 256 KiB and one byte of it and then
// nothing held the whole default budget of request bytes in flight (each
// reservation grew four times at a step, to the declared size, once
// 256 KiB had arrived), so every call of every caller was answered 429
// until the server's ReadTimeout, a minute later, and the attacker could
// start again. Now a body holds at most twice what arrived, the bodies of
// more than 64 KiB leave a reserve of the budget to the small ones, and a
// body that sends nothing for bodyIdleTimeout is cut off (400) and gives
// its share back.
func TestStalledBodiesCannotRefuseEveryCall(t *testing.T) {
	metrics := prometheus.NewRegistry()
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		d.Limits.MaxRequestBytes = 1 << 20
		d.Limits.MaxRequestBytesInFlight = 8 << 20
		d.Registerer = metrics
	})
	e.srv.bodies.idle = time.Hour // until the stalls are counted
	const sent = 256<<10 + 1
	s := newStallServer(t, e, sent, nil)
	small := `{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`

	// The shape found: 1 MiB declared, 256 KiB and a byte sent. Eight such
	// held the whole 8 MiB; now each holds twice what arrived.
	var stalls []net.Conn
	for i := range 8 {
		conn, read := s.stall(1<<20, sent)
		if !read {
			code, body := answer(t, conn)
			t.Fatalf("stall %d, %d bytes held: refused with %d %s", i, e.srv.bodies.used.Load(), code, body)
		}
		stalls = append(stalls, conn)
		if used, most := e.srv.bodies.used.Load(), int64(len(stalls))*2*sent; used > most {
			t.Fatalf("%d stalled bodies of which %d bytes each arrived hold %d bytes, more than twice what arrived (%d)", len(stalls), sent, used, most)
		}
	}
	if r, res := e.call("/calls", small); r.status != 200 || res.Status != registry.StatusOK {
		t.Fatalf("a small call while 8 stalled bodies hold %d bytes of the budget: %d %s", e.srv.bodies.used.Load(), r.status, r.body)
	}
	// Bodies that declare 512 KiB and send half of it, until one is
	// refused: they may fill the budget but for the reserve (at twice what
	// arrived, 16 × 512 KiB would be the whole 8 MiB), so small calls go on.
	for {
		conn, read := s.stall(512<<10, sent)
		if !read {
			if code, body := answer(t, conn); code != 429 || !strings.Contains(body, "overloaded") {
				t.Fatalf("a stall past the budget: %d %s; want 429 overloaded", code, body)
			}
			break
		}
		stalls = append(stalls, conn)
		if len(stalls) > 16 {
			t.Fatalf("%d stalled bodies hold %d bytes of a budget of %d", len(stalls), e.srv.bodies.used.Load(), e.srv.bodies.max)
		}
	}
	if len(stalls) != 15 {
		t.Errorf("%d stalls held; want 15, the 16th refused for the reserve", len(stalls))
	}
	for i := range 3 {
		if r, res := e.call("/calls", small); r.status != 200 || res.Status != registry.StatusOK {
			t.Fatalf("small call %d while %d stalled bodies hold %d bytes of the budget: %d %s", i, len(stalls), e.srv.bodies.used.Load(), r.status, r.body)
		}
	}

	// The stalls' clients leave: their shares come back.
	for _, c := range stalls {
		c.Close()
	}
	for e.srv.bodies.used.Load() != 0 {
		time.Sleep(time.Millisecond)
	}

	// Bodies that send nothing for the idle timeout are cut off, before
	// their first byte or after some, and give their shares back.
	e.srv.bodies.idle = 50 * time.Millisecond
	for _, n := range []int64{0, 100, sent} {
		cut := newStallServer(t, e, max(n, 1), nil)
		conn, read := cut.stall(1<<20, n)
		if code, body := answer(t, conn); code != 400 || !strings.Contains(body, "unreadable_body") {
			t.Errorf("a body that stopped after %d bytes: %d %s; want 400 unreadable_body", n, code, body)
		}
		if read {
			<-cut.done
		}
	}
	if got := testutil.ToFloat64(e.srv.bodies.stalled); got != 3 {
		t.Errorf("toolsvc_request_body_stalled_total = %v, want 3", got)
	}
	if got := e.srv.bodies.used.Load(); got != 0 {
		t.Errorf("bytes held once the stalled bodies were cut off: %d", got)
	}
}

// TestBodyIdleDeadlineKeepsTheServersOwn: the idle deadline, renewed at
// every read, never takes a body past the server's ReadTimeout for the
// whole request (a body that trickles a byte at a time is still cut off
// by it), and no deadline is set once the body is read: net/http then
// reads the connection to notice a client that leaves, and a deadline met
// there cancels the request's context, which would stop every call that
// ran longer than the idle timeout (or, had the server's deadline been
// set again, than the ReadTimeout).
func TestBodyIdleDeadlineKeepsTheServersOwn(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	e := newEnv(t, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second}, &registry.Tool{
			Definition: registry.Definition{Name: "test__hold", Description: "holds", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
			Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
				started <- struct{}{}
				select {
				case <-release:
					return "done", nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		o.Registry = reg
	})
	const idle = 50 * time.Millisecond
	e.srv.bodies.idle = idle

	// A call that runs past the idle timeout, and the server's
	// ReadTimeout, after its body was read.
	ts := httptest.NewUnstartedServer(e.srv)
	ts.Config.ReadTimeout = 4 * idle
	ts.Start()
	defer ts.Close()
	type result struct {
		status int
		body   []byte
	}
	answered := make(chan result, 1)
	go func() {
		resp, err := http.Post(ts.URL+"/calls", "application/json", strings.NewReader(`{"toolName":"test__hold"}`))
		if err != nil {
			answered <- result{0, []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		answered <- result{resp.StatusCode, body}
	}()
	<-started
	time.Sleep(10 * idle) // the idle deadline and ReadTimeout, had either stayed, have passed
	close(release)
	if got := <-answered; got.status != 200 || !strings.Contains(string(got.body), `"status":"ok"`) {
		t.Errorf("a call that ran past the body's idle timeout and the server's ReadTimeout: %d %s", got.status, got.body)
	}

	// A body that trickles a byte every tenth of the idle timeout, within
	// a ReadTimeout of 20 idle timeouts.
	e.srv.bodies.idle = time.Hour
	s := newStallServer(t, e, 1, func(hs *http.Server) { hs.ReadTimeout = 20 * idle })
	conn, _ := s.stall(1000, 1)
	go func() {
		for {
			time.Sleep(idle / 10)
			if _, err := conn.Write([]byte("a")); err != nil {
				return
			}
		}
	}()
	if code, body := answer(t, conn); code != 400 || !strings.Contains(body, "unreadable_body") {
		t.Errorf("a body trickling past the server's ReadTimeout: %d %s; want 400 unreadable_body", code, body)
	}
}

// TestBodyBudgetHoldsAtMostTwiceWhatArrived: whatever the body's size and
// framing and however it arrives, before every read the budget a body
// holds is at most twice what arrived, or its first piece.
func TestBodyBudgetHoldsAtMostTwiceWhatArrived(t *testing.T) {
	for _, c := range []struct {
		size, piece int
	}{
		{100, 7},
		{firstPiece, 1000},
		{firstPiece + 1, 4096},
		{100000, 333},
		{256<<10 + 1, 16 << 10},
		{1 << 20, 32 << 10},
		{1 << 20, 1 << 20},
	} {
		for _, declared := range []bool{true, false} {
			t.Run(fmt.Sprintf("%d,%d,declared=%v", c.size, c.piece, declared), func(t *testing.T) {
				b := &bodyBudget{max: 1 << 30}
				r := &checkedArrival{t: t, b: b, r: bytes.NewReader(bytes.Repeat([]byte("x"), c.size)), piece: c.piece}
				size := int64(-1)
				if declared {
					size = int64(c.size)
				}
				body, held, err := b.read(r, size, 1<<20)
				if err != nil || len(body) != c.size {
					t.Fatalf("%d bytes, %v", len(body), err)
				}
				b.release(held)
			})
		}
	}
}

// checkedArrival gives at most piece bytes a read, and checks at each
// read that b holds at most twice what it gave, or the first piece.
type checkedArrival struct {
	t       *testing.T
	b       *bodyBudget
	r       io.Reader
	piece   int
	arrived int64
	failed  bool
}

func (c *checkedArrival) Read(p []byte) (int, error) {
	if used := c.b.used.Load(); used > max(firstPiece, 2*c.arrived) && !c.failed {
		c.failed = true
		c.t.Errorf("after %d bytes arrived, the body holds %d bytes of the budget", c.arrived, used)
	}
	n, err := c.r.Read(p[:min(len(p), c.piece)])
	c.arrived += int64(n)
	return n, err
}

// TestBodyBudgetRoom: the bodies of more than 64 KiB leave a
// thirty-second of the budget to the small ones, unless the budget holds
// but one body at the limit.
func TestBodyBudgetRoom(t *testing.T) {
	for _, c := range []struct {
		max, limit, total, want int64
	}{
		{32 << 20, 1 << 20, 100, 32 << 20},
		{32 << 20, 1 << 20, smallBody, 32 << 20},
		{32 << 20, 1 << 20, smallBody + 1, 31 << 20},
		{32 << 20, 1 << 20, 1 << 20, 31 << 20},
		{2 << 20, 1 << 20, 1 << 20, 2<<20 - 64<<10},
		{33 << 19, 1 << 20, 1 << 20, 33<<19 - 33<<14},
		{1 << 20, 1 << 20, 1 << 20, 1 << 20}, // a body at the limit always fits
		{1<<20 + 100, 1 << 20, 1 << 20, 1 << 20},
	} {
		b := &bodyBudget{max: c.max}
		if got := b.room(c.total, c.limit); got != c.want {
			t.Errorf("room(%d, %d) of %d = %d, want %d", c.total, c.limit, c.max, got, c.want)
		}
	}
}
