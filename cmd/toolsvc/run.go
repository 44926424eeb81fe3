package main

import (
	"container/list"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/api"
	"github.com/toolsvc/toolsvc/internal/config"
	toolhttp "github.com/toolsvc/toolsvc/internal/http"
	"github.com/toolsvc/toolsvc/internal/notify"
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
	resulttool "github.com/toolsvc/toolsvc/internal/tools/result"
	"github.com/toolsvc/toolsvc/internal/tools/shell"
	"github.com/toolsvc/toolsvc/internal/tools/text"
	"github.com/toolsvc/toolsvc/internal/tools/worker"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// run is the whole program; main only calls it.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) error {
	if len(args) > 1 && args[1] == sandbox.ChildCommand {
		// The sandboxed child: confine this process, then exec the program.
		return sandbox.RunChild(args[2:], sandbox.Entries{shell.InterpreterEntry: shell.RunInterpreter})
	}
	if len(args) > 1 && args[1] == worker.Command {
		// A tool worker: the confined tools, one call at a time, under
		// the memory ceiling, over stdin and stdout.
		cfg, err := loadConfig(environ)
		if err != nil {
			return err
		}
		return worker.Serve(args[2:], confinedTools(cfg), os.Stdin, stdout)
	}
	cmd := "serve"
	if len(args) > 1 {
		cmd = args[1]
	}
	switch cmd {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, buildInfo())
		return nil
	case "help", "-h", "-help", "--help":
		printHelp(stdout)
		return nil
	case "serve", "validate", "health":
	default:
		if strings.HasPrefix(cmd, "-") {
			return usageError("unknown flag %s: toolsvc takes no flags; settings are TOOLSVC_* environment variables (toolsvc help lists them)", cmd)
		}
		return usageError("unknown command %q", cmd)
	}
	if len(args) > 2 {
		if strings.HasPrefix(args[2], "-") {
			return usageError("unknown flag %s: toolsvc %s takes no flags; settings are TOOLSVC_* environment variables (toolsvc help lists them)", args[2], cmd)
		}
		return usageError("toolsvc %s takes no arguments, got %q", cmd, strings.Join(args[2:], " "))
	}
	cfg, err := loadConfig(environ)
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(ctx, cfg, stdout, stderr)
	case "validate":
		a, err := build(cfg, newLogger(cfg, stderr), nil, nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "configuration OK: %d tools%s\n", a.registry.Len(), a.mcpNote())
		return nil
	case "health":
		return health(ctx, cfg, stdout)
	}
	return usageError("unknown command %q", cmd)
}

// disabledTools names the built-in tools cfg leaves off, with the setting
// that turns each on.
func disabledTools(cfg Config) map[string]string {
	if cfg.PlanTool {
		return nil
	}
	return map[string]string{plan.Name: "TOOLSVC_PLAN_TOOL=true serves it"}
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel)
	return telemetry.NewLogger(w, telemetry.LogOptions{Level: level, Format: cfg.LogFormat})
}

// logWriter returns where the service's log goes: stderr, through a
// buffer its own goroutine writes out every TOOLSVC_LOG_FLUSH_INTERVAL (0:
// at once), so that a reader of stderr that stops reading never holds up
// a call or the drain; flush writes out what the buffer holds now, close
// also stops the buffering.
func logWriter(cfg Config, stderr io.Writer) (w *telemetry.BufferedWriter, flush, close func()) {
	b := telemetry.NewBufferedWriter(stderr, cfg.LogFlushInterval)
	return b, func() { _ = b.Flush() }, func() { _ = b.Close() }
}

// app is everything built from the configuration.
type app struct {
	registry *registry.Registry
	policy   registry.Policy
	// auth is nil when no credentials are configured.
	auth *policy.Authenticator
	// issuers are the Issuer resources (JWT callers).
	issuers []*policy.Issuer
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
	// workers run the confined tools under the memory ceiling.
	workers *worker.Pool
	ws      *workspace.Workspace
	// notifiers are the Notifier resources.
	notifiers []*notify.Target
	// result binds result__read to the executor; nil when no output is kept.
	result *resulttool.Binder
}

// bind gives the tools that call through the executor their executor, and
// plan__execute's steps the callers' rate limits.
func (a *app) bind(exec *registry.Executor, limit plan.Limit) {
	if a.plan != nil {
		a.plan.Bind(exec)
		a.plan.BindLimit(limit)
	}
	if a.result != nil {
		a.result.Bind(exec)
	}
}

// build loads resources and built-in tools into a registry, policy and
// callers. With mcp nil, MCPServer resources are checked but not
// contacted. The confined tools run in workers, the process's pool (nil:
// a pool of the configuration's own): every configuration a process loads
// shares one, so that a reload neither multiplies the workers the memory
// ceiling is counted for nor closes the pool calls wait on.
func build(cfg Config, log *slog.Logger, mcp *mcpbridge.Manager, workers *worker.Pool) (*app, error) {
	var resources []*config.Resource
	if len(cfg.ConfigPaths) > 0 {
		var err error
		if resources, err = configOptions(cfg).Load(cfg.ConfigPaths...); err != nil {
			return nil, err
		}
	}
	var policies []policy.Document
	var callers []policy.CallerDocument
	var notifiers []*notify.Target
	var issuers []policy.IssuerDocument
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
		case config.KindNotifier:
			var spec notify.Spec
			if err := r.Decode(&spec); err != nil {
				return nil, err
			}
			t, err := notify.Decode(r.Metadata.Name, spec, cfg.lookupEnv)
			if err != nil {
				return nil, r.Errorf("%v", err)
			}
			notifiers = append(notifiers, t)
		case config.KindIssuer:
			var spec policy.IssuerSpec
			if err := r.Decode(&spec); err != nil {
				return nil, err
			}
			issuers = append(issuers, policy.IssuerDocument{Name: r.Metadata.Name, Source: r.Source(), Dir: filepath.Dir(r.File), Spec: spec, ReadFile: configOptions(cfg).ReadFile})
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
	a := &app{policy: pol, notifiers: notifiers}
	if a.issuers, err = policy.NewIssuers(issuers, cfg.defaultRate()); err != nil {
		return nil, err
	}
	if err := policy.CheckCallerIDs(a.issuers, callers, cfg.APIKey != ""); err != nil {
		return nil, err
	}
	if cfg.APIKey != "" || len(callers) > 0 || len(a.issuers) > 0 {
		if a.auth, err = policy.NewAuthenticator(policy.AuthOptions{APIKey: cfg.APIKey, Callers: callers, DefaultRate: cfg.defaultRate(), ReadFile: configOptions(cfg).ReadFile}); err != nil {
			return nil, err
		}
		a.policy = withCallers(pol, a.auth, a.issuers)
	}
	hopts := httpfetch.Options{
		Version: version, AllowCIDRs: cfg.HTTPAllowCIDRs, AllowHosts: cfg.HTTPAllowHosts, DenyHosts: cfg.HTTPDenyHosts,
		Timeout: cfg.HTTPTimeout, MaxBytes: cfg.HTTPMaxBytes, DefaultBytes: cfg.HTTPDefaultBytes, MaxRequestBytes: cfg.HTTPMaxRequestBytes,
		Propagator: telemetry.Propagator(),
	}
	if err := hopts.Validate(); err != nil {
		return nil, fmt.Errorf("http tools: %w", err)
	}
	ws, err := workspace.New(cfg.Workspace, workspace.Options{Reserve: int64(cfg.WorkspaceReserve)})
	if err != nil {
		return nil, err
	}
	a.ws = ws
	var tools []*registry.Tool
	tools = append(tools, fs.Tools(fs.Options{
		Workspace: ws, MaxReadBytes: cfg.FSMaxReadBytes, MaxWriteBytes: cfg.FSMaxWriteBytes, MaxSearchBytes: cfg.FSMaxSearchBytes,
		MaxRequestBytes: cfg.MaxRequestBytes,
	})...)
	if a.workers = workers; workers == nil {
		if a.workers, err = newWorkers(cfg, log); err != nil {
			return nil, err
		}
	}
	tools = append(tools, a.workers.Confine(confinedTools(cfg))...)
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
	if cfg.SpillMaxBytes > 0 {
		var resultTools []*registry.Tool
		resultTools, a.result = resulttool.Tools(resulttool.Options{})
		tools = append(tools, resultTools...)
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
	// Once the resources have asked for the variables they name.
	for _, name := range cfg.unknownSettings() {
		log.Warn("unknown setting: no TOOLSVC_ variable has this name, so it changes nothing", "variable", name)
	}
	return a, nil
}

// configOptions say how build reads TOOLSVC_CONFIG: at start, at every
// reload and in toolsvc validate, none of its paths may lie inside or
// contain a directory others write to. Callers write files in the
// workspace (fs__write), which a configuration directory holding it
// would load at the next reload: a Caller with every scope, an MCPServer
// command run unconfined. The data directory is the embedded store's own.
func configOptions(cfg Config) config.Options {
	protected := []config.Protected{{Setting: "TOOLSVC_WORKSPACE", Dir: cfg.Workspace, Writers: "callers write files there (fs__write, shell__exec)"}}
	if cfg.StoreURL == "" {
		protected = append(protected, config.Protected{Setting: "TOOLSVC_DATA_DIR", Dir: cfg.DataDir, Writers: "the embedded store writes there"})
	}
	return config.Options{Setting: "TOOLSVC_CONFIG", Protected: protected}
}

// confinedTools are the built-in tools whose memory a model drives (a jq
// program, a transform's output, a parsed document): they run in worker
// processes under TOOLSVC_TOOL_MEMORY_LIMIT. The worker builds them with
// the same settings from the same environment.
func confinedTools(cfg Config) []*registry.Tool {
	var tools []*registry.Tool
	tools = append(tools, data.Tools(data.Options{MaxInputBytes: cfg.DataMaxInputBytes, MaxRows: cfg.DataMaxRows})...)
	tools = append(tools, text.Tools()...)
	return append(tools, jsonq.Tools()...)
}

// newWorkers makes the pool of tool workers: this binary, re-executed.
func newWorkers(cfg Config, log *slog.Logger) (*worker.Pool, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("tool workers: locating the toolsvc binary: %w", err)
	}
	// The worker reads the tools' settings like the service does, and the
	// Go runtime's own; nothing else (no credentials) goes in.
	var env []string
	for k, v := range cfg.environ {
		if strings.HasPrefix(k, "TOOLSVC_DATA_") || k == "GODEBUG" || k == "GOMAXPROCS" || k == "GOGC" {
			env = append(env, k+"="+v)
		}
	}
	return worker.New(worker.Options{Exe: self, MemoryLimit: int64(cfg.ToolMemoryLimit), Size: cfg.ToolWorkers, Env: env, Logger: log})
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
	launcher := sandboxLauncher(cfg, self)
	sb, err := sandbox.New(sandbox.Options{
		Launcher:     launcher,
		Probe:        cfg.probe,
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
	if err := sb.Usable(); err != nil {
		log.Warn("shell__exec and exec tools are not served", "reason", err.Error(), "optIn", "TOOLSVC_SHELL_SANDBOX=best-effort")
		return sb, nil, nil
	}
	tools, err := shell.Tools(shell.Options{
		Workspace: ws, Sandbox: sb, Allow: cfg.ShellAllow, EnvAllow: cfg.ShellEnvAllow,
		MaxOutputBytes: cfg.ShellMaxOutputBytes, MaxProcesses: cfg.ShellMaxProcesses, Timeout: cfg.ShellTimeout,
		MemoryLimit: uint64(cfg.ToolMemoryLimit), Logger: log,
	})
	if err != nil {
		return nil, nil, err
	}
	for _, t := range tools {
		if t.MaxConcurrency == 0 {
			t.MaxConcurrency = cfg.processConcurrency()
		}
	}
	return sb, tools, nil
}

// sandboxLauncher is TOOLSVC_SANDBOX_LAUNCHER, or toolsvc-sandbox next to
// the toolsvc binary self; "" when neither is set or there.
func sandboxLauncher(cfg Config, self string) string {
	if cfg.SandboxLauncher != "" {
		return cfg.SandboxLauncher
	}
	if p := filepath.Join(filepath.Dir(self), "toolsvc-sandbox"); isExecutable(p) {
		return p
	}
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// batchOptions are the batch settings of POST /calls/batch and plan__execute.
func batchOptions(cfg Config) registry.BatchOptions {
	return registry.BatchOptions{Parallelism: cfg.BatchParallelism}
}

func serve(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	// Before anything is opened, probed or created (the sandbox's probe,
	// the workers, the store in TOOLSVC_DATA_DIR): a service refused for
	// its address should leave nothing behind.
	if err := checkAddress(cfg); err != nil {
		return err
	}
	logOut, flushLog, closeLog := logWriter(cfg, stderr)
	// Deferred first, so it runs last: every line, "stopped" included, is
	// written out before serve returns.
	defer closeLog()
	log := newLogger(cfg, logOut)
	// SIGHUP reloads the configuration; listen before anything can send it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	mcpChanged := make(chan struct{}, 1)
	mcp := newMCPManager(cfg, log, mcpChanged)
	defer mcp.Close()
	workers, err := newWorkers(cfg, log)
	if err != nil {
		return err
	}
	defer workers.Close()
	a, err := build(cfg, log, mcp, workers)
	if err != nil {
		return err
	}
	defer a.ws.Close()
	obs, err := newObservability(ctx, cfg, stdout, log)
	if err != nil {
		return err
	}
	defer obs.close(log)
	obs.metrics.MustRegister(logOut) // toolsvc_log_lines_dropped_total
	// The store opens before the port listens: a service that cannot
	// keep records does not accept calls.
	st, err := openStoreRetrying(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer st.Close()
	spills, _ := st.(registry.SpillStore)
	commits, _ := st.(interface{ CommitStats() (txs, writes uint64) })
	st = store.WithDeadline(st, cfg.StoreTimeout)
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("TOOLSVC_ADDR: %w", err)
	}
	if err := checkExposure(ln.Addr(), cfg, a.auth != nil); err != nil {
		ln.Close()
		return err
	}
	slots := newConnSlots(ln, maxConnections(cfg.MaxConnections))
	ln = slots
	if a.auth == nil && cfg.Auth == "none" && !isLoopback(ln.Addr()) {
		log.Warn("serving without authentication on a non-loopback address (TOOLSVC_AUTH=none)", "addr", ln.Addr().String())
	}

	if n, err := st.InterruptRunning(ctx); err != nil {
		if !errors.Is(err, registry.ErrStoreFull) {
			return fmt.Errorf("store: %w", err)
		}
		// A full volume must not keep the service down: the sweeps that
		// free space (expired outputs and records) run only once it is up.
		// Left running, the records read E_INTERRUPTED once their lease
		// has lapsed, and a sweep that has room ends them.
		log.Warn("store: out of disk space; calls left running by an earlier process are ended later, by a sweep or when read",
			"dataDir", dataDirOf(cfg), "err", err)
	} else if n > 0 {
		log.Warn("calls left running by an earlier process are now E_INTERRUPTED", "calls", n)
	}
	notifier := notify.New(notify.Options{PublicURL: cfg.publicURL(), Logger: log, Registerer: obs.metrics})
	defer notifier.Close()
	notifier.Load(a.notifiers)
	background, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBackground()
	go store.RunRetention(background, st, store.RetentionOptions{Every: time.Minute, TTL: cfg.Retention, Logger: log, Observer: notifier})
	go countApprovals(background, st, obs.executor, 15*time.Second, log)

	metrics := obs.metrics
	if commits != nil {
		registerCommitStats(metrics, commits.CommitStats)
	}
	spill, err := newSpiller(cfg, spills, log, metrics)
	if err != nil {
		return err
	}
	if cfg.SpillMaxBytes > 0 {
		go spill.Sweep(background, time.Minute)
	}
	exec := registry.NewExecutor(registry.Options{
		Registry:            a.registry,
		Policy:              a.policy,
		Logger:              log,
		Metrics:             obs.executor,
		Tracer:              obs.tracers.Tracer("github.com/toolsvc/toolsvc"),
		TraceContent:        cfg.TraceContent,
		MaxTimeout:          cfg.MaxTimeout,
		MaxConcurrency:      cfg.maxConcurrency(),
		Store:               st,
		ApprovalTTL:         cfg.ApprovalTTL,
		MaxPendingApprovals: cfg.ApprovalMaxPending,
		MaxArgumentsDepth:   cfg.MaxJSONDepth,
		WaitTimeout:         cfg.StoreWaitTimeout,
		RecordBacklog:       cfg.StoreBacklog,
		Observer:            notifier,
		Spill:               spill,
		Disabled:            disabledTools(cfg),
	})
	go exec.RetryRecords(background, 5*time.Second)
	var identity toolhttp.Identity
	var callers *liveAuth // replaced by reloads
	if a.auth != nil {
		callers = newLiveAuth(a, log)
		identity = callers
		log.Info("authentication on", "callers", a.auth.Len(), "issuers", len(a.issuers))
	}
	limiter, closeLimiter, err := newRateLimiter(cfg, log)
	if err != nil {
		return err
	}
	defer closeLimiter()
	tlsFiles, err := newTLSFiles(cfg, log)
	if err != nil {
		return err
	}
	reloads := newReloader(cfg, log, exec, callers, mcp, metrics, a)
	reloads.notifier = notifier
	uiKey, _ := cfg.uiKey() // checked by loadConfig
	reloads.tls = tlsFiles
	anonymous, err := policy.AnonymousCaller(cfg.defaultRate())
	if err != nil {
		return err
	}
	srv := toolhttp.NewServer(toolhttp.Deps{
		Identity:       identity,
		Anonymous:      anonymous,
		RateLimiter:    limiter,
		Executor:       exec,
		Logger:         log,
		Gatherer:       metrics,
		Registerer:     metrics,
		TracerProvider: obs.tracers,
		OpenAPI:        api.OpenAPI(),
		Limits:         toolhttp.Limits{MaxRequestBytes: cfg.MaxRequestBytes, MaxJSONDepth: cfg.MaxJSONDepth, MaxRequestBytesInFlight: int64(cfg.MaxRequestBytesInFlight)},
		ReadyDetails:   map[string]any{"sandbox": a.sandbox.Status(), "mcp": mcp.Readiness()},
		Ready: map[string]toolhttp.Check{"store": func(ctx context.Context) error {
			if err := st.Ping(ctx); err != nil {
				return err
			}
			return store.Failing(st)
		}},
		Batch: batchOptions(cfg),
		Console: toolhttp.Console{Disabled: !cfg.UI, Key: uiKey, SessionTTL: cfg.UISessionTTL,
			SecureCookies: strings.HasPrefix(cfg.PublicURL, "https://")},
		Version: version,
	})
	reloads.planLimit = srv.LimitSteps
	a.bind(exec, srv.LimitSteps)
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
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    int(cfg.MaxHeaderBytes),
		ConnState:         slots.connState,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 2)
	listening := []any{"addr", ln.Addr().String()}
	if cfg.AdminAddr != "" {
		as, addr, err := serveAdmin(cfg.AdminAddr, int(cfg.MaxHeaderBytes), srv.AdminHandler(), log, served)
		if err != nil {
			return err
		}
		defer as.Close() // after hs, so /readyz says draining there till the end
		listening = append(listening, "admin", addr)
	}
	if tlsFiles != nil {
		hs.TLSConfig = tlsFiles.config()
		go tlsFiles.watch(background)
		go func() { served <- hs.ServeTLS(ln, "", "") }()
	} else {
		go func() { served <- hs.Serve(ln) }()
	}
	log.Info("toolsvc listening", append(listening, "version", version, "tools", a.registry.Len(), "tls", tlsFiles != nil, "gomaxprocs", runtime.GOMAXPROCS(0), "gogc", gcPercentNow())...)
	flushLog() // whoever waits for this line (the port it names) gets it now

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("draining: refusing new calls, waiting for calls in flight", "timeout", cfg.ShutdownTimeout.String())
	srv.Drain()
	exec.Drain() // batches and plans in flight start no more calls
	drainEnd := time.Now().Add(cfg.ShutdownTimeout)
	wait, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	idle := srv.WaitIdle(wait)
	cancel()
	if !idle {
		log.Warn("calls still running at the shutdown timeout; cancelling them")
		cancelCalls(registry.ErrShutdown)
		wait, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		srv.WaitIdle(wait)
		cancel()
	}
	stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shutdownErr := hs.Shutdown(stop)
	flushRecords(exec, stopBackground, drainEnd)
	if shutdownErr != nil {
		return fmt.Errorf("shutdown: %w", shutdownErr)
	}
	log.Info("stopped")
	return nil
}

// adminConnections bounds the connections of the admin listener: probes
// and scrapers need few, and nothing on it may take the descriptors the
// calls need.
const adminConnections = 64

// idleTimeout is how long a connection of TOOLSVC_ADDR may wait between
// requests (2 minutes before; at TOOLSVC_MAX_CONNECTIONS an idle one is
// closed sooner, see connSlots).
const idleTimeout = 30 * time.Second

// serveAdmin serves h (health and metrics only) on addr, with requests'
// line and headers of at most headerBytes, sending what Serve returns to
// served, and returns the server and the address it listens on.
func serveAdmin(addr string, headerBytes int, h http.Handler, log *slog.Logger, served chan<- error) (*http.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("TOOLSVC_ADMIN_ADDR: %w", err)
	}
	slots := newConnSlots(ln, adminConnections)
	as := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    headerBytes,
		ConnState:         slots.connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() { served <- as.Serve(slots) }()
	return as, ln.Addr().String(), nil
}

// connSlots is a listener that holds at most n connections open at once
// (netutil.LimitListener did before): past them, a new connection waits.
// Unlike LimitListener, it makes room: a connection idle between
// requests (http.StateIdle, told by the server's ConnState hook: for
// HTTP/2, without a stream) is closed for the waiting one, the one idle
// the longest first, or, when none is idle, the next to finish its
// request. Before, 50 clients that each made one request and kept their
// connection open held every slot of TOOLSVC_MAX_CONNECTIONS=50 for the
// idle timeout (2 minutes), and no one else was answered. New
// connections and those running a request or writing its answer keep
// their slot. As with any idle timeout, a client whose next request
// crosses the close on the wire sees the connection closed; HTTP clients
// retry such requests on a new connection when they are idempotent.
type connSlots struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu sync.Mutex
	// idle are the connections that may be closed to make room, the one
	// idle the longest at the front.
	idle list.List
	// wanted is how many waiting connections the next ones to become
	// idle are closed for.
	wanted int
}

func newConnSlots(ln net.Listener, n int) *connSlots {
	return &connSlots{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

// Accept returns the next connection once it has a slot.
func (l *connSlots) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
		return &slotConn{Conn: c, l: l}, nil
	default:
	}
	// Every slot is taken: close the connection idle the longest, or
	// the next one to become idle.
	l.mu.Lock()
	var victim *slotConn
	if e := l.idle.Front(); e != nil {
		victim = e.Value.(*slotConn)
		victim.notIdle()
	} else {
		l.wanted++
	}
	l.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		c.Close()
		return nil, net.ErrClosed
	}
	if victim == nil {
		// The slot may have come from a connection that closed of
		// itself: then none is to be closed for this one any more.
		l.mu.Lock()
		l.wanted = max(l.wanted-1, 0)
		l.mu.Unlock()
	}
	return &slotConn{Conn: c, l: l}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *connSlots) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// connState is the http.Server's ConnState hook: it keeps the idle list.
func (l *connSlots) connState(nc net.Conn, state http.ConnState) {
	c, ok := nc.(*slotConn)
	if u, isTLS := nc.(interface{ NetConn() net.Conn }); !ok && isTLS {
		c, ok = u.NetConn().(*slotConn)
	}
	if !ok {
		return
	}
	if state != http.StateIdle {
		c.busy()
		return
	}
	l.mu.Lock()
	if c.closed {
		l.mu.Unlock()
		return
	}
	if l.wanted > 0 {
		l.wanted--
		l.mu.Unlock()
		c.Close() // a connection waits for its slot
		return
	}
	if c.idleAt == nil {
		c.idleAt = l.idle.PushBack(c)
	}
	l.mu.Unlock()
}

// slotConn is a connection holding a slot of connSlots until it closes.
type slotConn struct {
	net.Conn
	l           *connSlots
	releaseOnce sync.Once
	// idleAt is its place in l.idle while it is idle; closed says it
	// holds no slot any more; both under l.mu.
	idleAt *list.Element
	closed bool
}

// busy takes the connection off the idle list.
func (c *slotConn) busy() {
	c.l.mu.Lock()
	c.notIdle()
	c.l.mu.Unlock()
}

// notIdle takes the connection off the idle list, under l.mu.
func (c *slotConn) notIdle() {
	if c.idleAt != nil {
		c.l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
}

// Close closes the connection and frees its slot.
func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.releaseOnce.Do(func() {
		c.l.mu.Lock()
		c.closed = true
		c.notIdle()
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}

// flushRecords gives the results and audit entries the store refused one
// last attempt, once no call runs any more and before the store closes:
// at most 5s, and no more than what is left of TOOLSVC_SHUTDOWN_TIMEOUT,
// but at least 1s. What is still held then is logged, one line each.
// stopBackground first stops the background retries, so that nothing is
// written after the lines that say it was not.
func flushRecords(exec *registry.Executor, stopBackground func(), drainEnd time.Time) {
	stopBackground()
	ctx, cancel := context.WithTimeout(context.Background(), min(5*time.Second, max(time.Until(drainEnd), time.Second)))
	defer cancel()
	exec.FlushRecords(ctx)
}

// attempts says how many attempts were made, in words.
func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// openStoreRetrying opens the store before the service listens, retrying
// with backoff (each failure logged) until TOOLSVC_STORE_START_TIMEOUT.
func openStoreRetrying(ctx context.Context, cfg Config, log *slog.Logger) (registry.Store, error) {
	stopped := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.StoreStartTimeout)
	defer cancel()
	start := time.Now()
	gaveUp := func(attempt int, err error) error {
		if stopped.Err() != nil {
			return fmt.Errorf("store: stopped after %s before the store opened, %s: %w", time.Since(start).Round(time.Millisecond), attempts(attempt), err)
		}
		return fmt.Errorf("store: not open after %s (TOOLSVC_STORE_START_TIMEOUT), %s: %w", cfg.StoreStartTimeout, attempts(attempt), err)
	}
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		// Migrations may take longer than one operation.
		actx, acancel := context.WithTimeout(ctx, max(cfg.StoreTimeout, 10*time.Second))
		st, err := openStore(actx, cfg, log)
		acancel()
		if err == nil {
			return st, nil
		}
		err = outOfSpace(cfg, err)
		if ctx.Err() != nil {
			return nil, gaveUp(attempt, err)
		}
		if errors.Is(err, store.ErrNewerSchema) {
			return nil, err // no retry of this program can open it
		}
		if cfg.StoreURL == "" && (errors.Is(err, iofs.ErrPermission) || errors.Is(err, syscall.EROFS)) {
			// A data directory this user cannot write stays so: an
			// operator has to change it, not time.
			return nil, fmt.Errorf("store: TOOLSVC_DATA_DIR %s cannot be written by this process (uid %d): %w; make the directory writable by that user, or set TOOLSVC_DATA_DIR to one that is", absPath(cfg.DataDir), os.Getuid(), err)
		}
		log.Warn("store: opening failed; retrying", "attempt", attempt, "retryIn", delay.String(), "err", err)
		select {
		case <-ctx.Done():
			return nil, gaveUp(attempt, err)
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// absPath is p made absolute for a message, or p when that fails.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// openStore opens PostgreSQL when TOOLSVC_STORE_URL is set, else the
// embedded store under TOOLSVC_DATA_DIR.
func openStore(ctx context.Context, cfg Config, log *slog.Logger) (registry.Store, error) {
	if cfg.StoreURL != "" {
		s, err := postgres.Open(ctx, postgres.Options{URL: cfg.StoreURL, Schema: cfg.StoreSchema, InstanceID: cfg.InstanceID, Logger: log, ConnectTimeout: cfg.StoreTimeout,
			CommitWindow: cfg.StoreCommitWindow, CommitMaxOps: cfg.storeCommitMax()})
		if err != nil {
			return nil, err
		}
		log.Info("store: PostgreSQL", "schema", cfg.StoreSchema)
		return s, nil
	}
	path := filepath.Join(cfg.DataDir, "toolsvc.db")
	useReserve(cfg.DataDir, log)
	s, err := sqlite.Open(ctx, path, sqlite.Options{Logger: log, SyncNormal: cfg.StoreSync == "normal", CommitWindow: cfg.StoreCommitWindow, CommitMaxOps: cfg.storeCommitMax()})
	if err != nil {
		return nil, err
	}
	log.Info("store: embedded", "path", path, "sync", cfg.StoreSync, "commitWindow", cfg.StoreCommitWindow.String())
	makeReserve(cfg.DataDir, log)
	return s, nil
}

// reserveFile is the file the embedded store keeps beside its database,
// holding space on the data volume for a start that finds the volume full.
// SQLite needs room for its shared-memory file and WAL before it can read
// anything: on a full volume the store did not open ("disk I/O error"),
// so the sweep that would free the space of expired outputs and records
// never ran, and only an operator could bring the service back.
const reserveFile = "toolsvc.db-reserve"

// reserveBytes is the size of the reserve file on a volume of size
// bytes: 2 MiB, at most an eighth of the volume. SQLite's WAL grows to
// 1 MiB before SQLite checkpoints it, and deleting 256 MiB of expired
// outputs writes about 550 KiB of it.
func reserveBytes(size int64) int64 { return min(2<<20, size/8) }

// useReserve deletes the reserve file when the data volume has less free
// than the file holds, so that the store can open and sweep.
func useReserve(dir string, log *slog.Logger) {
	free, size, ok := sqlite.VolumeSpace(dir)
	if !ok || free >= reserveBytes(size) {
		return
	}
	path := filepath.Join(dir, reserveFile)
	if fi, err := os.Stat(path); err == nil && os.Remove(path) == nil {
		log.Warn("store: the data volume is nearly full, so its reserve file is deleted: the store can open, and free the space of expired outputs and records (the file is made again at a start that finds room)",
			"dataDir", absPath(dir), "freeBytes", free, "reserveBytes", fi.Size())
	}
}

// makeReserve makes the reserve file when it is missing and the data
// volume has room for it twice over. Its bytes are random, so that a
// compressing file system gives them their room.
func makeReserve(dir string, log *slog.Logger) {
	path := filepath.Join(dir, reserveFile)
	free, size, ok := sqlite.VolumeSpace(dir)
	n := reserveBytes(size)
	if _, err := os.Stat(path); !ok || n <= 0 || free < 2*n || !errors.Is(err, iofs.ErrNotExist) {
		return
	}
	b := make([]byte, n)
	_, _ = rand.Read(b)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.Write(b)
		err = errors.Join(err, f.Sync(), f.Close())
	}
	if err != nil {
		os.Remove(path)
		log.Warn("store: could not make the data volume's reserve file; a start on a full volume may then fail", "path", path, "err", err)
	}
}

// outOfSpace names the data volume in the error of an embedded store
// that could not open for want of disk space, which SQLite's own error
// may not say ("disk I/O error" when it cannot make its shared-memory
// file).
func outOfSpace(cfg Config, err error) error {
	if cfg.StoreURL != "" {
		return err
	}
	free, size, ok := sqlite.VolumeSpace(cfg.DataDir)
	if !ok || (!errors.Is(err, registry.ErrStoreFull) && free >= reserveBytes(size)) {
		return err
	}
	return fmt.Errorf("the data volume of TOOLSVC_DATA_DIR %s is out of disk space (%d bytes free of %d): free space on it or grow it: %w",
		absPath(cfg.DataDir), free, size, err)
}

// dataDirOf is where the store's data is, for a log line.
func dataDirOf(cfg Config) string {
	if cfg.StoreURL != "" {
		return "PostgreSQL schema " + cfg.StoreSchema
	}
	return absPath(cfg.DataDir)
}

// registerCommitStats exports the store's group commit: how many
// transactions it ran and how many writes they held (their ratio is the
// mean group size).
func registerCommitStats(reg prometheus.Registerer, stats func() (txs, writes uint64)) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolsvc_store_commits_total",
			Help: "Transactions the store's group commit ran (each one commit, one fsync on the embedded store)."},
			func() float64 { txs, _ := stats(); return float64(txs) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "toolsvc_store_commit_writes_total",
			Help: "Writes (call records, audit entries, approvals) those transactions held."},
			func() float64 { _, writes := stats(); return float64(writes) }))
}

// newSpiller keeps cut outputs in ss (the store's spill tables), each
// operation under TOOLSVC_STORE_TIMEOUT; nil ss keeps none.
func newSpiller(cfg Config, ss registry.SpillStore, log *slog.Logger, reg prometheus.Registerer) (*registry.Spiller, error) {
	o := registry.SpillOptions{MaxBytes: cfg.SpillMaxBytes, TotalBytes: cfg.SpillTotalBytes, Retention: cfg.SpillRetention, HeadPercent: cfg.OutputHeadPercent, Logger: log}
	if cfg.SpillMaxBytes > 0 {
		if ss == nil {
			return nil, fmt.Errorf("the store cannot keep cut outputs; set TOOLSVC_SPILL_MAX_BYTES=0")
		}
		o.Store, o.Registerer = store.SpillsWithDeadline(ss, cfg.StoreTimeout), reg
	}
	return registry.NewSpiller(o), nil
}

// checkAddress checks TOOLSVC_ADDR before anything is opened: that it is
// an address, and that it is not served without credentials where
// checkExposure would refuse it once it listens. The credentials are
// TOOLSVC_API_KEY and the Caller and Issuer resources, read here (and
// built later, by build).
func checkAddress(cfg Config) error {
	addr, err := net.ResolveTCPAddr("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("TOOLSVC_ADDR: %w", err)
	}
	if cfg.APIKey != "" || isLoopback(addr) || cfg.Auth == "none" {
		return nil
	}
	var resources []*config.Resource
	if len(cfg.ConfigPaths) > 0 {
		if resources, err = configOptions(cfg).Load(cfg.ConfigPaths...); err != nil {
			return err
		}
	}
	credentials := slices.ContainsFunc(resources, func(r *config.Resource) bool {
		return r.Kind == config.KindCaller || r.Kind == config.KindIssuer
	})
	return checkExposure(addr, cfg, credentials)
}

// checkExposure refuses to serve a non-loopback address without
// credentials, unless the operator says TOOLSVC_AUTH=none.
func checkExposure(addr net.Addr, cfg Config, credentials bool) error {
	if credentials || isLoopback(addr) || cfg.Auth == "none" {
		return nil
	}
	return fmt.Errorf("refusing to serve %s (TOOLSVC_ADDR) without credentials: set TOOLSVC_API_KEY (or Caller or Issuer resources in TOOLSVC_CONFIG), bind a loopback address, or set TOOLSVC_AUTH=none", addr)
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// maxConnections is TOOLSVC_MAX_CONNECTIONS, or when it is 0 half the
// process's open-file limit (which the Go runtime has raised to its hard
// limit), leaving the other half to the store, spills, and the pipes and
// processes of running calls. Without a bound, a client holding idle
// connections took every descriptor, and calls already admitted failed
// with "too many open files".
func maxConnections(configured int) int {
	if configured > 0 {
		return configured
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 1 << 20
	}
	return max(16, int(rl.Cur/2))
}
