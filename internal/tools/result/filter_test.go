package result_test

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/result"
)

// kept is a Reader whose kept output is the string it is.
type kept string

func (k kept) ReadOutput(_ context.Context, _ *registry.Caller, _ []string, _, _ string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	n := int64(len(k))
	info := &registry.SpillInfo{ToolName: "json__query", TotalBytes: n, StoredBytes: n}
	if offset >= n {
		return info, nil, nil
	}
	return info, []byte(k[offset:min(n, offset+int64(limit))]), nil
}

// filterAll follows nextOffset to the end and returns every match.
func filterAll(t *testing.T, out string, args map[string]any) []result.Match {
	t.Helper()
	tools, binder := result.Tools(result.Options{})
	binder.Bind(kept(out))
	args["toolCallId"] = "c1"
	var all []result.Match
	for range 1000 {
		raw, _ := json.Marshal(args)
		v, err := tools[0].Handler.Run(context.Background(), &registry.Request{Name: result.Name, Arguments: raw})
		if err != nil {
			t.Fatalf("result__read %s: %v", raw, err)
		}
		o := v.(result.Output)
		for _, m := range o.Matches {
			if end := m.Offset + int64(len(m.Line)); m.Offset < 0 || end > int64(len(out)) || out[m.Offset:end] != m.Line {
				t.Fatalf("match %+v: line is not the output at its offset", m)
			}
			if m.MatchOffset != nil && (*m.MatchOffset < m.Offset || *m.MatchOffset >= m.Offset+int64(len(m.Line))) {
				t.Fatalf("match %+v: matchOffset is not in the line shown", m)
			}
		}
		all = append(all, o.Matches...)
		if o.EOF {
			return all
		}
		if o.NextOffset <= args["offset"].(int64) {
			t.Fatalf("no progress at offset %d: %+v", o.NextOffset, o)
		}
		args["offset"] = o.NextOffset
	}
	t.Fatal("the filter does not reach the end")
	return nil
}

// A cut structured output is one line of compact JSON, longer than a
// read's window: a match in it comes back with its own offset and the
// text around it, not with the window's offset and first bytes. Before,
// NEEDLE at offset ~564000 came back as offset 524288 and a line without
// it.
func TestFilterShowsWhereAMatchInALongLineIs(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := range 60000 {
		if i > 0 {
			b.WriteString(",")
		}
		name := "n" + strings.Repeat("x", i%7)
		if i == 40000 || i == 50000 {
			name = "NEEDLE"
		}
		b.WriteString(`{"id":` + strconv.Itoa(i) + `,"name":"` + name + `"}`)
	}
	b.WriteString("]")
	out := b.String()
	want := regexp.MustCompile("NEEDLE").FindAllStringIndex(out, -1)
	if len(out) < 3*256<<10 || len(want) != 2 {
		t.Fatalf("the output is %d bytes with %d needles", len(out), len(want))
	}
	got := filterAll(t, out, map[string]any{"offset": int64(0), "pattern": "NEEDLE", "limit": 200})
	if len(got) != 2 {
		t.Fatalf("%d matches: %+v", len(got), got)
	}
	for i, m := range got {
		if m.MatchOffset == nil || *m.MatchOffset != int64(want[i][0]) || len(m.Line) > 200 || !strings.Contains(m.Line, "NEEDLE") {
			t.Errorf("match %d: %+v; want matchOffset %d", i, m, want[i][0])
		}
	}
}

// ^ and $ match where a line begins and ends, not where a read's window
// or a match's piece does: before, "^[0-9]" matched at offset 0 of a line
// that begins with "[", and "\d$" at every window's end.
func TestFilterAnchorsAtTheLinesEdgesOnly(t *testing.T) {
	long := "[" + strings.Repeat("1234567,", 100000) + "0]"
	out := "7 short\n" + long + "\n" + "8 short\n" + long
	for _, c := range []struct {
		pattern string
		want    []int64 // match offsets
	}{
		{`^[0-9]`, []int64{0, int64(8 + len(long) + 1)}},
		{`[0-9]$`, nil},
		{`\]$`, []int64{int64(8 + len(long) - 1), int64(len(out) - 1)}},
		{`^\[`, []int64{8, int64(8 + len(long) + 1 + 8)}},
	} {
		var got []int64
		for _, m := range filterAll(t, out, map[string]any{"offset": int64(0), "pattern": c.pattern, "limit": 100}) {
			at := m.Offset
			if m.MatchOffset != nil {
				at = *m.MatchOffset
			}
			got = append(got, at)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: matches at %v; want %v", c.pattern, got, c.want)
		}
	}
	// An offset inside a line does not begin one.
	if got := filterAll(t, out, map[string]any{"offset": int64(9), "pattern": `^1`}); len(got) != 0 {
		t.Errorf("^1 from offset 9, inside a line: %+v", got)
	}
}

// Every match in a long line is found once, whatever limit pages them.
func TestFilterPagesThroughTheMatchesOfALongLine(t *testing.T) {
	out := strings.Repeat(strings.Repeat("é", 1500)+"ab", 400) // one line of 1.2 MB
	want := regexp.MustCompile("b").FindAllStringIndex(out, -1)
	for _, limit := range []int{1, 50, 3000, 65536} {
		got := filterAll(t, out, map[string]any{"offset": int64(0), "pattern": "b", "limit": limit})
		if len(got) != len(want) {
			t.Fatalf("limit %d: %d matches, want %d", limit, len(got), len(want))
		}
		for i, m := range got {
			if *m.MatchOffset != int64(want[i][0]) {
				t.Fatalf("limit %d: match %d at %d, want %d", limit, i, *m.MatchOffset, want[i][0])
			}
		}
	}
}
