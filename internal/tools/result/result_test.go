package result_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/tools/result"
)

// big is the output of t__big: numbered lines, 100 KB or so.
var big = func() string {
	var b strings.Builder
	for i := range 12000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}()

// wide is the output of t__wide: characters of every UTF-8 length.
var wide = strings.Repeat("é€😀a", 1000)

// setup returns an executor with result__read, t__big, t__wide and extra.
func setup(t *testing.T, retention time.Duration, extra ...*registry.Tool) *registry.Executor {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	tools, binder := result.Tools(result.Options{})
	tools = append(tools, &registry.Tool{
		Definition: registry.Definition{Name: "t__big", Description: "a big output", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler:    registry.Func(func(ctx context.Context, r *registry.Request) (any, error) { return big, nil }),
	}, &registry.Tool{
		Definition: registry.Definition{Name: "t__wide", Description: "characters of 1 to 4 bytes", Tier: registry.ReadOnly, Parameters: json.RawMessage(`{"type":"object"}`)},
		Handler:    registry.Func(func(ctx context.Context, r *registry.Request) (any, error) { return wide, nil }),
	})
	tools = append(tools, extra...)
	reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 4096, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	e := registry.NewExecutor(registry.Options{Registry: reg, Store: st,
		Spill: registry.NewSpiller(registry.SpillOptions{Store: st, Retention: retention})})
	binder.Bind(e)
	return e
}

func call(t *testing.T, e *registry.Executor, caller *registry.Caller, c *registry.Call) *registry.Result {
	t.Helper()
	res, err := e.Execute(context.Background(), caller, c)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var alice = &registry.Caller{ID: "alice", Scopes: []registry.Scope{registry.ScopeCall}}

func TestReadOnPagesThroughTheWholeOutput(t *testing.T) {
	e := setup(t, time.Hour)
	res := call(t, e, alice, &registry.Call{ToolCallID: "c1", ToolName: "t__big"})
	var shown string
	if err := json.Unmarshal(res.Output, &shown); err != nil || !res.Truncated {
		t.Fatalf("output %v truncated %v", err, res.Truncated)
	}
	m := regexp.MustCompile(`read on with result__read (\{.*\})\]$`).FindStringSubmatch(shown)
	if m == nil {
		t.Fatalf("no read-on hint: %q", shown[len(shown)-200:])
	}
	// Call exactly what the marker says, then follow nextOffset.
	var args map[string]any
	if err := json.Unmarshal([]byte(m[1]), &args); err != nil {
		t.Fatal(err)
	}
	got := big[:int(args["offset"].(float64))]
	if !strings.HasPrefix(shown, got) {
		t.Fatal("the marker's offset is not where the shown output ends")
	}
	args["limit"] = 5000
	for range 100 {
		raw, _ := json.Marshal(args)
		r := call(t, e, alice, &registry.Call{ToolName: "result__read", Arguments: raw})
		var out result.Output
		if err := json.Unmarshal(r.Output, &out); err != nil || r.Status != registry.StatusOK {
			t.Fatalf("result__read: %s %+v", r.Output, r.Error)
		}
		got += *out.Content
		if out.EOF {
			break
		}
		args["offset"] = out.NextOffset
	}
	if got != big {
		t.Fatalf("read back %d bytes, want the %d of the output", len(got), len(big))
	}

	// A filter finds the lines and where they are.
	r := call(t, e, alice, &registry.Call{ToolName: "result__read", Arguments: json.RawMessage(`{"toolCallId":"c1","pattern":"^line 1199[0-9]$"}`)})
	var out result.Output
	if err := json.Unmarshal(r.Output, &out); err != nil || len(out.Matches) != 10 || !out.EOF {
		t.Fatalf("filter: %s", r.Output)
	}
	for i, mt := range out.Matches {
		if want := "line 1199" + strconv.Itoa(i); mt.Line != want || big[mt.Offset:mt.Offset+int64(len(want))] != want {
			t.Errorf("match %d: %+v", i, mt)
		}
	}
}

func TestReadOnFollowsTheCallersRules(t *testing.T) {
	e := setup(t, time.Hour)
	call(t, e, alice, &registry.Call{ToolCallID: "c1", ToolName: "t__big"})
	read := json.RawMessage(`{"toolCallId":"c1"}`)
	bob := &registry.Caller{ID: "bob", Scopes: alice.Scopes}
	if r := call(t, e, bob, &registry.Call{ToolName: "result__read", Arguments: read}); r.Status != registry.StatusError || !strings.Contains(r.Error.Message, "no kept output") {
		t.Errorf("another caller read alice's output: %s %+v", r.Output, r.Error)
	}
	narrow := &registry.Caller{ID: "alice", Scopes: alice.Scopes, Tools: []string{"result__*"}}
	if r := call(t, e, narrow, &registry.Call{ToolName: "result__read", Arguments: read}); r.Code() != registry.CodeToolNotInCatalog {
		t.Errorf("read the output of a tool out of the caller's catalog: %s %+v", r.Output, r.Error)
	}
	if r := call(t, e, alice, &registry.Call{ToolName: "result__read", Arguments: read, Catalog: []string{"result__read"}}); r.Code() != registry.CodeToolNotInCatalog {
		t.Errorf("read the output of a tool out of the request's catalog: %s %+v", r.Output, r.Error)
	}
	if r := call(t, e, alice, &registry.Call{ToolName: "result__read", Arguments: read}); r.Status != registry.StatusOK {
		t.Errorf("the caller could not read its own output: %+v", r.Error)
	}
}

func TestKeptOutputExpires(t *testing.T) {
	e := setup(t, 50*time.Millisecond)
	call(t, e, alice, &registry.Call{ToolCallID: "c1", ToolName: "t__big"})
	time.Sleep(100 * time.Millisecond)
	r := call(t, e, alice, &registry.Call{ToolName: "result__read", Arguments: json.RawMessage(`{"toolCallId":"c1"}`)})
	if r.Status != registry.StatusError || !strings.Contains(r.Error.Message, "expire") {
		t.Errorf("an expired output was read: %s %+v", r.Output, r.Error)
	}
}

// TestReadOnKeepsCharactersWhole: wherever a read starts and however
// little it asks for, it returns whole characters of the stored text and
// moves on, so that a reader following nextOffset never loops and never
// sees U+FFFD that is not in the output.
func TestReadOnKeepsCharactersWhole(t *testing.T) {
	e := setup(t, time.Hour)
	if res := call(t, e, alice, &registry.Call{ToolCallID: "w", ToolName: "t__wide"}); !res.Truncated {
		t.Fatal("t__wide was not cut")
	}
	read := func(offset int64, limit int) result.Output {
		t.Helper()
		raw, _ := json.Marshal(map[string]any{"toolCallId": "w", "offset": offset, "limit": limit})
		r := call(t, e, alice, &registry.Call{ToolName: "result__read", Arguments: raw})
		var out result.Output
		if err := json.Unmarshal(r.Output, &out); err != nil || r.Status != registry.StatusOK {
			t.Fatalf("result__read %s: %s %+v", raw, r.Output, r.Error)
		}
		return out
	}
	for offset := int64(0); offset < 12; offset++ {
		for limit := 1; limit <= 6; limit++ {
			out := read(offset, limit)
			start := offset
			for !utf8.RuneStart(wide[start]) {
				start++
			}
			if out.NextOffset <= offset || *out.Content != wide[start:out.NextOffset] || strings.ContainsRune(*out.Content, utf8.RuneError) {
				t.Errorf("offset %d limit %d: content %q next %d note %q", offset, limit, *out.Content, out.NextOffset, out.Note)
			}
			if (start != offset) != strings.Contains(out.Note, "inside a character") {
				t.Errorf("offset %d limit %d: note %q", offset, limit, out.Note)
			}
		}
	}
	var got strings.Builder
	for offset, n := int64(0), 0; ; n++ {
		if n > len(wide) {
			t.Fatal("reading one byte at a time does not reach the end")
		}
		out := read(offset, 1)
		got.WriteString(*out.Content)
		if out.EOF {
			break
		}
		offset = out.NextOffset
	}
	if got.String() != wide {
		t.Errorf("read back %d bytes, want the %d of the output", got.Len(), len(wide))
	}
}

// TestUnrecordedCallKeepsTheRecordedOutput: a read_only call is recorded
// only when it asks; one that is not, sent with the toolCallId of one that
// was, runs (read_only calls are not looked up) but its cut output does
// not replace the kept output the recorded call's stored result points to.
func TestUnrecordedCallKeepsTheRecordedOutput(t *testing.T) {
	e := setup(t, time.Hour)
	if res := call(t, e, alice, &registry.Call{ToolCallID: "rec1", ToolName: "t__big", Record: true}); !res.Truncated {
		t.Fatal("t__big was not cut")
	}
	res := call(t, e, alice, &registry.Call{ToolCallID: "rec1", ToolName: "t__wide"})
	var shown string
	if err := json.Unmarshal(res.Output, &shown); err != nil || !strings.Contains(shown, "the full output was not kept") {
		t.Errorf("the unrecorded call's marker: %.200q", shown[max(len(shown)-200, 0):])
	}
	r := call(t, e, alice, &registry.Call{ToolName: "result__read", Arguments: json.RawMessage(`{"toolCallId":"rec1","limit":100}`)})
	var out result.Output
	if err := json.Unmarshal(r.Output, &out); err != nil || out.Content == nil || *out.Content != big[:100] {
		t.Errorf("the recorded call's output now reads %s", r.Output)
	}
}
