package custom

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

func modes(t *testing.T) []sandbox.Mode {
	if sandbox.Probe().LandlockABI < 1 {
		return []sandbox.Mode{sandbox.ModeOff, sandbox.ModeBestEffort}
	}
	return []sandbox.Mode{sandbox.ModeOff, sandbox.ModeRequired}
}

func TestExecEnvelopeAndOutput(t *testing.T) {
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			f := newFixture(t, mode)
			e := f.executor(helperTool(t, "helper", "echo", "") + "---\n" + helperTool(t, "texty", "text", ""))
			res := call(t, e, context.Background(), &registry.Call{ToolCallID: "call_1", ToolName: "helper__run",
				Arguments: json.RawMessage(`{"n": 2}`), Context: registry.CallContext{InstanceKey: "conv-1", AgentName: "coder"}})
			if res.Status != registry.StatusOK {
				t.Fatalf("result: %+v %+v", res, res.Error)
			}
			var env Envelope
			if err := json.Unmarshal(res.Output, &env); err != nil {
				t.Fatalf("output is not the envelope: %s", res.Output)
			}
			if env.ToolName != "helper__run" || env.Export != "run" || env.ToolCallID != "call_1" ||
				string(env.Arguments) != `{"n":2}` || env.Context.InstanceKey != "conv-1" || env.Context.AgentName != "coder" {
				t.Errorf("envelope: %+v", env)
			}
			res = call(t, e, context.Background(), &registry.Call{ToolName: "texty__run"})
			if res.Status != registry.StatusOK || string(res.Output) != `"plain text, not JSON"` {
				t.Errorf("text output: %s %+v", res.Output, res.Error)
			}
		})
	}
}

func TestExecFailures(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort)
	e := f.executor(helperTool(t, "bad", "fail", "") + "---\n" + helperTool(t, "mute", "silent-fail", "") + "---\n" +
		helperTool(t, "slow", "hang", "") + "---\n" + helperTool(t, "flood", "flood", ""))
	e2 := f.executor(helperTool(t, "chatty", "log-then-fail", ""))
	res := call(t, e, context.Background(), &registry.Call{ToolName: "bad__run"})
	if res.Code() != registry.CodeTool || res.Error.Message != "the program exited with status 3: cannot do that: the file is missing" {
		t.Errorf("failing program: %+v", res.Error)
	}
	// A program that logs before it fails: its error is at the end of
	// stderr, past what the head alone keeps.
	res = call(t, e2, context.Background(), &registry.Call{ToolName: "chatty__run"})
	if m := res.Error.Message; res.Code() != registry.CodeTool || !strings.HasPrefix(m, "the program exited with status 1: INFO step 0 ") ||
		!strings.HasSuffix(m, "ValueError: THE REAL ERROR at the end") || !strings.Contains(m, "characters omitted") {
		t.Errorf("a program that logs, then fails: %+v", res.Error)
	}
	res = call(t, e, context.Background(), &registry.Call{ToolName: "mute__run"})
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "status 4 and wrote nothing to stderr") {
		t.Errorf("silent failure: %+v", res.Error)
	}
	res = call(t, e, context.Background(), &registry.Call{ToolName: "slow__run", TimeoutMs: 300})
	if res.Code() != registry.CodeTimeout {
		t.Errorf("hanging program: %+v", res.Error)
	}
	res = call(t, e, context.Background(), &registry.Call{ToolName: "flood__run"})
	if res.Status != registry.StatusOK || !res.Truncated || len(res.Output) > 16384+100 ||
		!strings.Contains(string(res.Output), "[output truncated:") {
		t.Errorf("flood: status %s truncated %v, %d bytes", res.Status, res.Truncated, len(res.Output))
	}
	if res.OriginalBytes != floodBytes {
		t.Errorf("flood: originalBytes %d, the program wrote %d", res.OriginalBytes, floodBytes)
	}
}

// A cut output that escapes to more than its length (control characters
// take six bytes as JSON) keeps its end and its marker: it was cut a second
// time, from the front, losing both.
func TestExecCutOutputKeepsItsEnd(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort)
	e := f.executor(helperTool(t, "ctl", "control-flood", ""))
	res := call(t, e, context.Background(), &registry.Call{ToolName: "ctl__run"})
	var text string
	if err := json.Unmarshal(res.Output, &text); err != nil || res.Status != registry.StatusOK || !res.Truncated {
		t.Fatalf("status %s truncated %v: %s", res.Status, res.Truncated, res.Output)
	}
	total := int64(len("HEAD-START  TAIL-END") + controlFloodBytes)
	if len(res.Output) > 16384 || !strings.HasPrefix(text, "HEAD-START \x01") || !strings.HasSuffix(text, "\x01 TAIL-END") ||
		!strings.Contains(text, "[output truncated: "+strconv.FormatInt(total, 10)+" bytes total") || res.OriginalBytes != total {
		t.Errorf("%d bytes, originalBytes %d: %.200q … %q", len(res.Output), res.OriginalBytes, text, text[max(len(text)-300, 0):])
	}
}

const controlFloodBytes = 200000

// floodBytes is what the "flood" helper writes.
const floodBytes = 200 << 16

func TestExecEnvironmentAndWorkspace(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort)
	f.env["REGION"] = "eu-west"
	f.env["SECRET_NOT_LISTED"] = "leak"
	e := f.executor(helperTool(t, "env", "env", "    env: [REGION, MODE=fast, UNSET_VAR]\n"))
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	res := call(t, e, ctx, &registry.Call{ToolName: "env__run", Context: registry.CallContext{InstanceKey: "conv-7"}})
	var got map[string]string
	if err := json.Unmarshal(res.Output, &got); err != nil {
		t.Fatalf("%s %+v", res.Output, res.Error)
	}
	if got["REGION"] != "eu-west" || got["MODE"] != "fast" {
		t.Errorf("allowlisted variables missing: %v", got)
	}
	if _, ok := got["SECRET_NOT_LISTED"]; ok {
		t.Error("an unlisted variable reached the program")
	}
	if _, ok := got["UNSET_VAR"]; ok {
		t.Error("an unset variable was passed")
	}
	if !strings.Contains(got["TRACEPARENT"], "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("trace context not passed: %q", got["TRACEPARENT"])
	}
	dir := f.ws.Path(workspace.Owner{CallerID: registry.Anonymous().ID}, "conv-7")
	if got["PWD"] != dir || got["HOME"] != dir {
		t.Errorf("working directory %q, HOME %q, want the instance's workspace %q", got["PWD"], got["HOME"], dir)
	}
}

func TestExecLandlockReadPaths(t *testing.T) {
	if sandbox.Probe().LandlockABI < 1 {
		t.Skip("kernel has no Landlock")
	}
	f := newFixture(t, sandbox.ModeRequired)
	data := t.TempDir()
	file := filepath.Join(data, "facts.txt")
	if err := os.WriteFile(file, []byte("the sky is blue"), 0o644); err != nil {
		t.Fatal(err)
	}
	e := f.executor(helperTool(t, "denied", "read", "") + "---\n" + helperTool(t, "allowed", "read", "    readPaths: ["+data+"]\n"))
	args := json.RawMessage(`{"path": "` + file + `"}`)
	res := call(t, e, context.Background(), &registry.Call{ToolName: "denied__run", Arguments: args})
	if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, "permission denied") {
		t.Errorf("read outside the workspace: %s %+v", res.Output, res.Error)
	}
	res = call(t, e, context.Background(), &registry.Call{ToolName: "allowed__run", Arguments: args})
	if res.Status != registry.StatusOK || string(res.Output) != `"the sky is blue"` {
		t.Errorf("read of a readPath: %s %+v", res.Output, res.Error)
	}
}

func TestExecScriptWithInterpreter(t *testing.T) {
	sh, err := sandbox.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, mode := range modes(t) {
		t.Run(string(mode), func(t *testing.T) {
			f := newFixture(t, mode)
			script := "#!" + sh + "\nread -r envelope\nprintf '{\"received\": %s}\\n' \"$envelope\"\n"
			if err := os.WriteFile(filepath.Join(f.dir, "wrap.sh"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			e := f.executor(`apiVersion: toolsvc/v1
kind: Tool
metadata: {name: wrap}
spec:
  tier: read_only
  exec: {command: [./wrap.sh]}
  exports:
    - name: it
      description: Wrap the envelope.
`)
			res := call(t, e, context.Background(), &registry.Call{ToolName: "wrap__it"})
			var out struct{ Received Envelope }
			if err := json.Unmarshal(res.Output, &out); err != nil || out.Received.ToolName != "wrap__it" {
				t.Fatalf("script output %s %+v", res.Output, res.Error)
			}
		})
	}
}

func TestExecTimeoutKillsChildren(t *testing.T) {
	sh, err := sandbox.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	f := newFixture(t, sandbox.ModeBestEffort)
	marker := filepath.Join(t.TempDir(), "survived")
	script := "#!" + sh + "\n(sleep 1; echo alive > " + marker + ") &\nsleep 60\n"
	if err := os.WriteFile(filepath.Join(f.dir, "spawn.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	e := f.executor(`apiVersion: toolsvc/v1
kind: Tool
metadata: {name: spawn}
spec:
  tier: side_effecting
  timeout: 300ms
  exec:
    command: [./spawn.sh]
    allowExec: [sleep]
  exports:
    - name: it
      description: Start a child and hang.
`)
	res := call(t, e, context.Background(), &registry.Call{ToolName: "spawn__it"})
	if res.Code() != registry.CodeTimeout {
		t.Fatalf("want E_TIMEOUT, got %+v", res.Error)
	}
	// The background child would write the marker a second after it
	// started; it was killed with its group at the timeout.
	time.Sleep(1500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a child of the timed-out program survived")
	}
}
