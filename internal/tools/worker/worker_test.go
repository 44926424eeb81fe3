package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/data"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	"github.com/toolsvc/toolsvc/internal/tools/text"
)

func confined() []*registry.Tool {
	tools := append(jsonq.Tools(), text.Tools()...)
	return append(tools, data.Tools(data.Options{})...)
}

// TestMain lets the test binary be the worker, as toolsvc is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ceilingProbe {
		probeCeiling()
	}
	if len(os.Args) > 1 && os.Args[1] == poolParentCommand {
		poolParent()
	}
	if len(os.Args) > 1 && os.Args[1] == Command {
		if err := Serve(os.Args[2:], confined(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func newPool(t testing.TB, limit int64) *Pool {
	t.Helper()
	return newPoolWith(t, Options{MemoryLimit: limit})
}

func newPoolWith(t testing.TB, o Options) *Pool {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	o.Exe = exe
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func call(t testing.TB, p *Pool, ctx context.Context, tool, args string) (any, error) {
	t.Helper()
	return p.Call(ctx, tool, &registry.Request{Name: tool, Arguments: json.RawMessage(args), MaxOutputBytes: 16384})
}

func jq(program, input string) string {
	b, _ := json.Marshal(map[string]any{"program": program, "input": json.RawMessage(input)})
	return string(b)
}

func TestSameOutputAsInProcess(t *testing.T) {
	p := newPool(t, DefaultMemoryLimit)
	cases := []struct{ tool, args string }{
		{"json__query", jq(`.a | map(. * 2)`, `{"a":[1,2,3]}`)},
		{"json__query", jq(`"<&>"`, `null`)},
		{"text__transform", `{"operation":"upper","text":"hé"}`},
		{"data__parse", `{"format":"csv","text":"a,b\n1,2\n"}`},
	}
	tools := map[string]registry.Handler{}
	for _, tl := range confined() {
		tools[tl.Name] = tl.Handler
	}
	for _, c := range cases {
		got, err := call(t, p, context.Background(), c.tool, c.args)
		if err != nil {
			t.Fatalf("%s %s: %v", c.tool, c.args, err)
		}
		want, err := tools[c.tool].Run(context.Background(), &registry.Request{Name: c.tool, Arguments: json.RawMessage(c.args), MaxOutputBytes: 16384})
		if err != nil {
			t.Fatal(err)
		}
		wb, _ := json.Marshal(want)
		var gv, wv any
		_ = json.Unmarshal(got.(json.RawMessage), &gv)
		_ = json.Unmarshal(wb, &wv)
		if fmt.Sprint(gv) != fmt.Sprint(wv) {
			t.Errorf("%s: worker %s, in process %s", c.tool, got, wb)
		}
	}
	// The tool's own errors come back as they are.
	_, err := call(t, p, context.Background(), "json__query", jq(`.a.b`, `{"a":1}`))
	var e *registry.Error
	if !errors.As(err, &e) || e.Code != registry.CodeTool || !strings.Contains(e.Message, "jq:") {
		t.Fatalf("jq error: %v", err)
	}
	_, err = call(t, p, context.Background(), "json__query", `{"program":5}`)
	if !errors.As(err, &e) || e.Code != registry.CodeInvalidArguments {
		t.Fatalf("bad arguments: %v", err)
	}
}

// Each bomb hits the ceiling in the worker, comes back as E_TOOL naming
// the limit, and the next call is served. Each runs in a fresh worker and
// its peak RSS stays near the ceiling. (The toolsvc binary's fresh workers
// are where RLIMIT_DATA alone let a 1 GB allocation through; the test in
// cmd/toolsvc runs that case through the binary.)
func TestBombsHitTheCeiling(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	bombs := []struct{ name, tool, args string }{
		{"doubling", "json__query", jq(`reduce range(40) as $i ("a"; .+.)`, `null`)},
		{"recursion", "json__query", jq(`def f: [f]; f`, `null`)},
		{"paths", "json__query", `{"program":"[paths]|length","inputText":` + mustJSON(deep) + `}`},
		{"repeat", "json__query", jq(`"x" * 1e9 | length`, `null`)},
	}
	for _, b := range bombs {
		t.Run(b.name, func(t *testing.T) {
			// The pool logs a dead worker in the goroutine of Call, before
			// Call returns.
			var log bytes.Buffer
			p := newPoolWith(t, Options{MemoryLimit: testLimit, Logger: slog.New(slog.NewJSONHandler(&log, nil))})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			out, err := call(t, p, ctx, b.tool, b.args)
			var e *registry.Error
			if !errors.As(err, &e) || e.Code != registry.CodeTool || !strings.Contains(e.Message, LimitSetting) || !strings.Contains(e.Message, formatBytes(testLimit)) {
				t.Fatalf("want E_TOOL naming %s, got %v %s", LimitSetting, err, out)
			}
			var died struct{ PeakRSS int64 }
			if err := json.Unmarshal(log.Bytes(), &died); err != nil || died.PeakRSS == 0 {
				t.Fatalf("no peak RSS logged for the dead worker: %v %s", err, log.Bytes())
			}
			// The worker's own code, runtime and thread stacks outside its
			// heap are about 60 MiB.
			const margin = 64 << 20
			if checkPeak && died.PeakRSS > testLimit+margin {
				t.Errorf("peak RSS %d MiB, over the ceiling %d MiB plus %d MiB", died.PeakRSS>>20, testLimit>>20, margin>>20)
			}
			t.Logf("%s: peak RSS %d MiB", b.name, died.PeakRSS>>20)
			got, err := call(t, p, context.Background(), "json__query", jq(`.+1`, `1`))
			if err != nil || !strings.Contains(string(got.(json.RawMessage)), `"results":[2]`) {
				t.Fatalf("next call: %s %v", got, err)
			}
		})
	}
}

// ceilingProbe makes the test binary apply the smallest ceiling, start
// threads and allocate within it, then allocate past it.
const ceilingProbe = "__ceiling-probe"

func probeCeiling() {
	if err := applyCeiling(MinMemoryLimit); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Four goroutines locked to threads of their own, blocked: the
	// runtime starts a thread for each (with cgo, 8 MiB of stack each).
	block := make(chan struct{})
	started := make(chan struct{})
	for range 4 {
		go func() {
			runtime.LockOSThread()
			started <- struct{}{}
			<-block
		}()
	}
	for range 4 {
		<-started
	}
	small := make([]byte, 8<<20)
	for i := range small {
		small[i] = 1
	}
	fmt.Println("within the ceiling")
	os.Stdout.Sync()
	big := make([]byte, 2*MinMemoryLimit)
	for i := range big {
		big[i] = 1
	}
	fmt.Println("past the ceiling", len(small)+len(big))
	os.Exit(0)
}

// The ceiling counts from what a worker holds when it starts, so even the
// smallest one leaves room for the runtime to start threads (a worker
// built with cgo already holds about 130 MiB of stacks and runtime
// structures, more than that ceiling), and still stops an allocation
// past it.
func TestSmallestCeilingLeavesRoomToStart(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, ceilingProbe)
	cmd.Env = append(os.Environ(), runtimeEnv()...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if !strings.Contains(stdout.String(), "within the ceiling") {
		t.Fatalf("4 threads and 8 MiB did not fit in the smallest ceiling: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	if err == nil || strings.Contains(stdout.String(), "past the ceiling") {
		t.Fatalf("an allocation of twice the ceiling succeeded: %v\n%s", err, stdout.String())
	}
	// The race detector's allocator reports a refused mapping as address
	// space collisions.
	if s := stderr.String(); !strings.Contains(s, "out of memory") && !strings.Contains(s, "cannot allocate memory") && !strings.Contains(s, "address space collisions") {
		t.Errorf("the probe died (%v) but not of the ceiling: %s", err, s)
	}
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// A call whose context ends kills its worker at once.
func TestDeadlineKillsTheWorker(t *testing.T) {
	p := newPool(t, DefaultMemoryLimit)
	w := warmWorker(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := call(t, p, ctx, "json__query", jq(`last(range(1e12))`, `null`))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the deadline, got %v", err)
	}
	if w.cmd.ProcessState == nil || w.cmd.ProcessState.Success() {
		t.Fatalf("the worker was not killed: %v", w.cmd.ProcessState)
	}
	if _, err := call(t, p, context.Background(), "json__query", jq(`1`, `null`)); err != nil {
		t.Fatalf("next call: %v", err)
	}
}

func TestResponseLimit(t *testing.T) {
	exe, _ := os.Executable()
	p, err := New(Options{Exe: exe, MemoryLimit: testLimit, ResponseLimit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = call(t, p, context.Background(), "json__query", jq(`"x" * 2000`, `null`))
	var e *registry.Error
	if !errors.As(err, &e) || e.Code != registry.CodeTool || !strings.Contains(e.Message, "more than the 1000 bytes") {
		t.Fatalf("got %v", err)
	}
}

func TestNewRefusesATinyLimit(t *testing.T) {
	if _, err := New(Options{Exe: "x", MemoryLimit: 1 << 20}); err == nil || !strings.Contains(err.Error(), LimitSetting) {
		t.Fatalf("got %v", err)
	}
}

// Calls beyond the pool's Size wait for a worker instead of starting
// more: eight concurrent calls on a pool of two start two processes, and
// a call whose deadline passes while it waits fails with it and starts
// none.
func TestPoolSizeBoundsProcesses(t *testing.T) {
	p := newPoolWith(t, Options{MemoryLimit: DefaultMemoryLimit, Size: 2})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(t, p, context.Background(), "json__query", jq(`last(range(300000))`, `null`))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := p.started.Load(); n != 2 {
		t.Fatalf("eight calls on a pool of 2 started %d workers", n)
	}

	one := newPoolWith(t, Options{MemoryLimit: DefaultMemoryLimit, Size: 1})
	hold, release := context.WithCancel(context.Background())
	held := make(chan error, 1)
	go func() {
		_, err := call(t, one, hold, "json__query", jq(`last(range(1e12))`, `null`))
		held <- err
	}()
	for deadline := time.Now().Add(30 * time.Second); one.started.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the held call started no worker within 30s")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := call(t, one, ctx, "json__query", jq(`1`, `null`)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call waiting past its deadline: %v", err)
	}
	if n := one.started.Load(); n != 1 {
		t.Fatalf("a waiting call started a worker: %d started", n)
	}
	release()
	if err := <-held; !errors.Is(err, context.Canceled) {
		t.Fatalf("the held call: %v", err)
	}
}

// TestKilledFromOutsideIsNotBlamedOnTheCeiling: a container with less
// memory than the tools may take has the kernel kill a worker with
// SIGKILL well below its ceiling; the error said the call "needed more
// memory than the tool memory limit of 512 MiB".
func TestKilledFromOutsideIsNotBlamedOnTheCeiling(t *testing.T) {
	p := newPool(t, DefaultMemoryLimit)
	w := warmWorker(t, p)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = syscall.Kill(w.cmd.Process.Pid, syscall.SIGKILL)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := call(t, p, ctx, "json__query", jq(`last(range(1e12))`, `null`))
	var e *registry.Error
	if !errors.As(err, &e) || !strings.Contains(e.Message, "was killed (SIGKILL)") || !strings.Contains(e.Message, "out-of-memory killer") || strings.Contains(e.Message, "needed more memory") {
		t.Fatalf("want an error naming a kill from outside, got %v", err)
	}
}

// warmWorker runs a call on p and returns the idle worker it leaves.
func warmWorker(t *testing.T, p *Pool) *proc {
	t.Helper()
	if _, err := call(t, p, context.Background(), "json__query", jq(`1`, `null`)); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.idle[0]
}
