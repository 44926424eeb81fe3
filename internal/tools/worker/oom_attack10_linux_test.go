package worker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestWorkerIsTheOOMKillersFirstChoice: in a container whose memory runs
// out (1 GiB, four workers of 512 MiB, the shell's programs), the kernel
// OOM-killed workers, but nothing stopped it from killing toolsvc itself
// when its heap was the largest. A worker has oom_score_adj 1000 now, so
// it goes first; the service keeps its own.
func TestWorkerIsTheOOMKillersFirstChoice(t *testing.T) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Skipf("no /proc/self/oom_score_adj: %v", err)
	}
	own := strings.TrimSpace(string(b))
	if own == "1000" {
		t.Skip("this process's oom_score_adj is 1000 already")
	}
	p := newPool(t, DefaultMemoryLimit)
	if _, err := call(t, p, context.Background(), "json__query", jq(".", `1`)); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	if len(p.idle) != 1 {
		p.mu.Unlock()
		t.Fatalf("%d idle workers after one call, want 1", len(p.idle))
	}
	pid := p.idle[0].cmd.Process.Pid
	p.mu.Unlock()
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid))
	if err != nil || strings.TrimSpace(string(b)) != "1000" {
		t.Errorf("the worker's oom_score_adj: %q %v, want 1000", b, err)
	}
	if b, _ := os.ReadFile("/proc/self/oom_score_adj"); strings.TrimSpace(string(b)) != own {
		t.Errorf("the service's own oom_score_adj changed from %s to %s", own, b)
	}
}
