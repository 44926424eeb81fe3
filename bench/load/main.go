// Command load measures where toolsvc stands: throughput and latency of
// POST /calls against a bare chi server in the same run, a soak under a
// mix of every kind of call, and start-up and memory at catalog scale.
//
// Run it from the repository root:
//
//	go run ./bench/load                       # everything, full length
//	go run ./bench/load -rounds 1 -duration 3s -soak 10s   # a quick look
//
// It builds toolsvc, runs it (and every other server) as a child process
// on 127.0.0.1, pins servers and load generator to different CPUs with
// taskset when it can, and drives load with wrk (Debian package wrk).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

// options are the harness's flags.
type options struct {
	scenarios   []string
	rounds      int
	duration    time.Duration
	warmup      time.Duration
	concurrency int
	soak        time.Duration
	soakClients int
	scaleTools  int
	serverCPU   string
	loadCPU     string
	pin         bool
	repo        string
	baseline    string
	keep        bool
	loads       []string
	toolsvcEnv  []string
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "bare":
			return serveBare(ctx, args[1:], stdout)
		case "catalog":
			return serveCatalog(ctx, args[1:], stdout)
		}
	}
	var o options
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	scenarios := fs.String("scenarios", "throughput,soak,scale", "comma-separated scenarios to run: throughput, soak, scale, floor (not by default: bare servers that spend 5–40 µs more CPU per call, beside toolsvc)")
	fs.IntVar(&o.rounds, "rounds", 5, "throughput: rounds, each measuring every target once")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "throughput: length of one measurement")
	fs.DurationVar(&o.warmup, "warmup", 3*time.Second, "throughput: warm-up of each target before the first round")
	fs.IntVar(&o.concurrency, "c", 32, "throughput: concurrent connections (requests in flight)")
	fs.DurationVar(&o.soak, "soak", 60*time.Second, "soak: how long the clients run")
	fs.IntVar(&o.soakClients, "soak-clients", 64, "soak: concurrent clients")
	fs.IntVar(&o.scaleTools, "scale-tools", 10000, "scale: tools in the large catalog")
	fs.StringVar(&o.serverCPU, "server-cpu", "0", "CPU list (taskset) for the servers")
	fs.StringVar(&o.loadCPU, "load-cpu", "1", "CPU list (taskset) for the load generators")
	fs.BoolVar(&o.pin, "pin", true, "pin servers and load generators to -server-cpu and -load-cpu (needs taskset and 2 CPUs)")
	fs.StringVar(&o.repo, "repo", ".", "the toolsvc repository to build")
	fs.StringVar(&o.baseline, "baseline", "", "throughput: another toolsvc repository (e.g. a worktree of an earlier commit) to build and measure in the same rounds")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (binaries, logs, workspace)")
	loadList := fs.String("loads", "read_only,worker,side_effecting", "throughput: comma-separated loads: read_only (fs__stat, in process), worker (text__transform, in a pooled worker process), side_effecting (fs__write)")
	toolsvcEnv := fs.String("toolsvc-env", "", "comma-separated KEY=value settings added to toolsvc's default configuration (e.g. GOGC=400)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.scenarios = strings.Split(*scenarios, ",")
	o.loads = strings.Split(*loadList, ",")
	if *toolsvcEnv != "" {
		o.toolsvcEnv = strings.Split(*toolsvcEnv, ",")
	}
	for _, s := range o.scenarios {
		if s != "throughput" && s != "soak" && s != "scale" && s != "floor" {
			return fmt.Errorf("unknown scenario %q (want throughput, soak, scale or floor)", s)
		}
	}
	h, err := newHarness(ctx, o, stdout)
	if err != nil {
		return err
	}
	defer h.close()
	h.printMachine()
	for _, s := range o.scenarios {
		var err error
		switch s {
		case "throughput":
			err = h.throughput(ctx)
		case "soak":
			err = h.soakTest(ctx)
		case "scale":
			err = h.scale(ctx)
		case "floor":
			err = h.floor(ctx)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}
