package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/worker"
)

// TestMain lets the test binary serve as the sandbox's re-executed child,
// as the toolsvc binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.ChildCommand {
		err := run(context.Background(), os.Args, nil, os.Stdout, os.Stderr)
		fmt.Fprintln(os.Stderr, "sandbox child:", err)
		os.Exit(125)
	}
	if len(os.Args) > 1 && os.Args[1] == worker.Command {
		if err := run(context.Background(), os.Args, os.Environ(), os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "tool worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if len(os.Args) > 1 && os.Args[1] == "mcp-stdio-server" {
		os.Exit(mcpStdioServer())
	}
	os.Exit(m.Run())
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// instance is toolsvc started by run in a goroutine, as main would.
type instance struct {
	t      *testing.T
	base   string
	cancel context.CancelFunc
	done   chan error
	logs   *logtest.Buffer
}

func start(t *testing.T, extra ...string) *instance {
	t.Helper()
	addr := freeAddr(t)
	environ := []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_LOG_FLUSH_INTERVAL=0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir()}
	if raceEnabled {
		// The interpreter and workers are this race-built binary: about
		// 450 MiB of data before the command line does anything.
		environ = append(environ, "TOOLSVC_TOOL_MEMORY_LIMIT=64GiB")
	}
	environ = append(environ, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{t: t, base: "http://" + addr, cancel: cancel, done: make(chan error, 1), logs: &logtest.Buffer{}}
	go func() { in.done <- run(ctx, []string{"toolsvc"}, environ, io.Discard, in.logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-in.done:
		case <-time.After(10 * time.Second):
			t.Error("run did not return after cancel")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(in.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return in
			}
		}
		select {
		case err := <-in.done:
			t.Fatalf("run returned before serving: %v\n%s", err, in.logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healthy: %v\n%s", err, in.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (in *instance) post(path, body string) (int, map[string]any) {
	in.t.Helper()
	resp, err := http.Post(in.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		in.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func TestServeOnDefaults(t *testing.T) {
	in := start(t)
	resp, err := http.Get(in.base + "/tools")
	if err != nil {
		t.Fatal(err)
	}
	var cat struct{ Tools []struct{ Name string } }
	_ = json.NewDecoder(resp.Body).Decode(&cat)
	resp.Body.Close()
	var names []string
	for _, t := range cat.Tools {
		names = append(names, t.Name)
	}
	if strings.Join(names, ",") != "data__parse,fs__delete,fs__edit,fs__list,fs__read,fs__search,fs__stat,fs__write,http__get,http__post,json__query,result__read,shell__exec,text__transform" {
		t.Errorf("catalog: %+v", cat.Tools)
	}
	status, res := in.post("/calls", `{"toolName":"text__transform","arguments":{"operation":"count","text":"a b\nc"}}`)
	if status != 200 || res["status"] != "ok" {
		t.Errorf("call: %d %v", status, res)
	}
	if !strings.Contains(in.logs.String(), `"msg":"tool call"`) {
		t.Errorf("no audit line in the log:\n%s", in.logs)
	}
	var out bytes.Buffer
	addr := strings.TrimPrefix(in.base, "http://")
	if err := run(context.Background(), []string{"toolsvc", "health"}, []string{"TOOLSVC_ADDR=" + addr}, &out, io.Discard); err != nil || out.String() != "ok\n" {
		t.Errorf("health: %v %q", err, out.String())
	}
}

func TestDrainOnSignal(t *testing.T) {
	in := start(t, "TOOLSVC_SHUTDOWN_TIMEOUT=3s")
	type outcome struct {
		status int
		res    map[string]any
	}
	slow := make(chan outcome, 1)
	go func() {
		s, r := in.post("/calls", `{"toolName":"json__query","arguments":{"program":"last(range(1e13))"}}`)
		slow <- outcome{s, r}
	}()
	// Wait until the slow call is in flight.
	for i := 0; ; i++ {
		resp, err := http.Get(in.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(b, []byte(`toolsvc_tool_calls_in_flight{tool="json__query"} 1`)) {
			break
		}
		if i > 500 {
			t.Fatal("the slow call never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	in.cancel() // SIGTERM
	deadline := time.Now().Add(2 * time.Second)
	for {
		resp, err := http.Get(in.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz never turned 503")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, res := in.post("/calls", `{"toolName":"text__transform","arguments":{"operation":"trim","text":" x "}}`); status != 503 || res["code"] != "draining" {
		t.Errorf("new call while draining: %d %v", status, res)
	}
	o := <-slow
	errObj, _ := o.res["error"].(map[string]any)
	if o.status != 200 || errObj["code"] != "E_CANCELED" {
		t.Errorf("in-flight call past the shutdown timeout: %d %v", o.status, o.res)
	}
	if err := <-in.done; err != nil {
		t.Errorf("run: %v", err)
	}
	in.done <- nil // for the cleanup
	if !strings.Contains(in.logs.String(), "cancelling them") {
		t.Errorf("no cancellation in the log:\n%s", in.logs)
	}
}

func TestSubcommands(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"toolsvc", "version"}, nil, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "toolsvc ") {
		t.Errorf("version: %v %q", err, out.String())
	}
	out.Reset()
	ws := "TOOLSVC_WORKSPACE=" + t.TempDir()
	if err := run(context.Background(), []string{"toolsvc", "validate"}, []string{ws}, &out, io.Discard); err != nil || out.String() != "configuration OK: 14 tools\n" {
		t.Errorf("validate: %v %q", err, out.String())
	}
	for _, bad := range [][]string{
		{"TOOLSVC_MAX_OUTPUT_BYTES=lots"},
		{"TOOLSVC_DEFAULT_TIMEOUT=10m", "TOOLSVC_MAX_TIMEOUT=1m"},
		{"TOOLSVC_LOG_LEVEL=chatty"},
		{"TOOLSVC_AUTH=maybe"},
		{"TOOLSVC_CONFIG=/nonexistent/tools.yaml"},
		{"TOOLSVC_HTTP_ALLOW_CIDRS=10.0.0.0/33"},
		{"TOOLSVC_HTTP_ALLOW_HOSTS=bad host"},
		{"TOOLSVC_SHELL_SANDBOX=sometimes"},
		{"TOOLSVC_STORE_URL=mysql://x"},
		{"TOOLSVC_APPROVAL_TTL=0s"},
		{"TOOLSVC_SHELL_ALLOW=/bin/sh"},
	} {
		if err := run(context.Background(), []string{"toolsvc", "validate"}, append(bad, ws), io.Discard, io.Discard); err == nil {
			t.Errorf("validate with %v: no error", bad)
		}
	}
	if err := run(context.Background(), []string{"toolsvc", "frobnicate"}, nil, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "usage") {
		t.Errorf("unknown command: %v", err)
	}
	if err := run(context.Background(), []string{"toolsvc", "health"}, []string{"TOOLSVC_ADDR=" + freeAddr(t)}, io.Discard, io.Discard); err == nil {
		t.Error("health of nothing: no error")
	}
}

func TestRefusesExposureWithoutCredentials(t *testing.T) {
	err := run(context.Background(), []string{"toolsvc"}, []string{"TOOLSVC_ADDR=0.0.0.0:0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "refusing to serve") {
		t.Fatalf("non-loopback without credentials: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &logtest.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"toolsvc"}, []string{"TOOLSVC_ADDR=0.0.0.0:0", "TOOLSVC_AUTH=none", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir()}, io.Discard, logs)
	}()
	for i := 0; !strings.Contains(logs.String(), "toolsvc listening"); i++ {
		if i > 500 {
			t.Fatalf("did not start with TOOLSVC_AUTH=none:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if !strings.Contains(logs.String(), "without authentication") {
		t.Errorf("no warning logged:\n%s", logs)
	}
}

// TestBufferedLogReachesOutputOnStop: with the log buffered (the default
// flush interval of 100ms, and a long one), the audit line of a call made
// just before the stop and the last line, "stopped", are written out
// before run returns.
func TestBufferedLogReachesOutputOnStop(t *testing.T) {
	for _, interval := range []string{"100ms", "1h"} {
		t.Run(interval, func(t *testing.T) {
			in := start(t, "TOOLSVC_LOG_FLUSH_INTERVAL="+interval)
			status, res := in.post("/calls", `{"toolName":"fs__stat","arguments":{"path":"."},"toolCallId":"call_before_stop"}`)
			if status != 200 || res["status"] != "ok" {
				t.Fatalf("call: %d %v", status, res)
			}
			in.cancel()
			if err := <-in.done; err != nil {
				t.Fatalf("run: %v", err)
			}
			in.done <- nil // for the cleanup
			logs := in.logs.String()
			if !strings.Contains(logs, `"toolCallId":"call_before_stop"`) {
				t.Errorf("the audit line of the last call is not in the log:\n%s", logs)
			}
			if lines := strings.Split(strings.TrimSpace(logs), "\n"); !strings.Contains(lines[len(lines)-1], `"msg":"stopped"`) {
				t.Errorf("the last line is not \"stopped\":\n%s", logs)
			}
		})
	}
}
