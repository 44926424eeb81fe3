package main

import (
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecondSignalStopsAtOnce: SIGTERM drains, waiting for the calls in
// flight up to TOOLSVC_SHUTDOWN_TIMEOUT; a second SIGTERM (an operator's
// second Ctrl-C) ends the process at once rather than being ignored.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // accepted, never answered
		}
	}()
	p := startBinary(t, "TOOLSVC_SHUTDOWN_TIMEOUT=60s", "TOOLSVC_HTTP_ALLOW_CIDRS=127.0.0.1/32")
	go p.trySend("POST", "/calls", `{"toolName":"http__get","arguments":{"url":"http://`+silent.Addr().String()+`/"}}`)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.send("GET", "/metrics", "").body, `toolsvc_tool_calls_in_flight{tool="http__get"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("the call is not in flight:\n%s", p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	deadline = time.Now().Add(10 * time.Second)
	for !strings.Contains(p.log(), "draining") {
		if time.Now().After(deadline) {
			t.Fatalf("no drain after SIGTERM:\n%s", p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case <-p.exited:
		t.Fatalf("the process did not wait for the call in flight:\n%s", p.log())
	case <-time.After(500 * time.Millisecond):
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10 s after a second SIGTERM:\n%s", p.log())
	}
}

// TestStoppedCommandLineRunsNoFurther: a shell__exec stopped at its
// timeout runs nothing after the program it was running. The interpreter
// is this binary re-executed, and it used to catch SIGTERM as the service
// does, so when the reaper sent SIGTERM to everything only the program
// died and the interpreter went on with the next command (rm victim.txt)
// until the SIGKILL half a second later.
func TestStoppedCommandLineRunsNoFurther(t *testing.T) {
	p := startConfined(t)
	if a := p.send("POST", "/calls", `{"toolName":"fs__write","arguments":{"path":"victim.txt","content":"keep"}}`); a.res.Status != "ok" {
		t.Fatalf("fs__write: %s", a.body)
	}
	a := p.send("POST", "/calls", `{"toolName":"shell__exec","timeoutMs":1000,"approval":{"granted":true},"arguments":{"command":"sleep 5; rm victim.txt; echo ran > after.txt"}}`)
	if a.res.Error == nil || a.res.Error.Code != "E_TIMEOUT" {
		t.Fatalf("shell__exec: %s", a.body)
	}
	time.Sleep(1500 * time.Millisecond) // past the reaper's SIGKILL
	for path, want := range map[string]bool{"victim.txt": true, "after.txt": false} {
		s := p.send("POST", "/calls", `{"toolName":"fs__stat","arguments":{"path":"`+path+`"}}`)
		if !strings.Contains(s.body, fmt.Sprintf(`"exists":%v`, want)) {
			t.Errorf("after the stopped command line, %s: %s", path, s.body)
		}
	}
}
