package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
)

// bareCall is the part of a call the bare server decodes: the same body
// toolsvc decodes, with no pipeline behind it.
type bareCall struct {
	ToolCallID string          `json:"toolCallId"`
	ToolName   string          `json:"toolName"`
	Arguments  json.RawMessage `json:"arguments"`
	TimeoutMs  int64           `json:"timeoutMs"`
	Context    struct {
		InstanceKey string `json:"instanceKey"`
	} `json:"context"`
}

type bareReply struct {
	ToolCallID string `json:"toolCallId"`
	ToolName   string `json:"toolName"`
	Status     string `json:"status"`
	Output     string `json:"output"`
	Truncated  bool   `json:"truncated"`
	DurationMs int64  `json:"durationMs"`
}

// serveBare is the ceiling of this stack: a chi server that reads and
// decodes a call and encodes a reply of the size toolsvc's reply to the
// same call has (-reply toolName=bytes), and nothing else.
func serveBare(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bare", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	replies := fs.String("reply", "", "comma-separated toolName=bytes: the size of the reply to each tool's calls")
	work := fs.Duration("work", 0, "CPU each call spends in a busy loop before its reply (the floor scenario: what a handler that costs this much more can reach)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	size := map[string]int{}
	for _, kv := range strings.Split(*replies, ",") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("-reply %q: %w", kv, err)
		}
		size[k] = n
	}
	// The padding is worked out once, so that a request costs only the
	// decoding and encoding.
	pads := map[string]string{}
	for name, n := range size {
		pads[name] = padding(bareReply{ToolCallID: bareCallID, ToolName: name, Status: "ok"}, n)
	}
	spins := calibrate(*work)
	var sink atomic.Uint64
	r := chi.NewRouter()
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	r.Post("/calls", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var c bareCall
		if err := json.Unmarshal(body, &c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		spin(spins, &sink)
		reply := bareReply{ToolCallID: bareCallID, ToolName: c.ToolName, Status: "ok", Output: pads[c.ToolName]}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(reply); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(buf.Bytes())
	})
	return serveUntil(ctx, *addr, r)
}

// bareCallID has the length of the ids toolsvc makes.
const bareCallID = "call_00000000000000000000000000000000"

// padding returns the output string that makes reply encode to size bytes
// (with the encoder's newline).
func padding(reply bareReply, size int) string {
	b, _ := json.Marshal(reply)
	return strings.Repeat("x", max(0, size-len(b)-1))
}

// spin runs n rounds of an xorshift generator: CPU work with no memory
// traffic and no system calls. Its result goes to sink, so that the loop
// is not optimised away.
func spin(n int, sink *atomic.Uint64) {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	sink.Add(x)
}

// calibrate returns the rounds of spin that take d on this CPU: the
// fastest of several timed runs, so a run that was preempted does not
// count.
func calibrate(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	const n = 1 << 20
	var sink atomic.Uint64
	best := time.Duration(1<<63 - 1)
	for range 20 {
		start := time.Now()
		spin(n, &sink)
		best = min(best, time.Since(start))
	}
	return int(float64(n) * float64(d) / float64(best))
}
