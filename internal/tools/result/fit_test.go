package result_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/result"
)

// text is a tool whose output is out.
func text(name, out string) *registry.Tool {
	return &registry.Tool{
		Definition: registry.Definition{Name: name, Description: "a fixed output", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler:    registry.Func(func(context.Context, *registry.Request) (any, error) { return out, nil }),
	}
}

// readAnswer calls result__read with args and returns its answer, which
// must be whole: not cut by the executor, within the tool's output limit.
func readAnswer(t *testing.T, e *registry.Executor, args map[string]any) result.Output {
	t.Helper()
	raw, _ := json.Marshal(args)
	r := call(t, e, alice, &registry.Call{ToolName: result.Name, Arguments: raw})
	if r.Status != registry.StatusOK {
		t.Fatalf("result__read %s: %+v", raw, r.Error)
	}
	var out result.Output
	if err := json.Unmarshal(r.Output, &out); err != nil || r.Truncated {
		t.Fatalf("result__read %s: the answer (%d bytes, truncated %v) was cut by the executor: %.300s", raw, len(r.Output), r.Truncated, r.Output)
	}
	if limit := 2*65536 + 4096; len(r.Output) > limit {
		t.Fatalf("result__read %s: the answer is %d bytes, over the tool's output limit %d", raw, len(r.Output), limit)
	}
	return out
}

// An answer of text that takes more bytes in JSON than it has (a control
// character takes six: \u0001) still fits the tool's output limit, and its
// nextOffset is where its content ends. Before, reading 65536 bytes of
// \x01 made a 393,379-byte answer that the executor cut into a string
// showing 19,283 of them, with "nextOffset":69632: a model following it
// skipped about 46 KB.
func TestReadOnAnswerFitsItsOutputLimit(t *testing.T) {
	ctl := strings.Repeat("\x01", 300000)
	term := strings.Repeat("\x1b[32m✓\x1b[0m step\r\x1b[2K", 20000) // colour and progress codes
	e := setup(t, time.Hour, text("t__ctl", ctl), text("t__term", term), text("t__bytes", strings.Repeat("\xff", 100000)))
	for _, c := range []struct {
		id, tool, out string
		short         bool // the first read is shorter than limit
	}{{"ctl1", "t__ctl", ctl, true}, {"term1", "t__term", term, false}} {
		if res := call(t, e, alice, &registry.Call{ToolCallID: c.id, ToolName: c.tool}); !res.Truncated {
			t.Fatalf("%s was not cut", c.tool)
		}
		var got strings.Builder
		args := map[string]any{"toolCallId": c.id, "offset": int64(4096), "limit": 65536}
		for n := 0; ; n++ {
			if n > 100 {
				t.Fatalf("%s: reading on does not reach the end", c.id)
			}
			out := readAnswer(t, e, args)
			if *out.Content != c.out[args["offset"].(int64):out.NextOffset] {
				t.Fatalf("%s: content is not the output from offset %d to nextOffset %d", c.id, args["offset"], out.NextOffset)
			}
			if n == 0 && c.short && (len(*out.Content) >= 65536 || !strings.Contains(out.Note, "fewer than limit")) {
				t.Errorf("%s: %d bytes read, note %q; want fewer than limit, and a note that says so", c.id, len(*out.Content), out.Note)
			}
			got.WriteString(*out.Content)
			if out.EOF {
				break
			}
			args["offset"] = out.NextOffset
		}
		if got.String() != c.out[4096:] {
			t.Errorf("%s: read back %d bytes, want the %d from offset 4096", c.id, got.Len(), len(c.out)-4096)
		}
	}
	// Bytes that are not UTF-8 are written as \ufffd, six bytes each.
	call(t, e, alice, &registry.Call{ToolCallID: "ff", ToolName: "t__bytes"})
	if out := readAnswer(t, e, map[string]any{"toolCallId": "ff", "limit": 65536}); out.NextOffset <= 0 {
		t.Errorf("no progress: %+v", out)
	}
}

// A filtered read fits the output limit too, whatever its matches take in
// JSON: lines of control characters, lines that are empty (before, 300,000
// empty lines came back as 8,289,049 bytes of matches, cut by the
// executor), and one long line of them.
func TestReadOnFilterFitsItsOutputLimit(t *testing.T) {
	ctlLines := strings.Repeat(strings.Repeat("\x01", 99)+"\n", 3000)
	empty := strings.Repeat("\n", 300000)
	long := strings.Repeat("\x01", 300000)
	e := setup(t, time.Hour, text("t__lines", ctlLines), text("t__empty", empty), text("t__long", long))
	for _, c := range []struct {
		id, tool, out, pattern string
		want                   int // matches
	}{
		{"lines", "t__lines", ctlLines, "^", 3000},
		{"empty", "t__empty", empty, "^$", 300000},
		{"long", "t__long", long, ".", -1},
	} {
		call(t, e, alice, &registry.Call{ToolCallID: c.id, ToolName: c.tool})
		args := map[string]any{"toolCallId": c.id, "offset": int64(0), "limit": 65536, "pattern": c.pattern}
		matches, calls := 0, 0
		for ; ; calls++ {
			if calls > 1000 {
				t.Fatalf("%s: reading on does not reach the end", c.id)
			}
			out := readAnswer(t, e, args)
			for _, m := range out.Matches {
				if end := m.Offset + int64(len(m.Line)); c.out[m.Offset:end] != m.Line || end > out.NextOffset && m.MatchOffset == nil {
					t.Fatalf("%s: match %d at %d is not the output there, or ends after nextOffset %d", c.id, matches, m.Offset, out.NextOffset)
				}
			}
			matches += len(out.Matches)
			if out.EOF {
				break
			}
			if out.NextOffset <= args["offset"].(int64) {
				t.Fatalf("%s: no progress at %d", c.id, out.NextOffset)
			}
			args["offset"] = out.NextOffset
		}
		if c.want >= 0 && matches != c.want {
			t.Errorf("%s: %d matches in %d calls, want %d", c.id, matches, calls+1, c.want)
		}
		t.Logf("%s: %d matches in %d calls", c.id, matches, calls+1)
	}
}

// partial is a Reader whose kept output is the first stored bytes of a
// total-byte output.
type partial struct {
	kept  string
	total int64
}

func (p partial) ReadOutput(_ context.Context, _ *registry.Caller, _ []string, _, _ string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	n := int64(len(p.kept))
	info := &registry.SpillInfo{ToolName: "shell__exec", TotalBytes: p.total, StoredBytes: n}
	if offset >= n {
		return info, nil, nil
	}
	return info, []byte(p.kept[offset:min(n, offset+int64(limit))]), nil
}

// A read from past the end says so, and how long the output is. Before,
// it answered empty content with no note.
func TestReadOnPastTheEndSaysSo(t *testing.T) {
	e := setup(t, time.Hour)
	call(t, e, alice, &registry.Call{ToolCallID: "c1", ToolName: "t__big"})
	for _, pattern := range []string{"", "line"} {
		args := map[string]any{"toolCallId": "c1", "offset": int64(999999)}
		if pattern != "" {
			args["pattern"] = pattern
		}
		out := readAnswer(t, e, args)
		want := fmt.Sprintf("offset 999999 is past the end: the output is %d bytes", len(big))
		if !out.EOF || !strings.Contains(out.Note, want) {
			t.Errorf("pattern %q: eof %v note %q; want %q", pattern, out.EOF, out.Note, want)
		}
	}
	// At the end is not past it.
	if out := readAnswer(t, e, map[string]any{"toolCallId": "c1", "offset": int64(len(big))}); out.Note != "" || !out.EOF {
		t.Errorf("at the end: %+v", out)
	}

	// Past what was kept of a longer output.
	tools, binder := result.Tools(result.Options{})
	binder.Bind(partial{kept: "abc\n", total: 1000})
	raw, _ := json.Marshal(map[string]any{"toolCallId": "c1", "offset": 500})
	v, err := tools[0].Handler.Run(context.Background(), &registry.Request{Name: result.Name, Arguments: raw})
	if err != nil {
		t.Fatal(err)
	}
	want := "offset 500 is past the end of what was kept: the output was 1000 bytes, and only the first 4 were kept"
	if out := v.(result.Output); !strings.Contains(out.Note, want) {
		t.Errorf("past what was kept: note %q; want %q", out.Note, want)
	}
}
