package text

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolsvc/toolsvc/internal/registry"
)

var operations = []string{"upper", "lower", "title", "trim", "replace", "regex_replace", "regex_find", "split", "join", "base64_encode", "base64_decode", "hash", "count"}

// FuzzTransform: every operation on any text ends with a result or a
// registry error; replace returns exactly the size its pre-check computes,
// and count agrees with the text.
func FuzzTransform(f *testing.F) {
	f.Add(uint8(4), "aaa", "a", "bb", "")
	f.Add(uint8(5), "x1y22", "", "<$1>", `(\d+)`)
	f.Add(uint8(6), "héllo wörld", "", "", `\p{L}+`)
	f.Add(uint8(10), "aGk=", "", "", "")
	f.Add(uint8(12), "a\nb c\n", "", "", "")
	f.Add(uint8(2), "ǅ ß ﬃ", "", "", "")
	f.Fuzz(func(t *testing.T, op uint8, text, find, replacement, pattern string) {
		if len(text) > 4096 || len(replacement) > 1024 {
			t.Skip()
		}
		a := map[string]any{"operation": operations[int(op)%len(operations)], "text": text, "separator": find, "parts": strings.Split(text, "\n")}
		if find != "" {
			a["find"] = find
		}
		if replacement != "" {
			a["replacement"] = replacement
		}
		if pattern != "" {
			a["pattern"] = pattern
		}
		args, _ := json.Marshal(a)
		out, err := run(context.Background(), &registry.Request{Name: "text__transform", Arguments: args})
		if err != nil {
			var e *registry.Error
			if !errors.As(err, &e) {
				t.Fatalf("%s: error %T %v", a["operation"], err, err)
			}
			return
		}
		if _, err := json.Marshal(out); err != nil {
			t.Fatalf("%s: output does not encode: %v", a["operation"], err)
		}
		// JSON carries text as UTF-8; compare with what the tool sees.
		var in struct {
			Text, Find, Replacement string
		}
		_ = json.Unmarshal(args, &in)
		switch a["operation"] {
		case "replace":
			m := out.(map[string]any)
			n := m["replacements"].(int)
			want := len(in.Text) + n*(len(in.Replacement)-len(in.Find))
			if got := len(m["result"].(string)); got != want {
				t.Fatalf("replace: result %d bytes, pre-check %d", got, want)
			}
		case "count":
			c := out.(result).Result.(map[string]int)
			if c["bytes"] != len(in.Text) || c["characters"] != utf8.RuneCountInString(in.Text) {
				t.Fatalf("count %v for %q", c, in.Text)
			}
		}
	})
}
