package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests that are about the process — that it survives a hostile
// call, how much memory and CPU it holds, what a fault or a kill -9
// leaves behind, how it confines programs — run the real binary through
// this one harness.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// buildBinary builds toolsvc and its sandbox launcher into one directory
// (the service finds the launcher next to itself), once per test run.
func buildBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toolsvc-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "toolsvc")
		for _, b := range [][2]string{{binPath, "."}, {filepath.Join(dir, "toolsvc-sandbox"), "../toolsvc-sandbox"}} {
			if out, err := exec.Command("go", "build", "-o", b[0], b[1]).CombinedOutput(); err != nil {
				binErr = fmt.Errorf("go build %s: %v\n%s", b[1], err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is the binary running.
type proc struct {
	t    *testing.T
	cmd  *exec.Cmd
	base string
	// ws is the workspace it runs with (TOOLSVC_WORKSPACE).
	ws     string
	exited chan struct{}
	mu     sync.Mutex
	logs   strings.Builder
}

var listening = regexp.MustCompile(`"msg":"toolsvc listening".*"addr":"([0-9.:]+)"`)

// startBinary starts the binary on a port the kernel picks, with its
// workspace and data in temporary directories, plus env (whose settings
// win), and returns once it logs that it listens (so not with
// TOOLSVC_LOG_LEVEL above info). It is stopped with SIGINT when the
// test ends (SIGKILL if it has not stopped within 15 s).
func startBinary(t *testing.T, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(buildBinary(t))
	p := &proc{t: t, cmd: cmd, ws: t.TempDir(), exited: make(chan struct{})}
	// Log lines are written at once, not gathered: the tests read the
	// log while the service runs.
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "TOOLSVC_ADDR=127.0.0.1:0", "TOOLSVC_LOG_FLUSH_INTERVAL=0",
		"TOOLSVC_WORKSPACE=" + p.ws, "TOOLSVC_DATA_DIR=" + t.TempDir()}, env...)
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "TOOLSVC_WORKSPACE="); ok {
			p.ws = v
		}
	}
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-p.exited
			}
		}
		w.Close()
	})
	select {
	case a := <-addr:
		p.base = "http://" + a
	case <-p.exited:
		t.Fatalf("the binary exited before it listened (%v):\n%s", cmd.ProcessState, p.log())
	case <-time.After(60 * time.Second):
		t.Fatalf("the binary did not listen within 60s:\n%s", p.log())
	}
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// answer is one HTTP exchange as the tests see it.
type answer struct {
	status  int
	header  http.Header
	body    string
	res     result
	pending bool
	took    time.Duration
}

func (p *proc) send(method, path, body string) answer {
	p.t.Helper()
	return p.sendAs("", method, path, body)
}

// sendAs sends a request with the bearer token ("" for none).
func (p *proc) sendAs(token, method, path, body string) answer {
	p.t.Helper()
	a, err := p.trySendAs(token, method, path, body)
	if err != nil {
		p.t.Fatalf("%s %s: %v (the process: %v)\n%s", method, path, err, p.cmd.ProcessState, p.log())
	}
	return a
}

// trySend is send for exchanges that may fail (the process is being
// killed); it may be called from any goroutine.
func (p *proc) trySend(method, path, body string) (answer, error) {
	return p.trySendAs("", method, path, body)
}

func (p *proc) trySendAs(token, method, path, body string) (answer, error) {
	req, err := http.NewRequest(method, p.base+path, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	start := time.Now()
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, header: resp.Header, body: string(b), took: time.Since(start)}
	_ = json.Unmarshal(b, &a.res)
	var rp struct{ RecordPending bool }
	_ = json.Unmarshal(b, &rp)
	a.pending = rp.RecordPending
	return a, nil
}

// String is how a failing test prints a result.
func (r result) String() string {
	if r.Error != nil {
		return r.Status + " " + r.Error.Code + ": " + r.Error.Message
	}
	return r.Status + " " + string(r.Output)
}

// children lists the pids whose parent is pid (from every thread's
// children list).
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// stat returns the resident memory (bytes) of pid alone and its CPU time
// in clock ticks (100 a second), with that of its reaped children when
// reaped is set (fields 14 to 17 of /proc/<pid>/stat).
func stat(pid int, reaped bool) (rss, ticks int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	times := f[11:13] // utime stime
	if reaped {
		times = f[11:15] // and cutime cstime
	}
	for _, s := range times {
		n, _ := strconv.ParseInt(s, 10, 64)
		ticks += n
	}
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	return pages * int64(os.Getpagesize()), ticks, nil
}

// cpuTicks is the CPU time of pid and its reaped children.
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	_, ticks, err := stat(pid, true)
	if err != nil {
		t.Fatal(err)
	}
	return ticks
}

// treeRSS is the resident memory of pid and all its descendants.
func treeRSS(pid int) int64 {
	total, _, _ := stat(pid, false)
	for _, c := range children(pid) {
		total += treeRSS(c)
	}
	return total
}

// watchStats is what watch saw.
type watchStats struct {
	// peakSelf and peakTree are the highest RSS of the service alone and
	// of the service with its children (workers, sandboxed programs).
	peakSelf, peakTree int64
	// failures are the /healthz polls that did not answer 200.
	failures []string
	// latencies of the /healthz polls that did, sorted.
	latencies []time.Duration
}

// p returns the q-th percentile of the /healthz latencies.
func (s watchStats) p(q int) time.Duration {
	if len(s.latencies) == 0 {
		return 0
	}
	return s.latencies[min(len(s.latencies)-1, len(s.latencies)*q/100)]
}

// watch polls /healthz and samples the RSS of the service and its
// children every interval until stop is called.
func watch(p *proc, every time.Duration) (stop func() watchStats) {
	var s watchStats
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := &http.Client{Timeout: 5 * time.Second}
		for ctx.Err() == nil {
			self, _, _ := stat(p.pid(), false)
			s.peakSelf = max(s.peakSelf, self)
			s.peakTree = max(s.peakTree, treeRSS(p.pid()))
			t0 := time.Now()
			resp, err := c.Get(p.base + "/healthz")
			switch {
			case err != nil:
				s.failures = append(s.failures, err.Error())
			case resp.StatusCode != http.StatusOK:
				resp.Body.Close()
				s.failures = append(s.failures, resp.Status)
			default:
				resp.Body.Close()
				s.latencies = append(s.latencies, time.Since(t0))
			}
			select {
			case <-ctx.Done():
			case <-time.After(every):
			}
		}
	}()
	return func() watchStats {
		cancel()
		<-done
		slices.Sort(s.latencies)
		return s
	}
}
