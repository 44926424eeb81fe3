package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// soakClass is one kind of call the soak sends.
type soakClass struct {
	name   string
	weight int
	body   []byte
	// cancelAfter > 0: the client cancels the request this long after
	// sending it.
	cancelAfter time.Duration
	// expect is the response class the call should get.
	expect string
}

func soakClasses() []soakClass {
	large := strings.Repeat("a large output line of text, upper-cased and then cut to maxOutputBytes\n", 256<<10/72)
	largeBody, _ := json.Marshal(map[string]any{"toolName": "text__transform", "arguments": map[string]any{"operation": "upper", "text": large}})
	const forever = `last(range(1e12))`
	return []soakClass{
		{"ok", 40, []byte(`{"toolName":"text__transform","arguments":{"operation":"upper","text":"hello"}}`), 0, "200 ok"},
		{"validation error", 15, []byte(`{"toolName":"text__transform","arguments":{"operation":"hash","text":5,"bogus":1}}`), 0, "200 error E_INVALID_ARGUMENTS"},
		{"unknown tool", 10, []byte(`{"toolName":"text__transfrom","arguments":{}}`), 0, "200 error E_TOOL_NOT_FOUND"},
		{"timeout", 10, []byte(`{"toolName":"json__query","timeoutMs":100,"arguments":{"program":"` + forever + `"}}`), 0, "200 error E_TIMEOUT"},
		{"large output", 10, largeBody, 0, "200 ok truncated"},
		{"client cancel", 10, []byte(`{"toolName":"json__query","timeoutMs":20000,"arguments":{"program":"` + forever + `"}}`), 50 * time.Millisecond, "canceled by the client"},
		{"side effect", 5, []byte(`{"toolName":"fs__write","arguments":{"path":"soak/out.txt","content":"hello"}}`), 0, "200 ok"},
	}
}

// soakSample is the server's state at one moment.
type soakSample struct {
	goroutines float64
	rss        int64
}

func (h *harness) sample(c *child) (soakSample, error) {
	g, err := h.metric(c.addr, "go_goroutines")
	if err != nil {
		return soakSample{}, err
	}
	rss, err := rssBytes(c.pid())
	return soakSample{g, rss}, err
}

// soakTest runs the clients against a fresh toolsvc for the soak time and
// reports every response class, 5xx, lost responses, goroutines and RSS.
func (h *harness) soakTest(ctx context.Context) error {
	fmt.Fprintf(h.out, "\n== soak: %d clients for %s, mixed calls\n", h.o.soakClients, h.o.soak)
	svc, err := h.startToolsvc(ctx, "toolsvc-soak")
	if err != nil {
		return err
	}
	defer svc.stop()
	classes := soakClasses()
	transport := &http.Transport{MaxIdleConnsPerHost: h.o.soakClients}
	client := &http.Client{Transport: transport}
	// One call of each class first, so that what is made once (pools,
	// compiled programs, the store's connections) is in the baseline.
	for _, c := range classes {
		if got := soakCall(ctx, client, svc.addr, c); got != c.expect {
			return fmt.Errorf("warm-up %s: got %q, want %q", c.name, got, c.expect)
		}
	}
	transport.CloseIdleConnections()
	time.Sleep(2 * time.Second)
	start, err := h.sample(svc)
	if err != nil {
		return err
	}
	peak := start
	var total, fiveXX, lost atomic.Int64
	counts := make([]map[string]int64, h.o.soakClients)
	var wg sync.WaitGroup
	soakCtx, cancel := context.WithTimeout(ctx, h.o.soak)
	defer cancel()
	for i := range h.o.soakClients {
		counts[i] = map[string]int64{}
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(i), 42))
			sum := 0
			for _, c := range classes {
				sum += c.weight
			}
			for soakCtx.Err() == nil {
				n := rnd.IntN(sum)
				c := classes[0]
				for _, k := range classes {
					if n < k.weight {
						c = k
						break
					}
					n -= k.weight
				}
				got := soakCall(soakCtx, client, svc.addr, c)
				if soakCtx.Err() != nil && strings.HasPrefix(got, "transport error") {
					break // cut by the end of the soak, not lost
				}
				total.Add(1)
				key := c.name + " → " + got
				switch {
				case got == c.expect:
				case got == shedClass:
					// Admission refusing a call over the in-flight limit,
					// with Retry-After: load shed as documented.
					key += " (shed)"
				default:
					key += " (UNEXPECTED)"
				}
				counts[i][key]++
				if strings.HasPrefix(got, "5") {
					fiveXX.Add(1)
				}
				if strings.HasPrefix(got, "transport error") {
					lost.Add(1)
				}
			}
		})
	}
	ticker := time.NewTicker(time.Second)
	began := time.Now()
	lastReport := began
sampling:
	for {
		select {
		case <-soakCtx.Done():
			break sampling
		case <-ticker.C:
			s, err := h.sample(svc)
			if err != nil {
				fmt.Fprintf(h.out, "sample: %v\n", err)
				continue
			}
			peak.goroutines = max(peak.goroutines, s.goroutines)
			peak.rss = max(peak.rss, s.rss)
			if time.Since(lastReport) >= 10*time.Second {
				lastReport = time.Now()
				fmt.Fprintf(h.out, "  %3.0fs: %d calls, %.0f goroutines, RSS %s\n", time.Since(began).Seconds(), total.Load(), s.goroutines, mib(s.rss))
			}
		}
	}
	ticker.Stop()
	wg.Wait()
	elapsed := time.Since(began)
	transport.CloseIdleConnections()
	// Goroutines of calls and connections end shortly after; wait for
	// them, up to 30 s.
	end, err := h.sample(svc)
	for deadline := time.Now().Add(30 * time.Second); err == nil && end.goroutines > start.goroutines && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		end, err = h.sample(svc)
	}
	if err != nil {
		return err
	}
	merged := map[string]int64{}
	for _, m := range counts {
		for k, v := range m {
			merged[k] += v
		}
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	fmt.Fprintf(h.out, "calls: %d in %s (%.0f/s)\n", total.Load(), elapsed.Round(time.Second), float64(total.Load())/elapsed.Seconds())
	for _, k := range keys {
		fmt.Fprintf(h.out, "  %-70s %8d\n", k, merged[k])
	}
	server, err := h.scrape(svc.addr)
	if err != nil {
		return err
	}
	fmt.Fprintln(h.out, "server's toolsvc_tool_calls_total (status, code), including the warm-up calls:")
	var skeys []string
	for k := range server {
		if strings.HasPrefix(k, "toolsvc_tool_calls_total{") {
			skeys = append(skeys, k)
		}
	}
	slices.Sort(skeys)
	for _, k := range skeys {
		fmt.Fprintf(h.out, "  %-70s %8.0f\n", strings.TrimPrefix(k, "toolsvc_tool_calls_total"), server[k])
	}
	var unexpected int64
	for k, v := range merged {
		if strings.HasSuffix(k, "(UNEXPECTED)") {
			unexpected += v
		}
	}
	fmt.Fprintf(h.out, "5xx: %d   lost responses: %d   unexpected classes: %d\n", fiveXX.Load(), lost.Load(), unexpected)
	fmt.Fprintf(h.out, "goroutines: start %.0f, peak %.0f, end %.0f\n", start.goroutines, peak.goroutines, end.goroutines)
	fmt.Fprintf(h.out, "RSS:        start %s, peak %s, end %s (growth: %s at peak, %s at end)\n",
		mib(start.rss), mib(peak.rss), mib(end.rss), mib(peak.rss-start.rss), mib(end.rss-start.rss))
	verdict := func(ok bool) string {
		if ok {
			return "MET"
		}
		return "MISSED"
	}
	fmt.Fprintf(h.out, "target: zero 5xx %s, zero lost %s, goroutines back to start %s, RSS growth under 50 MiB %s\n",
		verdict(fiveXX.Load() == 0), verdict(lost.Load() == 0), verdict(end.goroutines <= start.goroutines), verdict(peak.rss-start.rss < 50<<20))
	return nil
}

// soakCall sends one call of class c and names the response class:
// "<HTTP status> <result status> [<error code>] [truncated]", "canceled
// by the client", or "transport error: …".
func soakCall(ctx context.Context, client *http.Client, addr string, c soakClass) string {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if c.cancelAfter > 0 {
		t := time.AfterFunc(c.cancelAfter, cancel)
		defer t.Stop()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/calls", bytes.NewReader(c.body))
	if err != nil {
		return "request error: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err == nil {
		defer resp.Body.Close()
		var body []byte
		if body, err = io.ReadAll(resp.Body); err == nil {
			return classify(resp.StatusCode, body)
		}
	}
	if c.cancelAfter > 0 && errors.Is(err, context.Canceled) {
		return "canceled by the client"
	}
	return "transport error: " + err.Error()
}

// shedClass is the class of a call refused because too many are in
// flight (429 overloaded).
const shedClass = "429 problem overloaded"

func classify(status int, body []byte) string {
	var r struct {
		// A ToolCallResult's status is a string, a problem's the HTTP
		// status again, a number.
		Status    any  `json:"status"`
		Truncated bool `json:"truncated"`
		Error     *struct {
			Code string `json:"code"`
		} `json:"error"`
		// problem+json
		ProblemCode string `json:"code"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Sprintf("%d unreadable body", status)
	}
	callStatus, _ := r.Status.(string)
	out := fmt.Sprintf("%d %s", status, callStatus)
	if callStatus == "" {
		out = fmt.Sprintf("%d problem %s", status, r.ProblemCode)
	}
	if r.Error != nil {
		out += " " + r.Error.Code
	}
	if r.Truncated {
		out += " truncated"
	}
	return out
}
