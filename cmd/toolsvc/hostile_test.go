package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// These tests run the real toolsvc binary, because what they check is
// about the process: that it survives, how much memory it holds, and how
// much CPU it uses after an answer.

// ceilingMargin is what the service may hold beyond the tool memory limit
// while a bomb runs: the service process itself (about 40 MiB) and the
// worker's code and runtime outside its data segment. docs/limits.md
// documents it.
const ceilingMargin = 128 << 20

func TestBinaryMemoryBombsHitTheCeiling(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	const limit = 256 << 20
	p := startBinary(t, fmt.Sprintf("TOOLSVC_TOOL_MEMORY_LIMIT=%d", limit), "TOOLSVC_DEFAULT_TIMEOUT=60s")
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	jq := func(program string) string {
		b, _ := json.Marshal(map[string]any{"toolName": "json__query", "arguments": map[string]any{"program": program}})
		return string(b)
	}
	deepArgs, _ := json.Marshal(map[string]any{"toolName": "json__query", "arguments": map[string]any{"program": "[paths]|length", "inputText": deep}})
	replace, _ := json.Marshal(map[string]any{"toolName": "text__transform", "arguments": map[string]any{
		"operation": "replace", "text": strings.Repeat("a", 500000), "find": "a", "replacement": strings.Repeat("b", 100000)}})
	bombs := []struct{ name, body, want string }{
		{"doubling", jq(`reduce range(40) as $i ("a"; .+.)`), "TOOLSVC_TOOL_MEMORY_LIMIT"},
		{"recursion", jq(`def f: [f]; f`), "TOOLSVC_TOOL_MEMORY_LIMIT"},
		{"paths", string(deepArgs), "TOOLSVC_TOOL_MEMORY_LIMIT"},
		{"repeat", jq(`"x" * 1e9 | length`), "TOOLSVC_TOOL_MEMORY_LIMIT"},
		{"replace", string(replace), "the result would be 50000000000 bytes"},
	}
	for _, b := range bombs {
		t.Run(b.name, func(t *testing.T) {
			stop := watch(p, 20*time.Millisecond)
			res := p.send("POST", "/calls", b.body).res
			seen := stop()
			if res.Status != "error" || res.code() != "E_TOOL" || !strings.Contains(res.Error.Message, b.want) {
				t.Fatalf("want E_TOOL with %q, got %s", b.want, res)
			}
			if seen.peakTree > limit+ceilingMargin {
				t.Errorf("peak RSS %d MiB, over the ceiling %d MiB plus the margin %d MiB", seen.peakTree>>20, limit>>20, ceilingMargin>>20)
			}
			if len(seen.failures) > 0 {
				t.Errorf("/healthz failed while the bomb ran: %v", seen.failures)
			}
			t.Logf("%s: peak RSS (service and workers) %d MiB; %s", b.name, seen.peakTree>>20, res.Error.Message)
			// The service still answers calls of the same tools.
			if ok := p.send("POST", "/calls", jq(`1+1`)).res; ok.Status != "ok" {
				t.Fatalf("the next call: %s\n%s", ok, p.log())
			}
		})
	}
}

// A call that times out stops using CPU: within a second of the answer
// the process is idle.
func TestBinaryTimedOutCallsStopUsingCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	p := startBinary(t, "TOOLSVC_MAX_REQUEST_BYTES=16777216")
	write := func(path, content string) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"toolName": "fs__write", "arguments": map[string]any{"path": path, "content": content}})
		if res := p.send("POST", "/calls", string(b)).res; res.Status != "ok" {
			t.Fatalf("fs__write: %s", res)
		}
	}
	// Sixteen lines of 64 KiB letters: RE2 takes a long time per line
	// with a thousand-fold repeated Unicode class.
	write("long.txt", strings.Repeat(strings.Repeat("a", 64<<10)+"\n", 16))
	// 4 MiB of one letter: 300 KB of it occurs about 3.9 million times,
	// overlapping.
	write("same.txt", strings.Repeat("a", 4<<20-1))
	search, _ := json.Marshal(map[string]any{"toolName": "fs__search", "timeoutMs": 1000, "arguments": map[string]any{"pattern": `[\p{L}\p{N}]{1000}z`, "path": "long.txt"}})
	edit, _ := json.Marshal(map[string]any{"toolName": "fs__edit", "timeoutMs": 1000, "arguments": map[string]any{"path": "same.txt", "oldText": strings.Repeat("a", 300000), "newText": "b"}})
	loop, _ := json.Marshal(map[string]any{"toolName": "json__query", "timeoutMs": 1000, "arguments": map[string]any{"program": `[range(1e12)] | length`}})
	cases := []struct {
		name, body string
		codes      []string
	}{
		{"search", string(search), []string{"E_TIMEOUT", ""}},
		{"edit", string(edit), []string{"E_TIMEOUT", "E_TOOL"}},
		{"jq", string(loop), []string{"E_TIMEOUT", "E_TOOL"}},
	}
	pid := p.pid()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := p.send("POST", "/calls", c.body).res
			code := res.code()
			if code != c.codes[0] && code != c.codes[1] {
				t.Fatalf("want %v, got %s", c.codes, res)
			}
			time.Sleep(time.Second)
			before := cpuTicks(t, pid)
			time.Sleep(3 * time.Second)
			used := cpuTicks(t, pid) - before
			t.Logf("%s: %s after %v ms; %d ticks of CPU in the 3 s from 1 s after the answer", c.name, code, res.DurationMs, used)
			// 100 ticks a second. A service that nothing calls uses next
			// to none; a handler left running uses a core, or on a machine
			// shared by many busy processes still its share of one.
			if used > 10 {
				t.Errorf("%s: %d ticks of CPU in the 3 s from 1 s after the answer (%s)", c.name, used, res)
			}
		})
	}
}
