package main

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An MCP server's URL with a key in its query (or user information) is
// redacted in /readyz, which anyone may read, and in the log.
func TestMCPServerURLIsRedacted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the connection fails and says why
	c := newConfigDir(t)
	c.write("mcp.yaml", "apiVersion: toolsvc/v1\nkind: MCPServer\nmetadata: {name: keyed}\nspec:\n  http: {url: \"http://agent:pw-s3cret@"+addr+"/mcp?api_key=k3y-s3cret\"}\n", 0o644)
	in := start(t, "TOOLSVC_CONFIG="+c.dir, "TOOLSVC_MCP_CONNECT_TIMEOUT=2s")
	var body string
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(in.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		if strings.Contains(body, `"error"`) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(body, "/mcp?REDACTED") {
		t.Errorf("/readyz does not show the redacted URL: %s", body)
	}
	logs := in.logs.String()
	if !strings.Contains(logs, "http://REDACTED@"+addr+"/mcp?REDACTED") {
		t.Errorf("the log does not name the endpoint, redacted:\n%s", logs)
	}
	for _, secret := range []string{"k3y-s3cret", "pw-s3cret"} {
		if strings.Contains(body, secret) {
			t.Errorf("/readyz shows %s: %s", secret, body)
		}
		if strings.Contains(logs, secret) {
			t.Errorf("the log shows %s:\n%s", secret, logs)
		}
	}
}
