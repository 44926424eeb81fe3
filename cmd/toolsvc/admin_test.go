package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var adminListening = regexp.MustCompile(`"msg":"toolsvc listening".*"admin":"([0-9.:]+)"`)

// Clients holding every connection TOOLSVC_MAX_CONNECTIONS allows leave a
// liveness probe on the main address waiting, and an orchestrator would
// restart a healthy service. TOOLSVC_ADMIN_ADDR serves the probes and the
// metrics apart, and nothing else; its /readyz says draining as the main
// one does.
func TestAdminAddressAnswersWhenClientsHoldEveryConnection(t *testing.T) {
	p := startBinary(t, "TOOLSVC_ADMIN_ADDR=127.0.0.1:0", "TOOLSVC_MAX_CONNECTIONS=2", "TOOLSVC_SHUTDOWN_TIMEOUT=30s")
	m := adminListening.FindStringSubmatch(p.log())
	if m == nil {
		t.Fatalf("the listening line names no admin address:\n%s", p.log())
	}
	admin := "http://" + m[1]
	// A call that runs while the service drains, started (and seen
	// running) before the connections are taken.
	slow := make(chan answer, 1)
	go func() {
		a, _ := p.trySend("POST", "/calls", `{"toolName":"json__query","arguments":{"program":"[range(1;infinite)] | length","input":null},"timeoutMs":3000}`)
		slow <- a
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, body := get(admin + "/metrics"); strings.Contains(body, `toolsvc_tool_calls_in_flight{tool="json__query"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow call did not start")
		}
	}
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", strings.TrimPrefix(p.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body := get(admin + path); code != 200 {
			t.Errorf("admin %s: %d %s", path, code, body)
		}
	}
	if code, body := get(admin + "/calls"); code != 404 || !strings.Contains(body, "serves only /healthz, /readyz and /metrics") {
		t.Errorf("admin /calls: %d %s", code, body)
	}
	// The main address is full (the slow call and the two idle
	// connections): a probe there waits.
	short := &http.Client{Timeout: time.Second}
	if resp, err := short.Get(p.base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatalf("the main address answered a probe (%d) with every connection it allows held", resp.StatusCode)
	}
	// The container's health check asks the admin address when it is set.
	var out bytes.Buffer
	env := []string{"TOOLSVC_ADDR=" + strings.TrimPrefix(p.base, "http://"), "TOOLSVC_ADMIN_ADDR=" + m[1]}
	if err := run(context.Background(), []string{"toolsvc", "health"}, env, &out, io.Discard); err != nil || out.String() != "ok\n" {
		t.Errorf("toolsvc health with TOOLSVC_ADMIN_ADDR: %v %q", err, out.String())
	}

	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(admin + "/readyz")
		if code == 503 && strings.Contains(body, `"draining"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin /readyz during the drain: %d %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the service did not stop")
	}
	<-slow
}
