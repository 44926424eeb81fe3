package main

import (
	"context"
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
	type call struct {
		id     string
		worker int
	}
	var calls []call
	// Clients give up within spread; a busy machine (CI runs packages side
	// by side) takes longer to reach the commit, so while no client has
	// left during one, spread doubles every ten bursts.
	spread := 3000
	for round := 0; round < 40 && strings.Count(p.log(), unknown) < 3; round++ {
		if round > 0 && round%10 == 0 && !strings.Contains(p.log(), unknown) {
			spread *= 2
		}
		var wg sync.WaitGroup
		for w := range workers {
			id := fmt.Sprintf("left-%d-%d", round, w)
			calls = append(calls, call{id, w})
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), time.Duration(mrand.IntN(spread))*time.Microsecond)
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
	// The service logs those as the client's doing, not as its failures.
	for _, l := range strings.Split(linesWith(p.log(), unknown), "\n") {
		if !strings.Contains(l, `"level":"INFO","msg":"client left before the answer"`) {
			t.Errorf("a call whose client left is logged as\n%s\nwant an info line \"client left before the answer\"", l)
		}
	}

	// Each call retried at once, sixteen at a time (within the service's
	// concurrency limit): a record left running would answer 202
	// "running" after the 10 s wait.
	statuses := make([]string, len(calls))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for i, c := range calls {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			a, err := p.trySend(http.MethodPost, "/calls", durableCall(c.worker, c.id))
			switch {
			case err != nil:
				t.Errorf("retry of %s: %v", c.id, err)
			case a.status != http.StatusOK:
				t.Errorf("retry of %s (%v): %d %s; want 200 with a final result; its log:\n%s", c.id, a.took, a.status, a.body, linesWith(p.log(), `"`+c.id+`"`))
			case a.res.Status == "running" || a.res.code() == "E_INTERRUPTED":
				t.Errorf("retry of %s (%v): %s; want the call run, or its recorded result; its log:\n%s", c.id, a.took, a.body, linesWith(p.log(), `"`+c.id+`"`))
			default:
				statuses[i] = strings.TrimSpace(a.res.Status + " " + a.res.code())
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
	for i, c := range calls {
		if lines[c.id] > 1 || statuses[i] == "ok" && lines[c.id] != 1 {
			t.Errorf("%s: answered %q, its line written %d times", c.id, statuses[i], lines[c.id])
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
