package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A custom tool that /mcp could not serve (the MCP SDK refuses an
// x-mcp-header on an object) stops validate and the start with its file
// and name; the same header on a string is accepted.
func TestToolTheMCPSDKRefusesStopsTheStart(t *testing.T) {
	dir := t.TempDir()
	doc := func(kind string) string {
		return `apiVersion: toolsvc/v1
kind: Tool
metadata: {name: hdr}
spec:
  http:
    url: http://127.0.0.1:9/
  exports:
    - name: get
      tier: read_only
      description: Get a thing.
      parameters:
        type: object
        properties:
          region: {type: ` + kind + `, x-mcp-header: Region}
`
	}
	file := filepath.Join(dir, "hdr.yaml")
	env := []string{"TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_CONFIG=" + file}
	if err := os.WriteFile(file, []byte(doc("object")), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"toolsvc", "validate"}, env, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "hdr.yaml:1") || !strings.Contains(err.Error(), "tool hdr__get cannot be served over /mcp") || !strings.Contains(err.Error(), "x-mcp-header") {
		t.Errorf("an x-mcp-header on an object: %v", err)
	}
	if err := os.WriteFile(file, []byte(doc("string")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"toolsvc", "validate"}, env, io.Discard, io.Discard); err != nil {
		t.Errorf("an x-mcp-header on a string: %v", err)
	}
}
