package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func benchDefaults() Defaults {
	return Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}
}

func benchExecutor(b *testing.B, o Options, tools ...*Tool) *Executor {
	b.Helper()
	tools = append(tools, tool("t__echo", ReadOnly, func(_ context.Context, r *Request) (any, error) { return "ok", nil }))
	reg, err := New(benchDefaults(), tools...)
	if err != nil {
		b.Fatal(err)
	}
	o.Registry = reg
	if o.Metrics == nil {
		o.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	return NewExecutor(o)
}

// trivialCalls are calls of a tool that does nothing: with the arguments
// of a typical call (a string and an integer with a minimum), and with
// none.
func trivialCalls() []struct {
	name string
	call *Call
} {
	return []struct {
		name string
		call *Call
	}{
		{"args=typical", &Call{ToolCallID: "c", ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a","limit":3}`)}},
		{"args=string", &Call{ToolCallID: "c", ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"notes/today.md"}`)}},
	}
}

// BenchmarkExecuteTrivial is the executor's own cost on a tool that does
// nothing: lookup, decode, validate, digest, policy, timeout, run,
// encode, metrics, span and audit log line. log=discard drops the audit
// line before it is formatted; log=json writes it as the service does.
func BenchmarkExecuteTrivial(b *testing.B) {
	for _, lg := range []struct {
		name string
		log  *slog.Logger
	}{{"log=discard", nil}, {"log=json", slog.New(slog.NewJSONHandler(io.Discard, nil))}} {
		e := benchExecutor(b, Options{Logger: lg.log})
		for _, c := range trivialCalls() {
			b.Run(lg.name+"/"+c.name, func(b *testing.B) {
				caller := Anonymous()
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					res, err := e.Execute(ctx, caller, c.call)
					if err != nil || res.Status != StatusOK {
						b.Fatal(err, res)
					}
				}
			})
		}
	}
}

// BenchmarkValidate is decoding and schema validation of the arguments.
func BenchmarkValidate(b *testing.B) {
	e := benchExecutor(b, Options{})
	t, _ := e.Registry().Lookup("t__echo")
	for _, c := range []struct{ name, args string }{
		{"typical", `{"path":"a","limit":3}`},
		{"string", `{"path":"notes/today.md"}`},
		{"array", `{"path":"a","limit":3,"items":[1,2,3,4,5,6,7,8]}`},
	} {
		raw := json.RawMessage(c.args)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, v, derr := decodeArguments(raw, 64, nil)
				if derr != nil {
					b.Fatal(derr)
				}
				if err := t.schema.Validate(v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkArgumentsDigest is the canonical digest of decoded arguments.
func BenchmarkArgumentsDigest(b *testing.B) {
	_, v, derr := decodeArguments(json.RawMessage(`{"path":"notes/today.md","limit":3,"mode":"a","items":[1,2,3]}`), 64, nil)
	if derr != nil {
		b.Fatal(derr)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(ArgumentsDigest(v)) != 64 {
			b.Fatal("short digest")
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
	b.Run("string", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, tr, _, _ := encodeOutput(s, 16384); !tr {
				b.Fatal("not truncated")
			}
		}
	})
	obj := map[string]any{"result": s}
	b.Run("object", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, tr, _, _ := encodeOutput(obj, 16384); !tr {
				b.Fatal("not truncated")
			}
		}
	})
}

// genTools returns n distinct tools, each with a schema of its own, as a
// large catalog of declared tools would have.
func genTools(n int) []*Tool {
	tiers := Tiers()
	tools := make([]*Tool, n)
	for i := range tools {
		schema := fmt.Sprintf(`{"type":"object","additionalProperties":false,"required":["q%d"],"properties":{`+
			`"q%d":{"type":"string","minLength":1,"maxLength":%d,"description":"What tool %d looks for."},`+
			`"limit":{"type":"integer","minimum":1,"maximum":%d,"description":"At most this many results."},`+
			`"mode":{"enum":["fast","exact"],"description":"How to search."}}}`, i, i, 100+i, i, 10+i)
		tools[i] = &Tool{
			Definition: Definition{
				Name:        fmt.Sprintf("gen%02d__tool%05d", i%100, i),
				Description: fmt.Sprintf("Generated tool number %d, for catalog benchmarks.", i),
				Tier:        tiers[i%len(tiers)],
				Parameters:  json.RawMessage(schema),
				Tags:        []string{fmt.Sprintf("group%d", i%10)},
			},
			Handler: Func(func(context.Context, *Request) (any, error) { return "ok", nil }),
		}
	}
	return tools
}

// BenchmarkNew is registering (validating and compiling) 100 tools per
// op; ns/tool is the start-up cost of one declared tool.
func BenchmarkNew(b *testing.B) {
	const n = 100
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(benchDefaults(), genTools(n)...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/tool")
}

// BenchmarkCatalog is the catalog at 10, 1,000 and 10,000 tools: listing
// it (everything, and for a caller limited by globs and tier), looking a
// tool up, calling a known tool, ranking the names closest to a misspelt
// one (Closest) and calling an unknown tool (which does that). Each
// registry is built once.
func BenchmarkCatalog(b *testing.B) {
	limited := &Caller{ID: "limited", Tools: []string{"gen1*__*", "t__*"}, MaxTier: SideEffecting, Scopes: []Scope{ScopeCall}}
	for _, n := range []int{10, 1000, 10000} {
		e := benchExecutor(b, Options{}, genTools(n)...)
		reg := e.Registry()
		mid := fmt.Sprintf("gen%02d__tool%05d", (n/2)%100, n/2)
		b.Run(fmt.Sprintf("tools=%d/List", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if len(reg.List(nil, Filter{})) != n+1 {
					b.Fatal("short list")
				}
			}
		})
		b.Run(fmt.Sprintf("tools=%d/ListForCaller", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if len(reg.List(limited, Filter{})) == 0 {
					b.Fatal("empty list")
				}
			}
		})
		b.Run(fmt.Sprintf("tools=%d/Lookup", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := reg.Lookup(mid); !ok {
					b.Fatal("not found")
				}
			}
		})
		ctx, caller := context.Background(), Anonymous()
		known := &Call{ToolCallID: "c", ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a","limit":3}`)}
		b.Run(fmt.Sprintf("tools=%d/Execute", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res, err := e.Execute(ctx, caller, known); err != nil || res.Status != StatusOK {
					b.Fatal(err, res)
				}
			}
		})
		b.Run(fmt.Sprintf("tools=%d/Closest", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if c := reg.Closest(caller, "gen01__tol00001", 3); len(c) == 0 || c[0] != "gen01__tool00001" {
					b.Fatal(c)
				}
			}
		})
		unknown := &Call{ToolCallID: "c", ToolName: "gen01__tol00001", Arguments: json.RawMessage(`{}`)}
		b.Run(fmt.Sprintf("tools=%d/ExecuteUnknown", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if res, err := e.Execute(ctx, caller, unknown); err != nil || res.Code() != CodeToolNotFound {
					b.Fatal(err, res)
				}
			}
		})
	}
}
