package shell

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// TestOutputFitsItsLimitEscapesIncluded: the result, an object with both
// streams, fits the tool's output limit however much the streams grow
// when written as JSON strings (a newline takes two bytes, a control
// character six), so the executor never has to cut it into a string.
func TestOutputFitsItsLimitEscapesIncluded(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	tool, _ := f.exec.Registry().Lookup(ToolName)
	limit := tool.MaxOutputBytes
	cases := []struct {
		cmd string
		// cut: the streams that must come back cut, around a marker.
		cutOut, cutErr bool
		endOut, endErr string
	}{
		// Both streams cut by their capture, escapes doubling them.
		{"seq 1 3000; seq 1 3000 >&2", true, true, "\n2999\n3000\n", "\n2999\n3000\n"},
		// Kept whole by the capture (5000 bytes) but 30000 as JSON.
		{"head -c 5000 /dev/zero | tr '\\0' '\\1'", true, false, "\x01\x01\x01", ""},
		// The same on stderr, with a short stdout that stays whole.
		{"echo short; head -c 5000 /dev/zero | tr '\\0' '\\1' >&2", false, true, "short\n", "\x01\x01\x01"},
		// Short enough: nothing is cut.
		{"seq 1 100; seq 1 100 >&2", false, false, "\n99\n100\n", "\n99\n100\n"},
	}
	for _, c := range cases {
		res := f.call(map[string]any{"command": c.cmd}, 0)
		var out Output
		if res.Status != registry.StatusOK || json.Unmarshal(res.Output, &out) != nil {
			t.Fatalf("%q: not an object: %s %.200s %+v", c.cmd, res.Status, res.Output, res.Error)
		}
		if len(res.Output) > limit {
			t.Errorf("%q: %d bytes of output, over the limit of %d", c.cmd, len(res.Output), limit)
		}
		for _, s := range []struct {
			name      string
			text, end string
			cut, flag bool
		}{{"stdout", out.Stdout, c.endOut, c.cutOut, out.StdoutTruncated}, {"stderr", out.Stderr, c.endErr, c.cutErr, out.StderrTruncated}} {
			marked := strings.Contains(s.text, "[output truncated: ")
			if marked != s.cut || s.flag != s.cut || !strings.HasSuffix(s.text, s.end) {
				t.Errorf("%q: %s cut=%v (flag %v), want %v, ending %q: …%q", c.cmd, s.name, marked, s.flag, s.cut, s.end, s.text[max(0, len(s.text)-40):])
			}
		}
		if res.Truncated != (c.cutOut || c.cutErr) || (res.Truncated && res.OriginalBytes != out.StdoutBytes+out.StderrBytes) {
			t.Errorf("%q: truncated=%v originalBytes=%d, streams %d+%d", c.cmd, res.Truncated, res.OriginalBytes, out.StdoutBytes, out.StderrBytes)
		}
	}
}

// TestErrorsKeepWhatWasWritten: a command line stopped by its timeout or
// by a refusal has its output so far in the error, bounded.
func TestErrorsKeepWhatWasWritten(t *testing.T) {
	f := newFixture(t, sandbox.ModeBestEffort, nil)
	cases := []struct {
		args      map[string]any
		timeoutMs int64
		code      registry.Code
		want      []string
	}{
		{map[string]any{"command": "echo begin; seq 1 100000; echo 'error: x' >&2; sleep 10", "timeoutMs": 2000}, 0,
			registry.CodeTimeout, []string{"timeoutMs=2000", "begin\n1\n2\n", "99999\n100000\n", "[output truncated: 588901 bytes total", "error: x\n"}},
		{map[string]any{"command": "echo begin; echo 'error: y' >&2; sleep 10"}, 1000,
			registry.CodeTimeout, []string{"did not finish within 1s", "begin\n", "error: y\n"}},
		{map[string]any{"command": "echo important; touch created.txt; p=python3; $p"}, 0,
			registry.CodeTool, []string{`program "python3" is not allowed`, "important\n", "[stderr, "}},
		{map[string]any{"command": "sleep 10", "timeoutMs": 500}, 0,
			registry.CodeTimeout, []string{"It wrote nothing to stdout or stderr."}},
	}
	for _, c := range cases {
		res := f.call(c.args, c.timeoutMs)
		if res.Code() != c.code {
			t.Errorf("%v: want %s, got %s %+v", c.args, c.code, res.Status, res.Error)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(res.Error.Message, w) {
				t.Errorf("%v: the message does not say %q: %q", c.args, w, res.Error.Message)
			}
		}
		if n := len([]rune(res.Error.Message)); n > 1000 {
			t.Errorf("%v: a message of %d characters", c.args, n)
		}
	}
	if !f.exists("created.txt") {
		t.Error("the command before the refusal did not run")
	}
}
