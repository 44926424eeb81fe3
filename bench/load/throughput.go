package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A load is one kind of call driven at both servers.
type load struct {
	name string
	tool string
	body []byte
}

func (h *harness) loads() []load {
	var out []load
	for _, l := range allLoads() {
		if contains(h.o.loads, l.name) {
			out = append(out, l)
		}
	}
	return out
}

func allLoads() []load {
	return []load{
		// A read-only tool that runs in the service's process: one stat in
		// the workspace, so what is measured is the call path.
		{"read_only", "fs__stat", []byte(`{"toolName":"fs__stat","arguments":{"path":"."}}`)},
		// A read-only tool that runs in a pooled worker process under the
		// memory ceiling (TOOLSVC_TOOL_MEMORY_LIMIT).
		{"worker", "text__transform", []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`)},
		{"side_effecting", "fs__write", []byte(`{"toolName":"fs__write","arguments":{"path":"bench/out.txt","content":"hello"}}`)},
	}
}

// post sends body to addr's /calls and returns the status and reply.
func (h *harness) post(addr string, body []byte) (int, []byte, error) {
	resp, err := h.client.Post("http://"+addr+"/calls", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// throughput measures POST /calls on toolsvc and on the bare chi server,
// interleaved round by round, for each load.
func (h *harness) throughput(ctx context.Context) error {
	fmt.Fprintf(h.out, "\n== throughput: POST /calls, %d connections, %s per measurement, %d rounds\n", h.o.concurrency, h.o.duration, h.o.rounds)
	svc, err := h.startToolsvc(ctx, "toolsvc")
	if err != nil {
		return err
	}
	defer svc.stop()
	// Reply sizes come from toolsvc itself, so the bare server encodes as
	// many bytes.
	var sizes []string
	for _, l := range h.loads() {
		status, reply, err := h.post(svc.addr, l.body)
		if err != nil || status != http.StatusOK || !bytes.Contains(reply, []byte(`"status":"ok"`)) {
			return fmt.Errorf("toolsvc %s: %d %s %v", l.tool, status, reply, err)
		}
		sizes = append(sizes, l.tool+"="+strconv.Itoa(len(reply)))
	}
	bareAddr, err := freeAddr()
	if err != nil {
		return err
	}
	bare, err := h.startChild(ctx, "bare", bareAddr, nil, h.self, "bare", "-addr", bareAddr, "-reply", strings.Join(sizes, ","))
	if err != nil {
		return err
	}
	defer bare.stop()
	for i, l := range h.loads() {
		status, reply, err := h.post(bare.addr, l.body)
		if err != nil || status != http.StatusOK || l.tool+"="+strconv.Itoa(len(reply)) != sizes[i] {
			return fmt.Errorf("bare %s: %d, %d bytes (want %s), %v", l.tool, status, len(reply), sizes[i], err)
		}
	}
	fmt.Fprintf(h.out, "reply sizes (bytes): %s\n", strings.Join(sizes, ", "))
	targets := []*child{bare, svc}
	if h.baseline != "" {
		base, err := h.startToolsvcBinary(ctx, "baseline", h.baseline)
		if err != nil {
			return err
		}
		defer base.stop()
		for _, l := range h.loads() {
			if status, reply, err := h.post(base.addr, l.body); err != nil || status != http.StatusOK {
				return fmt.Errorf("baseline %s: %d %s %v", l.tool, status, reply, err)
			}
		}
		targets = append(targets, base)
	}
	url := func(c *child) string { return "http://" + c.addr + "/calls" }
	for _, l := range h.loads() {
		for _, c := range targets {
			if _, err := h.wrk(ctx, url(c), l.body, h.o.concurrency, h.o.warmup); err != nil {
				return err
			}
		}
	}
	type key struct{ load, target string }
	results := map[key][]wrkResult{}
	ratios := map[string][]float64{} // load, or load/baseline
	const row = "%6s  %-15s %-8s %9s %9s %9s %9s %7s %13s\n"
	fmt.Fprintf(h.out, row, "round", "load", "target", "req/s", "p50", "p99", "p99.9", "errors", "toolsvc/bare")
	for round := 1; round <= h.o.rounds; round++ {
		for _, l := range h.loads() {
			// Rotate which server goes first, so drift favours none.
			order := make([]*child, len(targets))
			for i := range targets {
				order[i] = targets[(i+round-1)%len(targets)]
			}
			rps := map[string]float64{}
			measured := map[string]wrkResult{}
			for _, c := range order {
				r, err := h.wrk(ctx, url(c), l.body, h.o.concurrency, h.o.duration)
				if err != nil {
					return err
				}
				results[key{l.name, c.name}] = append(results[key{l.name, c.name}], r)
				rps[c.name] = r.RPS
				measured[c.name] = r
			}
			for _, c := range order {
				r, ratio := measured[c.name], ""
				if c != bare && rps["bare"] > 0 {
					k := ratioKey(l.name, c.name)
					ratio = fmt.Sprintf("%.2f", rps[c.name]/rps["bare"])
					ratios[k] = append(ratios[k], rps[c.name]/rps["bare"])
				}
				fmt.Fprintf(h.out, row, strconv.Itoa(round), l.name, c.name, fmt.Sprintf("%.0f", r.RPS), ms(r.P50), ms(r.P99), ms(r.P999), strconv.FormatInt(r.errors(), 10), ratio)
			}
		}
	}
	fmt.Fprintln(h.out)
	for _, l := range h.loads() {
		for _, c := range targets {
			rs := results[key{l.name, c.name}]
			var errs int64
			for _, r := range rs {
				errs += r.errors()
			}
			ratio := ""
			if c != bare {
				ratio = fmt.Sprintf("%.2f", medianF(ratios[ratioKey(l.name, c.name)]))
			}
			fmt.Fprintf(h.out, row, "median", l.name, c.name,
				fmt.Sprintf("%.0f", medianF(pick(rs, func(r wrkResult) float64 { return r.RPS }))),
				ms(time.Duration(medianF(pick(rs, func(r wrkResult) float64 { return float64(r.P50) })))),
				ms(time.Duration(medianF(pick(rs, func(r wrkResult) float64 { return float64(r.P99) })))),
				ms(time.Duration(medianF(pick(rs, func(r wrkResult) float64 { return float64(r.P999) })))),
				strconv.FormatInt(errs, 10), ratio)
		}
	}
	if r, ok := ratios["read_only"]; ok {
		verdict := "MET"
		if medianF(r) < 0.6 {
			verdict = "MISSED"
		}
		fmt.Fprintf(h.out, "target: read_only at >= 0.6x the bare ceiling: %s (median ratio %.2f)\n", verdict, medianF(r))
	}
	for _, l := range h.loads() {
		if r, ok := ratios[ratioKey(l.name, "baseline")]; ok {
			fmt.Fprintf(h.out, "%s: toolsvc %.2fx the bare ceiling, the baseline (%s) %.2fx, in the same rounds\n", l.name, medianF(ratios[l.name]), h.o.baseline, medianF(r))
		}
	}
	return nil
}

// ratioKey names the ratios of one toolsvc target under one load: the
// load for the toolsvc under test, load/baseline for the baseline.
func ratioKey(load, target string) string {
	if target == "toolsvc" {
		return load
	}
	return load + "/" + target
}

func pick(rs []wrkResult, f func(wrkResult) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
