package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/toolsvc/toolsvc/api"
	"github.com/toolsvc/toolsvc/internal/config"
	toolhttp "github.com/toolsvc/toolsvc/internal/http"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/data"
	"github.com/toolsvc/toolsvc/internal/tools/fs"
	"github.com/toolsvc/toolsvc/internal/tools/httpfetch"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	"github.com/toolsvc/toolsvc/internal/tools/plan"
	"github.com/toolsvc/toolsvc/internal/tools/text"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `usage: toolsvc [serve|validate|version|health]

  serve     serve the HTTP API (default)
  validate  check the configuration and exit
  version   print the version
  health    GET /healthz of the instance at TOOLSVC_ADDR (for container health checks)

Settings come from TOOLSVC_* environment variables; see the README.`

// run is the whole program; main only calls it.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 1 {
		cmd = args[1]
	}
	switch cmd {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "toolsvc", version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(ctx, cfg, stderr)
	case "validate":
		a, err := build(cfg, newLogger(cfg, stderr))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "configuration OK: %d tools\n", a.registry.Len())
		return nil
	case "health":
		return health(ctx, cfg.Addr, stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// app is everything built from the configuration.
type app struct {
	registry *registry.Registry
	policy   registry.Policy
	// plan binds plan__execute to the executor; nil without the plan tool.
	plan *plan.Binder
}

// build loads resources and built-in tools into a registry and policy.
func build(cfg Config, log *slog.Logger) (*app, error) {
	if len(cfg.ConfigPaths) > 0 {
		resources, err := config.Load(cfg.ConfigPaths...)
		if err != nil {
			return nil, err
		}
		for _, r := range resources {
			// Kinds are read by the packages that implement them as they land.
			log.Warn("resource kind not supported yet; ignored", "kind", r.Kind, "name", r.Metadata.Name, "source", r.Source())
		}
	}
	hopts := httpfetch.Options{
		Version: version, AllowCIDRs: cfg.HTTPAllowCIDRs, AllowHosts: cfg.HTTPAllowHosts, DenyHosts: cfg.HTTPDenyHosts,
		Timeout: cfg.HTTPTimeout, MaxBytes: cfg.HTTPMaxBytes, DefaultBytes: cfg.HTTPDefaultBytes, MaxRequestBytes: cfg.HTTPMaxRequestBytes,
	}
	if err := hopts.Validate(); err != nil {
		return nil, fmt.Errorf("http tools: %w", err)
	}
	ws, err := workspace.New(cfg.Workspace)
	if err != nil {
		return nil, err
	}
	var tools []*registry.Tool
	tools = append(tools, fs.Tools(fs.Options{
		Workspace: ws, MaxReadBytes: cfg.FSMaxReadBytes, MaxWriteBytes: cfg.FSMaxWriteBytes, MaxSearchBytes: cfg.FSMaxSearchBytes,
	})...)
	tools = append(tools, data.Tools(data.Options{MaxInputBytes: cfg.DataMaxInputBytes, MaxRows: cfg.DataMaxRows})...)
	tools = append(tools, text.Tools()...)
	tools = append(tools, jsonq.Tools()...)
	tools = append(tools, httpfetch.Tools(hopts)...)
	var binder *plan.Binder
	if cfg.PlanTool {
		var planTools []*registry.Tool
		planTools, binder = plan.Tools(plan.Options{Batch: batchOptions(cfg), Timeout: cfg.MaxTimeout})
		tools = append(tools, planTools...)
	}
	reg, err := registry.New(registry.Defaults{
		Timeout:           cfg.DefaultTimeout,
		MaxTimeout:        cfg.MaxTimeout,
		MaxOutputBytes:    cfg.MaxOutputBytes,
		ErrorMessageLimit: cfg.ErrorMessageLimit,
	}, tools...)
	if err != nil {
		return nil, err
	}
	return &app{registry: reg, policy: registry.DefaultTierEffects(), plan: binder}, nil
}

func batchOptions(cfg Config) registry.BatchOptions {
	return registry.BatchOptions{Parallelism: cfg.BatchParallelism}
}

func serve(ctx context.Context, cfg Config, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	a, err := build(cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	if err := checkExposure(ln.Addr(), cfg); err != nil {
		ln.Close()
		return err
	}
	if cfg.Auth == "none" && !isLoopback(ln.Addr()) {
		log.Warn("serving without authentication on a non-loopback address (TOOLSVC_AUTH=none)", "addr", ln.Addr().String())
	}

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exec := registry.NewExecutor(registry.Options{
		Registry:       a.registry,
		Policy:         a.policy,
		Logger:         log,
		Metrics:        registry.NewMetrics(metrics),
		MaxTimeout:     cfg.MaxTimeout,
		MaxConcurrency: cfg.MaxConcurrency,
	})
	if a.plan != nil {
		a.plan.Bind(exec)
	}
	srv := toolhttp.NewServer(toolhttp.Deps{
		Executor: exec,
		Logger:   log,
		Gatherer: metrics,
		OpenAPI:  api.OpenAPI(),
		Limits:   toolhttp.Limits{MaxRequestBytes: cfg.MaxRequestBytes, MaxJSONDepth: cfg.MaxJSONDepth},
		Batch:    batchOptions(cfg),
	})

	// Calls run under base, which outlives the signal so in-flight calls can
	// finish while draining, and is cancelled when the drain time is up.
	base, cancelCalls := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelCalls(nil)
	hs := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      cfg.MaxTimeout + time.Minute,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	log.Info("toolsvc listening", "addr", ln.Addr().String(), "version", version, "tools", a.registry.Len())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("draining: refusing new calls, waiting for calls in flight", "timeout", cfg.ShutdownTimeout.String())
	srv.Drain()
	wait, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	idle := srv.WaitIdle(wait)
	cancel()
	if !idle {
		log.Warn("calls still running at the shutdown timeout; cancelling them")
		cancelCalls(errors.New("the service is shutting down"))
		wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.WaitIdle(wait)
		cancel()
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(stop); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
}

// checkExposure refuses to serve a non-loopback address without
// credentials, unless the operator says TOOLSVC_AUTH=none.
func checkExposure(addr net.Addr, cfg Config) error {
	if isLoopback(addr) || cfg.Auth == "none" {
		return nil
	}
	return fmt.Errorf("refusing to serve %s without credentials: set TOOLSVC_API_KEY (or Caller resources), bind a loopback address, or set TOOLSVC_AUTH=none", addr)
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// health checks a running instance, for container health checks.
func health(ctx context.Context, addr string, stdout io.Writer) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("TOOLSVC_ADDR: %w", err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s", resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}
