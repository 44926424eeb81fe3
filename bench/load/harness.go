package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// harness holds what every scenario shares: the built binaries, the
// temporary directory, the CPU pinning and the output.
type harness struct {
	o   options
	out io.Writer
	dir string
	bin string // toolsvc
	// baseline is toolsvc built from -baseline, measured in the same
	// rounds; "" without one.
	baseline string
	self     string // this program, for its server subcommands
	pinned   bool
	client   *http.Client
}

func newHarness(ctx context.Context, o options, out io.Writer) (*harness, error) {
	if _, err := exec.LookPath("wrk"); err != nil && contains(o.scenarios, "throughput", "scale", "floor") {
		return nil, errors.New("wrk is not installed; install it with: apt-get install wrk")
	}
	dir, err := os.MkdirTemp("", "toolsvc-load-")
	if err != nil {
		return nil, err
	}
	h := &harness{o: o, out: out, dir: dir, bin: filepath.Join(dir, "bin", "toolsvc"),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	if h.self, err = os.Executable(); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "building toolsvc in %s\n", dir)
	build := exec.CommandContext(ctx, "go", "build", "-o", h.bin, "./cmd/toolsvc")
	build.Dir, build.Stdout, build.Stderr = o.repo, out, out
	if err := build.Run(); err != nil {
		h.close()
		return nil, fmt.Errorf("go build ./cmd/toolsvc: %w", err)
	}
	if o.baseline != "" {
		h.baseline = filepath.Join(dir, "bin", "toolsvc-baseline")
		fmt.Fprintf(out, "building the baseline toolsvc from %s\n", o.baseline)
		build := exec.CommandContext(ctx, "go", "build", "-o", h.baseline, "./cmd/toolsvc")
		build.Dir, build.Stdout, build.Stderr = o.baseline, out, out
		if err := build.Run(); err != nil {
			h.close()
			return nil, fmt.Errorf("go build ./cmd/toolsvc in %s: %w", o.baseline, err)
		}
	}
	if o.pin {
		h.pinned = h.pinSelf()
	}
	return h, nil
}

func contains(list []string, any ...string) bool {
	for _, s := range list {
		for _, a := range any {
			if s == a {
				return true
			}
		}
	}
	return false
}

// pinSelf moves every thread of this process to the load CPUs, so that
// the Go clients of the soak do not compete with the server.
func (h *harness) pinSelf() bool {
	if _, err := exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		fmt.Fprintln(h.out, "not pinning: taskset or a second CPU is missing; servers and load share the CPUs")
		return false
	}
	cmd := exec.Command("taskset", "-a", "-p", "-c", h.o.loadCPU, strconv.Itoa(os.Getpid()))
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(h.out, "not pinning: taskset: %v: %s\n", err, out)
		return false
	}
	runtime.GOMAXPROCS(strings.Count(h.o.loadCPU, ",") + 1)
	return true
}

func (h *harness) close() {
	if h.o.keep {
		fmt.Fprintf(h.out, "kept %s\n", h.dir)
		return
	}
	os.RemoveAll(h.dir)
}

// pinned prefixes argv with taskset for cpus when pinning is on.
func (h *harness) onCPU(cpus string, argv ...string) []string {
	if !h.pinned {
		return argv
	}
	return append([]string{"taskset", "-c", cpus}, argv...)
}

func (h *harness) printMachine() {
	fmt.Fprintf(h.out, "date:     %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(h.out, "machine:  %d CPUs (%s), %s\n", runtime.NumCPU(), cpuModel(), memTotal())
	fmt.Fprintf(h.out, "load:     %s (from /proc/loadavg: 1, 5, 15 min)\n", loadAvg())
	fmt.Fprintf(h.out, "go:       %s\n", goVersion(h.o.repo))
	fmt.Fprintf(h.out, "commit:   %s\n", commit(h.o.repo))
	if len(h.o.toolsvcEnv) > 0 {
		fmt.Fprintf(h.out, "toolsvc:  default configuration plus %s\n", strings.Join(h.o.toolsvcEnv, " "))
	} else {
		fmt.Fprintln(h.out, "toolsvc:  default configuration")
	}
	if h.pinned {
		fmt.Fprintf(h.out, "pinning:  servers on CPU %s, load generators on CPU %s (taskset)\n", h.o.serverCPU, h.o.loadCPU)
	} else {
		fmt.Fprintln(h.out, "pinning:  none")
	}
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "MemTotal:") {
			f := strings.Fields(l)
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				return fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
			}
		}
	}
	return "unknown memory"
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func goVersion(repo string) string {
	cmd := exec.Command("go", "version")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return runtime.Version()
	}
	return strings.TrimPrefix(strings.TrimSpace(string(out)), "go version ")
}

func commit(repo string) string {
	cmd := exec.Command("git", "rev-parse", "--short", "HEAD")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	st := exec.Command("git", "status", "--porcelain", "--untracked-files=no")
	st.Dir = repo
	if dirty, err := st.Output(); err == nil && len(bytes.TrimSpace(dirty)) > 0 {
		c += " (with uncommitted changes)"
	}
	return c
}

// child is a server process started by the harness.
type child struct {
	name  string
	cmd   *exec.Cmd
	addr  string
	log   *os.File
	start time.Time
	// ready is how long the process took from exec to a 200 from /healthz.
	ready time.Duration
	done  chan error
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startChild runs argv on the server CPUs with env, its output in a log
// file, and waits until http://addr/healthz answers 200.
func (h *harness) startChild(ctx context.Context, name, addr string, env []string, argv ...string) (*child, error) {
	argv = h.onCPU(h.o.serverCPU, argv...)
	log, err := os.Create(filepath.Join(h.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, log, log
	c := &child{name: name, cmd: cmd, addr: addr, log: log, start: time.Now(), done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { c.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := h.client.Get("http://" + addr + "/healthz"); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.ready = time.Since(c.start)
				return c, nil
			}
		}
		select {
		case err := <-c.done:
			c.done <- err
			return nil, fmt.Errorf("%s exited before it was ready: %v (log: %s)", name, err, tail(log.Name()))
		case <-ctx.Done():
			c.stop()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("%s not ready after 60s (log: %s)", name, tail(log.Name()))
		}
	}
}

// stop sends SIGTERM and waits; SIGKILL after 30 s.
func (c *child) stop() error {
	defer c.log.Close()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil // already gone
	}
	select {
	case err := <-c.done:
		return err
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		return fmt.Errorf("%s ignored SIGTERM for 30s; killed", c.name)
	}
}

// pid is the server's own process id: with taskset it is the same process,
// as taskset execs the program.
func (c *child) pid() int { return c.cmd.Process.Pid }

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// rssBytes reads VmRSS of pid.
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if l := s.Text(); strings.HasPrefix(l, "VmRSS:") {
			fields := strings.Fields(l)
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/<pid>/status")
}

// metric scrapes one unlabelled sample (e.g. go_goroutines) from a
// server's /metrics.
func (h *harness) metric(addr, name string) (float64, error) {
	samples, err := h.scrape(addr)
	if err != nil {
		return 0, err
	}
	v, ok := samples[name]
	if !ok {
		return 0, fmt.Errorf("no %s in /metrics", name)
	}
	return v, nil
}

// scrape returns every sample of a server's /metrics by its full name
// with labels, as written.
func (h *harness) scrape(addr string) (map[string]float64, error) {
	resp, err := h.client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<16), 1<<20)
	for s.Scan() {
		l := s.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			out[l[:i]] = v
		}
	}
	return out, s.Err()
}

// startToolsvc runs toolsvc on its default configuration, with a fresh
// workspace and data directory, on a loopback port.
func (h *harness) startToolsvc(ctx context.Context, name string) (*child, error) {
	return h.startToolsvcBinary(ctx, name, h.bin)
}

// startToolsvcBinary is startToolsvc for the binary bin.
func (h *harness) startToolsvcBinary(ctx context.Context, name, bin string) (*child, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	ws, data := filepath.Join(h.dir, name, "workspace"), filepath.Join(h.dir, name, "data")
	for _, d := range []string{ws, data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	env := append([]string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_WORKSPACE=" + ws, "TOOLSVC_DATA_DIR=" + data}, h.o.toolsvcEnv...)
	return h.startChild(ctx, name, addr, env, bin)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// serveUntil serves h on addr until ctx ends (the child servers the
// harness starts: the bare server and the catalog server).
func serveUntil(ctx context.Context, addr string, h http.Handler) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
