package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/telemetry"
)

// BenchmarkPostCalls is POST /calls end to end through a real HTTP server
// on loopback: client, chi, decoding, executor, text__transform, encoding.
func BenchmarkPostCalls(b *testing.B) {
	e := newEnv(b)
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		post(b, client, e.ts.URL, body)
	}
}

func post(b *testing.B, client *http.Client, base string, body []byte) {
	readOK(b)(client.Post(base+"/calls", "application/json", bytes.NewReader(body)))
}

// readOK returns what reads an answer and fails b unless it is 200.
func readOK(b *testing.B) func(*http.Response, error) {
	return func(resp *http.Response, err error) {
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}

// postTo posts body as JSON to url with the headers header, reads the
// answer and fails b unless it is 200.
func postTo(b *testing.B, client *http.Client, url string, body []byte, header map[string]string) {
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	readOK(b)(client.Do(req))
}

// productionEnv is newEnv with what a production instance records: HTTP
// metrics, spans from tp, and the JSON log at info with trace ids.
func productionEnv(b *testing.B, tp trace.TracerProvider) *env {
	log := telemetry.NewLogger(io.Discard, telemetry.LogOptions{Level: slog.LevelInfo})
	return newEnv(b, func(d *Deps, o *registry.Options) {
		d.Registerer = d.Gatherer.(*prometheus.Registry)
		d.TracerProvider = tp
		d.Logger, o.Logger = log, log
		o.Tracer = tp.Tracer("toolsvc")
	})
}

// BenchmarkThroughput compares, in one run, parallel POST /calls to a
// trivial read_only tool (no store I/O) and to a trivial side_effecting
// tool, recorded in the embedded store before and after it runs.
func BenchmarkThroughput(b *testing.B) {
	noop := registry.Func(func(ctx context.Context, r *registry.Request) (any, error) { return "ok", nil })
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "toolsvc.db"), sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	e := newEnv(b, func(d *Deps, o *registry.Options) {
		reg, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384, ErrorMessageLimit: 1000},
			&registry.Tool{Definition: registry.Definition{Name: "bench__read", Description: "read", Tier: registry.ReadOnly, Parameters: schema}, Handler: noop},
			&registry.Tool{Definition: registry.Definition{Name: "bench__write", Description: "write", Tier: registry.SideEffecting, Parameters: schema}, Handler: noop})
		if err != nil {
			b.Fatal(err)
		}
		o.Registry, o.Store = reg, st
	})
	var seq atomic.Int64
	for _, tool := range []string{"bench__read", "bench__write"} {
		b.Run(tool, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
				for pb.Next() {
					body := fmt.Appendf(nil, `{"toolCallId":"b%d","toolName":%q,"arguments":{"n":1}}`, seq.Add(1), tool)
					post(b, client, e.ts.URL, body)
				}
			})
		})
	}
}

// BenchmarkPostCallsTraced is BenchmarkPostCalls with everything a
// production instance records: HTTP metrics, a sampled server span and
// execute_tool span (exported nowhere), and the JSON log with trace ids.
func BenchmarkPostCallsTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	e := productionEnv(b, tp)
	body := []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`)
	client := e.ts.Client()
	b.ReportAllocs()
	for b.Loop() {
		post(b, client, e.ts.URL, body)
	}
}

// BenchmarkListTools is GET /tools end to end for catalogs of 10, 1,000
// and 10,000 tools, natively and in the OpenAI shape.
func BenchmarkListTools(b *testing.B) {
	noop := registry.Func(func(ctx context.Context, r *registry.Request) (any, error) { return "ok", nil })
	for _, n := range []int{10, 1000, 10000} {
		tools := make([]*registry.Tool, n)
		for i := range tools {
			schema := fmt.Sprintf(`{"type":"object","additionalProperties":false,"required":["q%d"],"properties":{`+
				`"q%d":{"type":"string","maxLength":%d,"description":"What tool %d looks for."},`+
				`"limit":{"type":"integer","minimum":1,"maximum":100,"description":"At most this many results."}}}`, i, i, 100+i, i)
			tools[i] = &registry.Tool{Definition: registry.Definition{Name: fmt.Sprintf("gen%02d__tool%05d", i%100, i),
				Description: fmt.Sprintf("Generated tool number %d, for catalog benchmarks.", i), Tier: registry.ReadOnly,
				Parameters: json.RawMessage(schema)}, Handler: noop}
		}
		e := newEnv(b, func(d *Deps, o *registry.Options) {
			reg, err := registry.New(registry.Defaults{Timeout: 5e9, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
			if err != nil {
				b.Fatal(err)
			}
			o.Registry = reg
		})
		client := e.ts.Client()
		for _, format := range []string{"native", "openai"} {
			b.Run(fmt.Sprintf("tools=%d/format=%s", n, format), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					resp, err := client.Get(e.ts.URL + "/tools?format=" + format)
					if err != nil {
						b.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Fatal(resp.Status)
					}
					b.SetBytes(n)
				}
			})
		}
	}
}
