package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	toolhttp "github.com/toolsvc/toolsvc/internal/http"
	"github.com/toolsvc/toolsvc/internal/registry"
)

// genTools returns n distinct tools, each with a schema of its own, as a
// large catalog of declared tools would have.
func genTools(n int) []*registry.Tool {
	tiers := registry.Tiers()
	tools := make([]*registry.Tool, n)
	for i := range tools {
		schema := fmt.Sprintf(`{"type":"object","additionalProperties":false,"required":["q%d"],"properties":{`+
			`"q%d":{"type":"string","minLength":1,"maxLength":%d,"description":"What tool %d looks for."},`+
			`"limit":{"type":"integer","minimum":1,"maximum":%d,"description":"At most this many results."},`+
			`"mode":{"enum":["fast","exact"],"description":"How to search."}}}`, i, i, 100+i, i, 10+i)
		tools[i] = &registry.Tool{
			Definition: registry.Definition{
				Name:        genName(i),
				Description: fmt.Sprintf("Generated tool number %d, for catalog benchmarks.", i),
				Tier:        tiers[i%len(tiers)],
				Parameters:  json.RawMessage(schema),
				Tags:        []string{fmt.Sprintf("group%d", i%10)},
			},
			Handler: registry.Func(func(context.Context, *registry.Request) (any, error) { return "ok", nil }),
		}
	}
	return tools
}

func genName(i int) string { return fmt.Sprintf("gen%02d__tool%05d", i%100, i) }

// serveCatalog serves n generated tools through the registry, executor
// and HTTP adapter of toolsvc, wired as cmd/toolsvc wires them (JSON log
// to stderr, Prometheus registry with the Go collector, default limits),
// without the built-in tools and the store.
func serveCatalog(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("catalog", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	n := fs.Int("tools", 10000, "tools in the catalog")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	start := time.Now()
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxTimeout: 5 * time.Minute, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, genTools(*n)...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "registry.New of %d tools: %s\n", reg.Len(), time.Since(start))
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exec := registry.NewExecutor(registry.Options{Registry: reg, Policy: registry.DefaultTierEffects(), Logger: log,
		Metrics: registry.NewMetrics(metrics), MaxTimeout: 5 * time.Minute, MaxConcurrency: 256})
	srv := toolhttp.NewServer(toolhttp.Deps{Executor: exec, Logger: log, Gatherer: metrics,
		Limits: toolhttp.Limits{MaxRequestBytes: 1 << 20, MaxJSONDepth: 64}})
	return serveUntil(ctx, *addr, srv)
}

// scale reports start-up time and memory of toolsvc on its built-in
// tools, and of a catalog server with 10 and with -scale-tools generated
// tools, with the cost of a call and of a catalog listing at each size.
func (h *harness) scale(ctx context.Context) error {
	fmt.Fprintf(h.out, "\n== scale: start-up and memory\n")
	var ready []float64
	var rss []float64
	for i := range 3 {
		svc, err := h.startToolsvc(ctx, "toolsvc-start-"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
		r, err := rssBytes(svc.pid())
		svc.stop()
		if err != nil {
			return err
		}
		ready = append(ready, float64(svc.ready))
		rss = append(rss, float64(r))
	}
	fmt.Fprintf(h.out, "toolsvc, built-in tools, default configuration: ready (exec to /healthz 200) %s, RSS %s (median of 3)\n",
		time.Duration(medianF(ready)).Round(time.Millisecond), mib(int64(medianF(rss))))

	fmt.Fprintf(h.out, "catalog server (registry + executor + HTTP adapter, tools generated in process):\n")
	fmt.Fprintf(h.out, "  %8s  %10s  %9s  %10s  %9s  %9s  %13s  %12s\n", "tools", "ready", "RSS", "call req/s", "call p50", "call p99", "unknown req/s", "GET /tools")
	for _, n := range []int{10, h.o.scaleTools} {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		c, err := h.startChild(ctx, "catalog-"+strconv.Itoa(n), addr, nil, h.self, "catalog", "-addr", addr, "-tools", strconv.Itoa(n))
		if err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
		r, err := rssBytes(c.pid())
		if err != nil {
			c.stop()
			return err
		}
		i := n / 2
		body := fmt.Appendf(nil, `{"toolName":%q,"arguments":{"q%d":"needle","limit":3}}`, genName(i), i)
		if status, reply, err := h.post(addr, body); err != nil || status != http.StatusOK || !json.Valid(reply) {
			c.stop()
			return fmt.Errorf("catalog call: %d %s %v", status, reply, err)
		}
		wr, err := h.wrk(ctx, "http://"+addr+"/calls", body, h.o.concurrency, 5*time.Second)
		if err != nil {
			c.stop()
			return err
		}
		// A misspelt name: refused with the closest names as suggestions.
		unknownBody := []byte(`{"toolName":"gen01__tol00001","arguments":{}}`)
		if status, reply, err := h.post(addr, unknownBody); err != nil || status != http.StatusOK || !bytes.Contains(reply, []byte("E_TOOL_NOT_FOUND")) {
			c.stop()
			return fmt.Errorf("catalog unknown call: %d %s %v", status, reply, err)
		}
		unknown, err := h.wrk(ctx, "http://"+addr+"/calls", unknownBody, h.o.concurrency, 5*time.Second)
		if err != nil {
			c.stop()
			return err
		}
		var list []float64
		for range 5 {
			t := time.Now()
			resp, err := h.client.Get("http://" + addr + "/tools")
			if err != nil {
				c.stop()
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			list = append(list, float64(time.Since(t)))
		}
		slices.Sort(list)
		c.stop()
		fmt.Fprintf(h.out, "  %8d  %10s  %9s  %10.0f  %9s  %9s  %13.0f  %12s\n", n, c.ready.Round(time.Millisecond), mib(r), wr.RPS, ms(wr.P50), ms(wr.P99),
			unknown.RPS, ms(time.Duration(list[len(list)/2])))
		if wr.errors() > 0 {
			fmt.Fprintf(h.out, "  (%d errors in the call run)\n", wr.errors())
		}
	}
	return nil
}
