package jsonq

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// FuzzQuery: any program over any input ends (within its deadline) with
// results or a registry error, never a panic, and the results encode as
// I-JSON. Memory is the worker's concern (internal/tools/worker); inputs
// are kept small so that the fuzzing process itself stays bounded.
func FuzzQuery(f *testing.F) {
	for _, s := range [][2]string{
		{`.`, `{"a":1}`}, {`.a[] | select(. > 1)`, `{"a":[1,2,3]}`}, {`[paths]`, `[[[]]]`}, {`to_entries`, `{"b":2}`},
		{`tostring | explode | implode`, `"é"`}, {`@base64d`, `"eA=="`}, {`getpath(["a","b"])`, `null`}, {`limit(3; repeat(1))`, `0`},
		{`ltrimstr("x") | test("a+")`, `"xaa"`}, {`$__loc__`, `1`}, {`input`, `1`}, {`env`, `null`}, {`.[1e300]`, `[]`},
		{`. * 100000000000000000000 | . * .`, `100000000000000000000`}, {`fromjson`, `"1e999"`}, {`[infinite]`, `null`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, program, input string) {
		if len(program) > 200 || len(input) > 1000 {
			t.Skip()
		}
		args, _ := json.Marshal(map[string]any{"program": program, "inputText": input, "maxResults": 50})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		out, err := run(ctx, &registry.Request{Name: "json__query", Arguments: args})
		if err != nil {
			var e *registry.Error
			if !errors.As(err, &e) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("program %q: error %T %v", program, err, err)
			}
			return
		}
		b, err := json.Marshal(out)
		if err != nil {
			t.Fatalf("program %q input %q: output does not encode: %v", program, input, err)
		}
		// Every JSON reader takes it: no number beyond a 64-bit float.
		if err := registry.Interoperable(b); err != nil {
			t.Fatalf("program %q input %q: output is not I-JSON: %v", program, input, err)
		}
	})
}
