package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCallsWhoseClientLeftCanBeRetried: clients give up on side-effecting
// calls after 0–3 ms, some while the call's running record is being
// committed (the service then cannot know whether it was, and answers, to
// nobody, that the store is unavailable: the call does not run). No such
// record is left behind: every call, retried with its toolCallId, is
// answered at once with a final result, never E_INTERRUPTED or "running",
// and no call runs twice. A record left behind would hold its retries
// until its lease lapsed (30 s) and then read E_INTERRUPTED, though the
// call never ran.
func TestCallsWhoseClientLeftCanBeRetried(t *testing.T) {
	t.Run("SQLite", func(t *testing.T) { checkCallsWhoseClientLeft(t, "TOOLSVC_DATA_DIR="+t.TempDir()) })
	t.Run("PostgreSQL", func(t *testing.T) {
		checkCallsWhoseClientLeft(t, postgresEnv(t, "left_", "the PostgreSQL check")...)
	})
}

func checkCallsWhoseClientLeft(t *testing.T, env ...string) {
	ws := t.TempDir()
	p := startBinary(t, append(env, "TOOLSVC_WORKSPACE="+ws, "TOOLSVC_STORE_WAIT_TIMEOUT=10s")...)
	const workers, unknown = 32, "outcome of the write unknown"
	var ids []string
	for round := 0; round < 40 && strings.Count(p.log(), unknown) < 3; round++ {
		var wg sync.WaitGroup
		for w := range workers {
			id := fmt.Sprintf("left-%d-%d", round, w)
			ids = append(ids, id)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(mrand.IntN(3000))*time.Microsecond)
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/calls", strings.NewReader(durableCall(w, id)))
				if err != nil {
					t.Error(err)
					return
				}
				req.Header.Set("Content-Type", "application/json")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
	}
	if n := strings.Count(p.log(), unknown); n == 0 {
		t.Fatalf("in 40 bursts no client left while its call's record was being committed (no %q in the log): the case this test checks never happened", unknown)
	}

	// Each call retried at once, sixteen at a time (within the service's
	// concurrency limit): a record left running would answer 202
	// "running" after the 10 s wait.
	client := &http.Client{Timeout: 20 * time.Second}
	statuses := make([]string, len(ids))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for i, id := range ids {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			var w int
			if _, err := fmt.Sscanf(id[strings.LastIndexByte(id, '-')+1:], "%d", &w); err != nil {
				t.Error(err)
				return
			}
			began := time.Now()
			resp, err := client.Post(p.base+"/calls", "application/json", strings.NewReader(durableCall(w, id)))
			if err != nil {
				t.Errorf("retry of %s: %v", id, err)
				return
			}
			defer resp.Body.Close()
			var res struct {
				Status string `json:"status"`
				Error  *struct {
					Code string `json:"code"`
				} `json:"error"`
			}
			body, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(body, &res); err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("retry of %s (%v): %d %s; want 200 with a final result; its log:\n%s", id, time.Since(began), resp.StatusCode, body, linesWith(p.log(), `"`+id+`"`))
				return
			}
			statuses[i] = res.Status
			if res.Error != nil {
				statuses[i] += " " + res.Error.Code
			}
			if res.Status == "running" || res.Error != nil && res.Error.Code == "E_INTERRUPTED" {
				t.Errorf("retry of %s (%v): %s; want the call run, or its recorded result; its log:\n%s", id, time.Since(began), body, linesWith(p.log(), `"`+id+`"`))
			}
		})
	}
	wg.Wait()

	// No call ran twice; one answered ok ran once.
	lines := map[string]int{}
	for w := range workers {
		for l, n := range countLines(t, filepath.Join(ws, "callers/anonymous/default", fmt.Sprintf("dur-%d.txt", w))) {
			lines[l] += n
		}
	}
	for i, id := range ids {
		if lines[id] > 1 || statuses[i] == "ok" && lines[id] != 1 {
			t.Errorf("%s: answered %q, its line written %d times", id, statuses[i], lines[id])
		}
	}
}

// linesWith returns the lines of log that contain s.
func linesWith(log, s string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
