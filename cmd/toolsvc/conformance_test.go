package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestMCPConformance runs the official MCP conformance suite
// (@modelcontextprotocol/conformance) against /mcp of the real service:
// the server scenarios each revision /mcp serves requires, with a
// baseline (testdata/mcp-conformance-{revision}.yaml) of the checks that
// do not apply to toolsvc, each with its reason. Every other check must
// pass, and a baselined one that starts passing fails the run too.
//
// The suite needs Node 22. It is opt-in: TOOLSVC_TEST_MCP_CONFORMANCE
// names a directory where
//
//	npm i @modelcontextprotocol/conformance@0.2.0-alpha.12 node@22
//
// ran (0.2.0 is the first to know 2026-07-28); TOOLSVC_TEST_NODE may name
// another Node 22 binary than the one node@22 installs there.
func TestMCPConformance(t *testing.T) {
	dir := os.Getenv("TOOLSVC_TEST_MCP_CONFORMANCE")
	if dir == "" {
		t.Skip("TOOLSVC_TEST_MCP_CONFORMANCE is not set: set it to a directory where `npm i @modelcontextprotocol/conformance@0.2.0-alpha.12 node@22` ran to run the MCP conformance suite")
	}
	cli := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("TOOLSVC_TEST_MCP_CONFORMANCE=%s holds no conformance suite: %v", dir, err)
	}
	node := os.Getenv("TOOLSVC_TEST_NODE")
	if node == "" {
		node = filepath.Join(dir, "node_modules", "node", "bin", "node")
	}
	in := start(t)
	for _, rev := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(rev, func(t *testing.T) {
			baseline, err := filepath.Abs(filepath.Join("testdata", "mcp-conformance-"+rev+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, cli, "server", "--url", in.base+"/mcp",
				"--requirements", rev, "--expected-failures", baseline, "-o", t.TempDir())
			cmd.Env = append(os.Environ(), "NO_COLOR=1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("conformance %s: %v\n%s", rev, err, out)
			}
		})
	}
}
