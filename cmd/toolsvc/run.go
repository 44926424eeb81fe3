package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/toolsvc/toolsvc/api"
	"github.com/toolsvc/toolsvc/internal/config"
	toolhttp "github.com/toolsvc/toolsvc/internal/http"
	"github.com/toolsvc/toolsvc/internal/policy"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/telemetry"
	"github.com/toolsvc/toolsvc/internal/tools/data"
	"github.com/toolsvc/toolsvc/internal/tools/fs"
	"github.com/toolsvc/toolsvc/internal/tools/httpfetch"
	"github.com/toolsvc/toolsvc/internal/tools/jsonq"
	"github.com/toolsvc/toolsvc/internal/tools/mcpbridge"
	"github.com/toolsvc/toolsvc/internal/tools/plan"
	"github.com/toolsvc/toolsvc/internal/tools/shell"
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
	if len(args) > 1 && args[1] == sandbox.ChildCommand {
		// The sandboxed child: confine this process, then exec the program.
		return sandbox.RunChild(args[2:])
	}
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
		return serve(ctx, cfg, stdout, stderr)
	case "validate":
		a, err := build(cfg, newLogger(cfg, stderr), nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "configuration OK: %d tools%s\n", a.registry.Len(), a.mcpNote())
		return nil
	case "health":
		return health(ctx, cfg.Addr, stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", cmd, usage)
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	return telemetry.NewLogger(w, telemetry.LogOptions{Level: level, Format: cfg.LogFormat})
}

// app is everything built from the configuration.
type app struct {
	registry *registry.Registry
	policy   registry.Policy
	// auth is nil when no credentials are configured.
	auth    *policy.Authenticator
	sandbox *sandbox.Sandbox
	// static are the built-in and custom tools as built, never given to
	// registry.New (which changes what it gets), so the registry can be
	// rebuilt with new MCP tools (see app.rebuild).
	static   []*registry.Tool
	defaults registry.Defaults
	// mcp are the MCP servers of this configuration; mcpServers counts
	// them when they were not contacted (validate).
	mcp        *mcpbridge.Set
	mcpServers int
	// plan binds plan__execute to the executor; nil without the plan tool.
	plan *plan.Binder
}

// build loads resources and built-in tools into a registry, policy and
// callers. With mcp nil, MCPServer resources are checked but not
// contacted.
func build(cfg Config, log *slog.Logger, mcp *mcpbridge.Manager) (*app, error) {
	var resources []*config.Resource
	if len(cfg.ConfigPaths) > 0 {
		var err error
		if resources, err = config.Load(cfg.ConfigPaths...); err != nil {
			return nil, err
		}
	}
	var policies []policy.Document
	var callers []policy.CallerDocument
	for _, r := range resources {
		switch r.Kind {
		case config.KindPolicy:
			var spec policy.Spec
			if err := r.Decode(&spec); err != nil {
				return nil, err
			}
			policies = append(policies, policy.Document{Name: r.Metadata.Name, Source: r.Source(), Spec: spec})
		case config.KindCaller:
			var spec policy.CallerSpec
			if err := r.Decode(&spec); err != nil {
				return nil, err
			}
			callers = append(callers, policy.CallerDocument{Name: r.Metadata.Name, Source: r.Source(), Spec: spec})
		case config.KindTool, config.KindMCPServer:
			// Read by buildCustom.
		default:
			log.Warn("resource kind not supported yet; ignored", "kind", r.Kind, "name", r.Metadata.Name, "source", r.Source())
		}
	}
	pol, err := policy.New(policies, policy.Options{CostLimit: cfg.PolicyCostLimit})
	if err != nil {
		return nil, err
	}
	a := &app{policy: pol}
	if cfg.APIKey != "" || len(callers) > 0 {
		if a.auth, err = policy.NewAuthenticator(policy.AuthOptions{APIKey: cfg.APIKey, Callers: callers}); err != nil {
			return nil, err
		}
	}
	hopts := httpfetch.Options{
		Version: version, AllowCIDRs: cfg.HTTPAllowCIDRs, AllowHosts: cfg.HTTPAllowHosts, DenyHosts: cfg.HTTPDenyHosts,
		Timeout: cfg.HTTPTimeout, MaxBytes: cfg.HTTPMaxBytes, DefaultBytes: cfg.HTTPDefaultBytes, MaxRequestBytes: cfg.HTTPMaxRequestBytes,
		Propagator: telemetry.Propagator(),
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
	sb, shellTools, err := buildShell(cfg, ws, log)
	if err != nil {
		return nil, err
	}
	tools = append(tools, shellTools...)
	if cfg.PlanTool {
		var planTools []*registry.Tool
		planTools, a.plan = plan.Tools(plan.Options{Batch: batchOptions(cfg), Timeout: cfg.MaxTimeout})
		tools = append(tools, planTools...)
	}
	a.sandbox = sb
	a.defaults = registry.Defaults{
		Timeout:           cfg.DefaultTimeout,
		MaxTimeout:        cfg.MaxTimeout,
		MaxOutputBytes:    cfg.MaxOutputBytes,
		ErrorMessageLimit: cfg.ErrorMessageLimit,
		MaxConcurrency:    cfg.MaxToolConcurrency,
	}
	if err := buildCustom(a, cfg, log, resources, tools, ws, mcp); err != nil {
		return nil, err
	}
	if a.registry, err = a.rebuild(mcp); err != nil {
		return nil, err
	}
	return a, nil
}

// buildShell makes the sandbox and shell__exec.
func buildShell(cfg Config, ws *workspace.Workspace, log *slog.Logger) (*sandbox.Sandbox, []*registry.Tool, error) {
	mode, err := sandbox.ParseMode(cfg.ShellSandbox)
	if err != nil {
		return nil, nil, fmt.Errorf("TOOLSVC_SHELL_SANDBOX: %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: locating the toolsvc binary: %w", err)
	}
	sb, err := sandbox.New(sandbox.Options{
		Mode:         mode,
		SelfExe:      self,
		ReadOnlyDirs: cfg.ShellReadOnlyDirs,
		Limits: sandbox.Limits{
			CPUSeconds: cfg.ShellCPUSeconds, AddressSpaceBytes: cfg.ShellAddressSpace,
			FileSizeBytes: cfg.ShellFileSize, Processes: cfg.ShellProcesses,
		},
		Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	tools, err := shell.Tools(shell.Options{
		Workspace: ws, Sandbox: sb, Allow: cfg.ShellAllow, EnvAllow: cfg.ShellEnvAllow,
		MaxOutputBytes: cfg.ShellMaxOutputBytes, MaxProcesses: cfg.ShellMaxProcesses, Timeout: cfg.ShellTimeout, Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	return sb, tools, nil
}

// batchOptions are the batch settings of POST /calls/batch and plan__execute.
func batchOptions(cfg Config) registry.BatchOptions {
	return registry.BatchOptions{Parallelism: cfg.BatchParallelism}
}

func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	// SIGHUP reloads the configuration; listen before anything can send it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	mcpChanged := make(chan struct{}, 1)
	mcp := newMCPManager(cfg, log, mcpChanged)
	defer mcp.Close()
	a, err := build(cfg, log, mcp)
	if err != nil {
		return err
	}
	obs, err := newObservability(ctx, cfg, stdout, log)
	if err != nil {
		return err
	}
	defer obs.close(log)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	if err := checkExposure(ln.Addr(), cfg, a.auth != nil); err != nil {
		ln.Close()
		return err
	}
	if a.auth == nil && cfg.Auth == "none" && !isLoopback(ln.Addr()) {
		log.Warn("serving without authentication on a non-loopback address (TOOLSVC_AUTH=none)", "addr", ln.Addr().String())
	}

	st, err := openStore(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	if n, err := st.InterruptRunning(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	} else if n > 0 {
		log.Warn("calls left running by an earlier process are now E_INTERRUPTED", "calls", n)
	}
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	go store.RunRetention(background, st, store.RetentionOptions{Every: time.Minute, TTL: cfg.Retention, Logger: log})
	go countApprovals(background, st, obs.executor, 15*time.Second, log)

	metrics := obs.metrics
	exec := registry.NewExecutor(registry.Options{
		Registry:       a.registry,
		Policy:         a.policy,
		Logger:         log,
		Metrics:        obs.executor,
		Tracer:         obs.tracers.Tracer("github.com/toolsvc/toolsvc"),
		TraceContent:   cfg.TraceContent,
		MaxTimeout:     cfg.MaxTimeout,
		MaxConcurrency: cfg.MaxConcurrency,
		Store:          st,
		ApprovalTTL:    cfg.ApprovalTTL,
	})
	if a.plan != nil {
		a.plan.Bind(exec)
	}
	var auth toolhttp.Authenticator
	var callers *liveAuth // replaced by reloads
	if a.auth != nil {
		callers = newLiveAuth(a.auth)
		auth = callers
		log.Info("authentication on", "credentials", a.auth.Len())
	}
	reloads := newReloader(cfg, log, exec, callers, mcp, metrics, a)
	srv := toolhttp.NewServer(toolhttp.Deps{
		Auth:           auth,
		Executor:       exec,
		Logger:         log,
		Gatherer:       metrics,
		Registerer:     metrics,
		TracerProvider: obs.tracers,
		OpenAPI:        api.OpenAPI(),
		Limits:         toolhttp.Limits{MaxRequestBytes: cfg.MaxRequestBytes, MaxJSONDepth: cfg.MaxJSONDepth},
		ReadyDetails:   map[string]any{"sandbox": a.sandbox.Status(), "mcp": mcp.Readiness()},
		Ready:          map[string]toolhttp.Check{"store": st.Ping},
		Batch:          batchOptions(cfg),
	})
	defer reloads.start(ctx, hup, mcpChanged)()

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

// openStore opens PostgreSQL when TOOLSVC_STORE_URL is set, else the
// embedded store under TOOLSVC_DATA_DIR.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (registry.Store, error) {
	if cfg.StoreURL != "" {
		s, err := postgres.Open(ctx, postgres.Options{URL: cfg.StoreURL, Schema: cfg.StoreSchema, InstanceID: cfg.InstanceID, Logger: log})
		if err != nil {
			return nil, err
		}
		log.Info("store: PostgreSQL", "schema", cfg.StoreSchema)
		return s, nil
	}
	path := filepath.Join(cfg.DataDir, "toolsvc.db")
	s, err := sqlite.Open(ctx, path, sqlite.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	log.Info("store: embedded", "path", path)
	return s, nil
}

// checkExposure refuses to serve a non-loopback address without
// credentials, unless the operator says TOOLSVC_AUTH=none.
func checkExposure(addr net.Addr, cfg Config, credentials bool) error {
	if credentials || isLoopback(addr) || cfg.Auth == "none" {
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
