package data

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// FuzzParse: any text in any format parses to rows that encode as I-JSON,
// within the row limit, or fails with a registry error; never a panic.
func FuzzParse(f *testing.F) {
	f.Add(uint8(0), "a,b\n1,2\n", 0)
	f.Add(uint8(1), "a\tb\n1\t2\n", 1)
	f.Add(uint8(2), "{\"a\":1}\n[2]\n", 0)
	f.Add(uint8(3), "a: &x [1,2]\nb: *x\n---\n- 1\n", 1)
	f.Add(uint8(3), "!!binary aGk=\n", 0)
	f.Add(uint8(0), "\"a\"\"b\",c\n", 0)
	f.Add(uint8(3), "a: \"\\0number:1e999\"\nb: 123456789012345678901234567890\n", 0)
	f.Add(uint8(3), "a: !!int 1"+strings.Repeat("0", 400)+"\n", 0)
	formats := []string{"csv", "tsv", "jsonl", "yaml"}
	tools := Tools(Options{MaxRows: 50})
	f.Fuzz(func(t *testing.T, format uint8, text string, offset int) {
		if len(text) > 4096 {
			t.Skip()
		}
		args, _ := json.Marshal(map[string]any{"format": formats[int(format)%len(formats)], "text": text, "offset": max(offset, 0) % 100})
		out, err := tools[0].Handler.Run(context.Background(), &registry.Request{Name: "data__parse", Arguments: args, MaxOutputBytes: 16384})
		if err != nil {
			var e *registry.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T %v for %s", err, err, args)
			}
			return
		}
		res := out.(*Result)
		if len(res.Rows) > 50 {
			t.Fatalf("%d rows, limit 50", len(res.Rows))
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatalf("output does not encode: %v for %s", err, args)
		}
		// Every JSON reader takes it: no number beyond a 64-bit float.
		if err := registry.Interoperable(b); err != nil {
			t.Fatalf("output is not I-JSON: %v for %s", err, args)
		}
	})
}
