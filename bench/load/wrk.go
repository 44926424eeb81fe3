package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkResult is one wrk run: throughput, latency percentiles and errors.
type wrkResult struct {
	Requests       int64
	Duration       time.Duration
	P50, P99, P999 time.Duration
	Connect, Read  int64
	Write, Status  int64
	Timeout        int64
	RPS            float64
}

func (r wrkResult) errors() int64 { return r.Connect + r.Read + r.Write + r.Status + r.Timeout }

// wrkScript posts the body in bodyFile and prints, when done, one line
// the harness parses: requests, duration (µs), p50, p99, p99.9 (µs) and
// the error counts.
const wrkScript = `
local f = assert(io.open(%q, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  io.write(string.format("RESULT %%d %%d %%d %%d %%d %%d %%d %%d %%d %%d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.status, summary.errors.timeout))
end
`

// wrk posts body to url from conns connections (one wrk thread, on the
// load CPU) for d.
func (h *harness) wrk(ctx context.Context, url string, body []byte, conns int, d time.Duration) (wrkResult, error) {
	dir, err := os.MkdirTemp(h.dir, "wrk-")
	if err != nil {
		return wrkResult{}, err
	}
	defer os.RemoveAll(dir)
	bodyFile, script := filepath.Join(dir, "body.json"), filepath.Join(dir, "post.lua")
	if err := os.WriteFile(bodyFile, body, 0o600); err != nil {
		return wrkResult{}, err
	}
	if err := os.WriteFile(script, fmt.Appendf(nil, wrkScript, bodyFile), 0o600); err != nil {
		return wrkResult{}, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	argv := h.onCPU(h.o.loadCPU, "wrk", "-t1", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(secs)+"s", "--timeout", "10s", "-s", script, url)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return wrkResult{}, fmt.Errorf("wrk: %v: %s", err, out.String())
	}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) != 11 || f[0] != "RESULT" {
			continue
		}
		var n [10]int64
		for i := range n {
			if n[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				return wrkResult{}, fmt.Errorf("wrk: bad result line %q", l)
			}
		}
		us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
		r := wrkResult{Requests: n[0], Duration: us(n[1]), P50: us(n[2]), P99: us(n[3]), P999: us(n[4]),
			Connect: n[5], Read: n[6], Write: n[7], Status: n[8], Timeout: n[9]}
		if r.Duration > 0 {
			r.RPS = float64(r.Requests) / r.Duration.Seconds()
		}
		return r, nil
	}
	return wrkResult{}, fmt.Errorf("wrk printed no result: %s", out.String())
}
