package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// floor measures what the throughput ratio asks of a handler: the bare
// server, and the same server spending a fixed amount of CPU more on each
// call, driven with the read-only call in the same rounds, beside toolsvc.
// For each it prints requests/s, the ratio to the bare server and the
// server's CPU per call (user and system time from /proc over the
// requests wrk completed), so a ratio can be read as the CPU per call it
// allows.
func (h *harness) floor(ctx context.Context) error {
	l := allLoads()[0]
	fmt.Fprintf(h.out, "\n== floor: %s against bare servers that spend more CPU per call, %d connections, %s per measurement, %d rounds\n", l.name, h.o.concurrency, h.o.duration, h.o.rounds)
	svc, err := h.startToolsvc(ctx, "toolsvc")
	if err != nil {
		return err
	}
	defer svc.stop()
	status, reply, err := h.post(svc.addr, l.body)
	if err != nil || status != http.StatusOK {
		return fmt.Errorf("toolsvc %s: %d %s %v", l.tool, status, reply, err)
	}
	size := l.tool + "=" + strconv.Itoa(len(reply))
	// The CPU each bare server adds to a call, on top of reading,
	// decoding and answering it.
	work := []time.Duration{0, 5 * time.Microsecond, 10 * time.Microsecond, 20 * time.Microsecond, 40 * time.Microsecond}
	targets := []*child{}
	for _, w := range work {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		name := "bare+" + w.String()
		if w == 0 {
			name = "bare"
		}
		c, err := h.startChild(ctx, name, addr, nil, h.self, "bare", "-addr", addr, "-reply", size, "-work", w.String())
		if err != nil {
			return err
		}
		defer c.stop()
		targets = append(targets, c)
	}
	targets = append(targets, svc)
	url := func(c *child) string { return "http://" + c.addr + "/calls" }
	for _, c := range targets {
		if _, err := h.wrk(ctx, url(c), l.body, h.o.concurrency, h.o.warmup); err != nil {
			return err
		}
	}
	rps := map[string][]float64{}
	cpu := map[string][]float64{}
	ratios := map[string][]float64{}
	const row = "%6s  %-12s %9s %13s %10s\n"
	fmt.Fprintf(h.out, row, "round", "target", "req/s", "CPU/call", "of bare")
	for round := 1; round <= h.o.rounds; round++ {
		order := make([]*child, len(targets))
		for i := range targets {
			order[i] = targets[(i+round-1)%len(targets)]
		}
		got := map[string]float64{}
		for _, c := range order {
			before, err := cpuTime(c.pid())
			if err != nil {
				return err
			}
			r, err := h.wrk(ctx, url(c), l.body, h.o.concurrency, h.o.duration)
			if err != nil {
				return err
			}
			after, err := cpuTime(c.pid())
			if err != nil {
				return err
			}
			if r.errors() > 0 || r.Requests == 0 {
				return fmt.Errorf("%s: %d requests, %d errors", c.name, r.Requests, r.errors())
			}
			perCall := float64(after-before) / float64(time.Microsecond) / float64(r.Requests)
			got[c.name] = r.RPS
			rps[c.name] = append(rps[c.name], r.RPS)
			cpu[c.name] = append(cpu[c.name], perCall)
		}
		for _, c := range targets {
			ratio := got[c.name] / got["bare"]
			ratios[c.name] = append(ratios[c.name], ratio)
			fmt.Fprintf(h.out, row, strconv.Itoa(round), c.name, fmt.Sprintf("%.0f", got[c.name]),
				fmt.Sprintf("%.1fµs", cpu[c.name][len(cpu[c.name])-1]), fmt.Sprintf("%.2f", ratio))
		}
	}
	fmt.Fprintln(h.out)
	for _, c := range targets {
		fmt.Fprintf(h.out, row, "median", c.name, fmt.Sprintf("%.0f", medianF(rps[c.name])),
			fmt.Sprintf("%.1fµs", medianF(cpu[c.name])), fmt.Sprintf("%.2f", medianF(ratios[c.name])))
	}
	return nil
}

// cpuTime is the user and system time process pid has used, from
// /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: the fields
	// counted from its end are utime (14) and stime (15).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	// Linux reports these in USER_HZ, 100 a second on every architecture
	// Go runs on.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
