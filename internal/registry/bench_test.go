package registry

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func benchExecutor(b *testing.B) *Executor {
	b.Helper()
	reg, err := New(Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000},
		tool("t__echo", ReadOnly, func(_ context.Context, r *Request) (any, error) { return "ok", nil }))
	if err != nil {
		b.Fatal(err)
	}
	return NewExecutor(Options{Registry: reg, Metrics: NewMetrics(prometheus.NewRegistry())})
}

// BenchmarkExecuteTrivial is the executor's own cost: lookup, decode,
// validate, policy, timeout, run, encode, metrics and audit log.
func BenchmarkExecuteTrivial(b *testing.B) {
	e := benchExecutor(b)
	call := &Call{ToolCallID: "c", ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a","limit":3}`)}
	caller := Anonymous()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		res, err := e.Execute(ctx, caller, call)
		if err != nil || res.Status != StatusOK {
			b.Fatal(err, res)
		}
	}
}

// BenchmarkValidate is schema validation alone.
func BenchmarkValidate(b *testing.B) {
	e := benchExecutor(b)
	t, _ := e.Registry().Lookup("t__echo")
	raw := json.RawMessage(`{"path":"a","limit":3,"items":[1,2,3]}`)
	b.ReportAllocs()
	for b.Loop() {
		_, v, derr := decodeArguments(raw)
		if derr != nil {
			b.Fatal(derr)
		}
		if err := t.schema.Validate(v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTruncate is the cost of cutting a 1 MB output to 16 KiB.
func BenchmarkTruncate(b *testing.B) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = 'a' + byte(i%26)
	}
	s := string(big)
	b.ReportAllocs()
	for b.Loop() {
		if _, tr, _, _ := encodeOutput(s, 16384); !tr {
			b.Fatal("not truncated")
		}
	}
}
