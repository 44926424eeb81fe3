package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startToolsvc builds cmd/toolsvc and runs it on loopback with its own
// workspace, as an operator would, until the test ends.
func startToolsvc(t *testing.T, workspace string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "toolsvc")
	// go test puts its own go command first in PATH.
	build := exec.Command("go", "build", "-o", bin, "github.com/toolsvc/toolsvc/cmd/toolsvc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_WORKSPACE=" + workspace, "TOOLSVC_DATA_DIR=" + t.TempDir(), "TOOLSVC_LOG_LEVEL=warn"}
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("toolsvc exited with %v\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("toolsvc did not stop on SIGTERM")
		}
	})
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("toolsvc exited before serving: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("toolsvc not healthy\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestGatewayAgainstToolsvc(t *testing.T) {
	workspace := t.TempDir()
	if err := os.MkdirAll(filepath.Join(workspace, "callers/anonymous/instances/conv-42"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(workspace, "callers/anonymous/instances/conv-42", "notes.txt"), []byte("remember the milk\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	base := startToolsvc(t, workspace)

	var out bytes.Buffer
	if err := run(context.Background(), []string{"-toolsvc", base, "-response", "testdata/chat_completion.json"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d lines, want 7", len(lines))
	}
	var tools int
	if _, err := fmt.Sscanf(lines[0], "request: model gpt-4o, %d tools, ", &tools); err != nil || tools < 10 || lines[1] != "model: finish_reason tool_calls, 4 tool calls" {
		t.Errorf("header lines: %q", lines[:2])
	}
	type message struct {
		Role       string `json:"role"`
		ToolCallID string `json:"tool_call_id"`
		Content    string `json:"content"`
	}
	var msgs []message
	for _, l := range lines[2:6] {
		var m message
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a tool message: %q: %v", l, err)
		}
		if m.Role != "tool" {
			t.Errorf("role: %q", l)
		}
		msgs = append(msgs, m)
	}
	sum := sha256.Sum256([]byte("hello gateway"))
	if msgs[0].ToolCallID != "call_upper" || msgs[0].Content != `{"result":"HELLO GATEWAY"}` {
		t.Errorf("upper: %+v", msgs[0])
	}
	if msgs[1].ToolCallID != "call_hash" || msgs[1].Content != `{"result":"`+hex.EncodeToString(sum[:])+`"}` {
		t.Errorf("hash: %+v", msgs[1])
	}
	var read struct{ Content string }
	if msgs[2].ToolCallID != "call_read" || json.Unmarshal([]byte(msgs[2].Content), &read) != nil || read.Content != "remember the milk\n" {
		t.Errorf("read: %+v", msgs[2])
	}
	if msgs[3].ToolCallID != "call_typo" || msgs[3].Content != "Error E_TOOL_NOT_FOUND: no tool named \"text__transfrom\"\nSuggestion: Did you mean text__transform?" {
		t.Errorf("typo: %+v", msgs[3])
	}
	// system, user, the assistant's tool calls, and four tool messages
	if !strings.HasPrefix(lines[6], "next request: 7 messages, ") {
		t.Errorf("last line: %q", lines[6])
	}
}
