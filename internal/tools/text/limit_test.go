package text

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// split and regex_find say when they stop at limit, and split returns
// only whole parts: before, split with limit 2 answered ["a",
// "b\nc\nd\ne"], the unsplit rest in its last part, and neither said it
// had stopped.
func TestLimitIsSaid(t *testing.T) {
	for _, c := range []struct{ args, result, note string }{
		{`{"operation":"split","text":"a\nb\nc\nd\né","limit":2}`, `["a","b"]`, "the first 2 parts, and the text from character 4 on was left out"},
		{`{"operation":"split","text":"a\nb","limit":2}`, `["a","b"]`, ""},
		{`{"operation":"split","text":"ab","separator":"","limit":1}`, `["a"]`, "the first 1 parts, and the text from character 1 on"},
		{`{"operation":"regex_find","text":"a1 a2 a3","pattern":"a\\d","limit":2}`, `[{"match":"a1","index":0},{"match":"a2","index":3}]`, "the first 2 matches, and there are more"},
		{`{"operation":"regex_find","text":"a1 a2","pattern":"a\\d","limit":2}`, `[{"match":"a1","index":0},{"match":"a2","index":3}]`, ""},
	} {
		res := run1(t, c.args)
		var out struct {
			Result json.RawMessage `json:"result"`
			Note   string          `json:"note"`
		}
		if err := json.Unmarshal(res.Output, &out); err != nil || string(out.Result) != c.result ||
			(c.note == "") != (out.Note == "") || !strings.Contains(out.Note, c.note) {
			t.Errorf("%s: %s %+v", c.args, res.Output, res.Error)
		}
	}
}

// regex_find counts each match's index in characters from the one
// before: counting from the start of the text each time took 16.5 s for
// 10,000 matches after 100,000 "é" in the service.
func TestRegexFindIndexIsLinear(t *testing.T) {
	text := strings.Repeat("é", 200000) + strings.Repeat("aé", 10000)
	args, _ := json.Marshal(map[string]any{"operation": "regex_find", "text": text, "pattern": "a", "limit": 10000})
	start := time.Now()
	res := run1(t, string(args))
	el := time.Since(start)
	var out struct {
		Result []match `json:"result"`
		Note   string  `json:"note"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil || len(out.Result) != 10000 || out.Note != "" {
		t.Fatalf("after %v: %d matches, note %q, error %+v", el, len(out.Result), out.Note, res.Error)
	}
	for i, m := range out.Result {
		if want := 200000 + 2*i; m.Index != want {
			t.Fatalf("match %d at character %d, want %d", i, m.Index, want)
		}
	}
	if el > 2*time.Second {
		t.Errorf("10,000 matches after 200,000 characters took %v", el)
	}
}

// BenchmarkRegexFindNonASCII: 10,000 matches after 100,000 two-byte
// characters. Counting each index from the start of the text took 5.6 s
// an operation (on a 2-core test machine); counting on from the previous
// match takes 6.5 ms, about 850 times less.
func BenchmarkRegexFindNonASCII(b *testing.B) {
	text := strings.Repeat("é", 100000) + strings.Repeat("a", 10000)
	re := regexp.MustCompile("a")
	for b.Loop() {
		findAll(re, text, 10000)
	}
}
