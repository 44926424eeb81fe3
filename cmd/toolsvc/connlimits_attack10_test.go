package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// rawGet sends GET /healthz with extra header lines on c and reads the
// answer's status.
func rawGet(c net.Conn, extra string) (int, error) {
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"+extra+"\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

var adminAddrLogged = regexp.MustCompile(`"admin":"([0-9.:]+)"`)

// A request's line and headers are read before any credential is
// checked: with net/http's default limit of 1 MiB, 300 connections each
// sending a header that never ended took the service from 62 to 547 MB.
// Both listeners now refuse more than TOOLSVC_MAX_HEADER_BYTES (64 KiB by
// default, room for large JWTs) with 431.
func TestRequestHeadersAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      []string
		fits     int // a header value this long is answered 200
		tooLarge int // and this long 431
	}{
		{"default", nil, 60_000, 70_000},
		{"8KiB", []string{"TOOLSVC_MAX_HEADER_BYTES=8KiB"}, 3_000, 14_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := start(t, append([]string{"TOOLSVC_ADMIN_ADDR=127.0.0.1:0"}, tc.env...)...)
			// /healthz may answer before the line naming the address is logged.
			waitUntil(t, "the admin address logged", func() bool { return adminAddrLogged.MatchString(in.logs.String()) })
			m := adminAddrLogged.FindStringSubmatch(in.logs.String())
			for _, addr := range []string{strings.TrimPrefix(in.base, "http://"), m[1]} {
				for _, n := range []int{tc.fits, tc.tooLarge} {
					want := 200
					if n == tc.tooLarge {
						want = http.StatusRequestHeaderFieldsTooLarge
					}
					status, err := rawGet(dialRaw(t, addr), "X-Big: "+strings.Repeat("a", n)+"\r\n")
					if err != nil || status != want {
						t.Errorf("%s: a header of %d bytes: %d %v, want %d", addr, n, status, err, want)
					}
				}
			}
		})
	}
}

// At TOOLSVC_MAX_CONNECTIONS, a connection idle between requests is
// closed to admit a new one. Before, clients that each made one request
// and kept their connections open held every slot for the idle timeout
// (2 minutes), and a new client was not answered at all. A connection
// reading a request keeps its slot: then the new one waits, and is
// admitted when one of them finishes its request.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	in := start(t, "TOOLSVC_MAX_CONNECTIONS=4")
	addr := strings.TrimPrefix(in.base, "http://")
	var held []net.Conn
	for range 4 {
		c := dialRaw(t, addr)
		if status, err := rawGet(c, ""); err != nil || status != 200 {
			t.Fatalf("connection %d: %d %v", len(held)+1, status, err)
		}
		held = append(held, c)
	}
	// Four idle connections hold every slot: a fifth is answered, and one
	// of the four, idle the longest, was closed for it.
	fifth := dialRaw(t, addr)
	if status, err := rawGet(fifth, ""); err != nil || status != 200 {
		t.Fatalf("a fifth connection while four idle ones are open: %d %v", status, err)
	}
	var open []net.Conn
	for _, c := range held {
		if status, err := rawGet(c, ""); err == nil && status == 200 {
			open = append(open, c)
		}
	}
	if len(open) != 3 {
		t.Fatalf("%d of the four idle connections still answer, want 3 (one closed for the fifth)", len(open))
	}
	// Connections that have begun a request keep their slot: four new
	// ones, each sending a request that has not ended, take every slot
	// (the idle ones are closed for them), and a fifth waits.
	for _, c := range open {
		c.Close()
	}
	fifth.Close()
	var busy []net.Conn
	for range 4 {
		c := dialRaw(t, addr)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
	}
	waiting := dialRaw(t, addr)
	waiting.SetDeadline(time.Now().Add(time.Second))
	if _, err := rawGet(waiting, ""); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a new connection while every one open reads a request: %v, want no answer", err)
	}
	// One request ends: its connection, idle then, is closed for the
	// waiting one, which is answered.
	if _, err := io.WriteString(busy[0], "\r\n"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(busy[0])
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the request that ended: %v %v", err, resp)
	}
	resp.Body.Close()
	waiting.SetDeadline(time.Now().Add(20 * time.Second))
	resp, err = http.ReadResponse(bufio.NewReader(waiting), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the waiting connection once another went idle: %v %v", err, resp)
	}
	resp.Body.Close()
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("the connection that went idle while another waited: %v, want it closed", err)
	}
}

// connSlots closes the connection idle the longest for a new one; with
// none idle, the new one waits, and the next to become idle is closed for
// it; a closed listener ends the wait.
func TestConnSlots(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnSlots(ln, 2)
	defer l.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	results := make(chan accepted, 1)
	dial := func() net.Conn {
		c := dialRaw(t, ln.Addr().String())
		go func() {
			s, err := l.Accept()
			results <- accepted{s, err}
		}()
		return c
	}
	result := func() accepted {
		t.Helper()
		select {
		case r := <-results:
			if r.c != nil {
				t.Cleanup(func() { r.c.Close() })
			}
			return r
		case <-time.After(20 * time.Second):
			t.Fatal("Accept did not return")
		}
		return accepted{}
	}
	closedByServer := func(client net.Conn) bool {
		_, err := client.Read(make([]byte, 1))
		return err == io.EOF
	}
	waiting := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.wanted == 1
	}
	aClient := dial()
	a := result().c
	bClient := dial()
	b := result().c
	l.connState(a, http.StateIdle)
	l.connState(b, http.StateActive)
	// Beyond the limit: a, idle, is closed for c.
	dial()
	c := result().c
	if !closedByServer(aClient) {
		t.Error("the idle connection was not closed for a new one")
	}
	// b runs a request and c is new: d waits until b is idle.
	dial()
	waitUntil(t, "Accept to wait for a connection to become idle", waiting)
	l.connState(b, http.StateIdle)
	d := result().c
	if !closedByServer(bClient) {
		t.Error("the connection that became idle was not closed for the waiting one")
	}
	// A closed connection said to be idle (HTTP/2 may say so late) is
	// not listed, and its slot is free.
	c.Close()
	l.connState(c, http.StateIdle)
	if l.idle.Len() != 0 {
		t.Errorf("%d connections listed idle, want none", l.idle.Len())
	}
	dial()
	e := result().c
	// d and e hold the slots; f waits until the listener closes.
	dial()
	waitUntil(t, "Accept to wait for a connection to become idle", waiting)
	l.Close()
	if r := result(); !errors.Is(r.err, net.ErrClosed) {
		t.Errorf("Accept waiting when the listener closed: %v %v", r.c, r.err)
	}
	d.Close()
	e.Close()
	if n := len(l.slots); n != 0 {
		t.Errorf("%d slots held after every connection closed", n)
	}
}

// The same over HTTPS, HTTP/1.1 and HTTP/2: the server's ConnState hook
// is given the TLS connection.
func TestIdleConnectionsMakeRoomOverTLS(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(t, "server", 2, true)
	writeFile(t, certFile, c)
	writeFile(t, keyFile, k)
	addr := freeAddr(t)
	logs := serveInBackground(t, []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(),
		"TOOLSVC_TLS_CERT_FILE=" + certFile, "TOOLSVC_TLS_KEY_FILE=" + keyFile, "TOOLSVC_MAX_CONNECTIONS=2"})
	waitUntil(t, "the service to listen", func() bool { return strings.Contains(logs.String(), "toolsvc listening") })
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			client := func() *http.Client {
				tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: proto == "HTTP/2.0"}
				if proto == "HTTP/1.1" {
					tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
				}
				t.Cleanup(tr.CloseIdleConnections)
				return &http.Client{Transport: tr, Timeout: 20 * time.Second}
			}
			get := func(c *http.Client) error {
				resp, err := c.Get("https://" + addr + "/healthz")
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body) // else HTTP/1.1 closes the connection
				if resp.StatusCode != 200 || resp.Proto != proto {
					return errors.New(resp.Proto + " " + resp.Status)
				}
				return nil
			}
			// Two clients each keep an idle connection; a third is answered.
			for i := range 3 {
				if err := get(client()); err != nil {
					t.Fatalf("client %d of 2 allowed connections: %v", i+1, err)
				}
			}
		})
	}
}

// A listen address that is not one names TOOLSVC_ADDR, as the admin
// listener's errors name TOOLSVC_ADMIN_ADDR; the two settings naming one
// port are refused when the configuration is checked.
func TestListenAddressMistakesNameTheSetting(t *testing.T) {
	base := []string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir()}
	err := run(context.Background(), []string{"toolsvc"}, append([]string{"TOOLSVC_ADDR=8080"}, base...), io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "TOOLSVC_ADDR") || !strings.Contains(err.Error(), "missing port") {
		t.Errorf("TOOLSVC_ADDR=8080: %v, want an error naming the setting", err)
	}
	for _, cmd := range []string{"validate", "serve"} {
		env := append([]string{"TOOLSVC_ADDR=127.0.0.1:19530", "TOOLSVC_ADMIN_ADDR=:19530"}, base...)
		err := run(context.Background(), []string{"toolsvc", cmd}, env, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "TOOLSVC_ADMIN_ADDR") || !strings.Contains(err.Error(), "TOOLSVC_ADDR (127.0.0.1:19530)") {
			t.Errorf("toolsvc %s with both listeners on one port: %v, want an error naming both settings", cmd, err)
		}
	}
}

func TestSamePort(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{":8080", "127.0.0.1:8080", true},
		{"0.0.0.0:8080", "[::1]:8080", true},
		{"[::]:8080", "10.0.0.1:8080", true},
		{"localhost:8080", "127.0.0.1:8080", true},
		{"[::ffff:127.0.0.1]:8080", "127.0.0.1:8080", true},
		{"LOCALHOST:8080", "localhost:8080", true},
		{"127.0.0.1:8080", "127.0.0.1:9090", false},
		{"127.0.0.1:8080", "127.0.0.2:8080", false},
		{"127.0.0.1:0", "127.0.0.1:0", false}, // the kernel picks two ports
		{"10.0.0.1:8080", "10.0.0.2:8080", false},
		{"8080", "8080", false}, // not an address: the listener says so
	} {
		if got := samePort(tc.a, tc.b); got != tc.same {
			t.Errorf("samePort(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// A non-loopback address without credentials is refused before anything
// is opened: no sandbox probe, no store or workspace made, not a line
// logged. Before, the refusal came after the embedded store had been
// created in TOOLSVC_DATA_DIR.
func TestExposureRefusedBeforeAnythingOpens(t *testing.T) {
	dir := t.TempDir()
	data, ws := filepath.Join(dir, "data"), filepath.Join(dir, "workspace")
	var logs bytes.Buffer
	err := run(context.Background(), []string{"toolsvc"}, []string{"TOOLSVC_ADDR=0.0.0.0:0", "TOOLSVC_WORKSPACE=" + ws, "TOOLSVC_DATA_DIR=" + data}, io.Discard, &logs)
	if err == nil || !strings.Contains(err.Error(), "refusing to serve") {
		t.Fatalf("non-loopback without credentials: %v", err)
	}
	for _, p := range []string{data, ws} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s was made before the refusal (%v)", p, err)
		}
	}
	if logs.Len() > 0 {
		t.Errorf("logged before the refusal:\n%s", &logs)
	}
	// A Caller or Issuer resource is a credential, as TOOLSVC_API_KEY is.
	callers := filepath.Join(dir, "callers.yaml")
	if err := os.WriteFile(callers, []byte("apiVersion: toolsvc/v1\nkind: Caller\nmetadata:\n  name: agent\nspec:\n  tokenSha256: eb47b9ce4840a5b3ea138b8691253b78035b9289d9014409067e9844c272ef99\n  scopes: [call]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env     []string
		refused bool
	}{
		{[]string{"TOOLSVC_ADDR=0.0.0.0:8080"}, true},
		{[]string{"TOOLSVC_ADDR=:8080"}, true},
		{[]string{"TOOLSVC_ADDR=0.0.0.0:8080", "TOOLSVC_CONFIG=" + callers}, false},
		{[]string{"TOOLSVC_ADDR=0.0.0.0:8080", "TOOLSVC_API_KEY=k"}, false},
		{[]string{"TOOLSVC_ADDR=0.0.0.0:8080", "TOOLSVC_AUTH=none"}, false},
		{[]string{"TOOLSVC_ADDR=localhost:8080"}, false},
		{[]string{"TOOLSVC_ADDR=[::1]:8080"}, false},
	} {
		cfg, err := loadConfig(append([]string{"TOOLSVC_WORKSPACE=" + ws, "TOOLSVC_DATA_DIR=" + data}, tc.env...))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkAddress(cfg); (err != nil) != tc.refused {
			t.Errorf("%v: %v, want refused %v", tc.env, err, tc.refused)
		}
	}
}
