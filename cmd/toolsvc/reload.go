package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/config"
	toolhttp "github.com/toolsvc/toolsvc/internal/http"
	"github.com/toolsvc/toolsvc/internal/notify"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/custom"
	"github.com/toolsvc/toolsvc/internal/tools/mcpbridge"
	"github.com/toolsvc/toolsvc/internal/tools/plan"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// buildCustom reads the Tool and MCPServer resources into a: custom tools
// join the built-in ones in a.static, and MCP servers are connected (or
// kept connected) through mcp; with mcp nil they are only checked.
func buildCustom(a *app, cfg Config, log *slog.Logger, resources []*config.Resource, builtins []*registry.Tool, ws *workspace.Workspace, mcp *mcpbridge.Manager) error {
	a.static = builtins
	// Resource names are tool-name prefixes: an MCP server must not share
	// one with a built-in tool or a Tool resource, or a tool it lists
	// later could collide with theirs.
	prefixes := map[string]string{}
	for _, t := range builtins {
		p, _, _ := registry.SplitName(t.Name)
		prefixes[p] = "a built-in tool"
	}
	var servers []*mcpbridge.Server
	for _, r := range resources {
		switch r.Kind {
		case config.KindTool:
			tools, err := custom.Tools(r, custom.Options{
				Workspace: ws, Sandbox: a.sandbox, ProcessConcurrency: cfg.processConcurrency(), LookupEnv: cfg.lookupEnv, UserAgent: "toolsvc/" + version, Logger: log,
			})
			if errors.Is(err, sandbox.ErrUnavailable) {
				log.Warn("exec tool not served", "resource", r.Metadata.Name, "source", r.Source(), "reason", err.Error())
				continue
			}
			if err != nil {
				return err
			}
			if prev, ok := prefixes[r.Metadata.Name]; ok && prev != "a built-in tool" {
				return r.Errorf("the name %s is also used by %s", r.Metadata.Name, prev)
			}
			prefixes[r.Metadata.Name] = "the resource at " + r.Source()
			for _, t := range tools {
				if err := toolhttp.CheckMCPTool(t); err != nil {
					return r.Errorf("tool %s cannot be served over /mcp: %v", t.Name, err)
				}
			}
			a.static = append(a.static, tools...)
		case config.KindMCPServer:
			s, err := mcpbridge.Decode(r, cfg.lookupEnv)
			if err != nil {
				return err
			}
			if prev, ok := prefixes[s.Name()]; ok {
				return r.Errorf("the name %s is also used by %s; give the server another name", s.Name(), prev)
			}
			prefixes[s.Name()] = "the resource at " + r.Source()
			servers = append(servers, s)
		}
	}
	a.mcpServers = len(servers)
	if mcp != nil {
		ctx, cancel := context.WithTimeout(context.Background(), cfg.MCPConnectTimeout+time.Second)
		defer cancel()
		a.mcp = mcp.Ensure(ctx, servers)
	}
	return nil
}

// rebuild makes a registry of a's static tools and the current tools of
// its MCP servers.
func (a *app) rebuild(mcp *mcpbridge.Manager) (*registry.Registry, error) {
	tools := make([]*registry.Tool, 0, len(a.static))
	for _, t := range a.static {
		c := *t
		tools = append(tools, &c)
	}
	if mcp != nil {
		tools = append(tools, mcp.Tools(a.mcp)...)
	}
	return registry.New(a.defaults, tools...)
}

// mcpNote says what validate did not check.
func (a *app) mcpNote() string {
	if a.mcpServers == 0 {
		return ""
	}
	return fmt.Sprintf(" and %d MCP servers (not contacted)", a.mcpServers)
}

// newMCPManager keeps the MCP connections of a serving process; a change
// of their tools is signalled on changed.
func newMCPManager(cfg Config, log *slog.Logger, changed chan<- struct{}) *mcpbridge.Manager {
	// stdio servers run under a reaper of their own, started from the
	// launcher or, without one, from this binary.
	launcher := ""
	if self, err := os.Executable(); err == nil {
		launcher = cmp.Or(sandboxLauncher(cfg, self), self)
	} else {
		log.Warn("mcp: stdio servers run without a reaper: what they start may outlive them", "error", err)
	}
	return mcpbridge.NewManager(mcpbridge.Options{
		Logger:         log,
		ConnectTimeout: cfg.MCPConnectTimeout,
		Version:        version,
		Launcher:       launcher,
		OnChange: func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
}

// reloader swaps in new configurations while the service runs. A reload
// re-reads every resource and rebuilds the registry, policy and callers,
// then swaps them in (registry.Executor.Load swaps registry and policy at
// once): calls in flight finish with the definitions they started with. A configuration that does not
// build is logged and counted, and the running one stays.
type reloader struct {
	cfg     Config
	log     *slog.Logger
	exec    *registry.Executor
	callers *liveAuth // nil when the service runs without credentials
	tls     *tlsFiles // nil without TLS
	mcp     *mcpbridge.Manager
	reloads *prometheus.CounterVec
	// notifier takes the reloaded Notifier resources; nil takes none.
	notifier *notify.Dispatcher
	// planLimit holds a reloaded plan__execute's steps to the callers'
	// rate limits.
	planLimit plan.Limit

	mu  sync.Mutex
	cur *app
}

func newReloader(cfg Config, log *slog.Logger, exec *registry.Executor, callers *liveAuth, mcp *mcpbridge.Manager, reg prometheus.Registerer, cur *app) *reloader {
	r := &reloader{cfg: cfg, log: log, exec: exec, callers: callers, mcp: mcp, cur: cur,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_config_reloads_total",
			Help: "Configuration reloads (SIGHUP or file changes), by result: ok, or error (the running configuration was kept).",
		}, []string{"result"})}
	reg.MustRegister(r.reloads)
	r.reloads.WithLabelValues("ok")
	r.reloads.WithLabelValues("error")
	return r
}

// Reload re-reads the configuration and swaps it in; on error the running
// configuration stays and the error is returned (and logged and counted).
func (r *reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tls != nil {
		// The certificate is reloaded whatever becomes of the resources.
		_ = r.tls.reload()
	}
	a, err := build(r.cfg, r.log, r.mcp, r.cur.workers)
	if err == nil && (a.auth == nil) != (r.callers == nil) {
		// The server decided at start whether requests are authenticated.
		err = fmt.Errorf("the reloaded configuration turns authentication %s; that needs a restart", map[bool]string{true: "on", false: "off"}[a.auth != nil])
	}
	if err != nil {
		// Close what the failed build connected; keep what runs.
		r.mcp.Retain(r.cur.mcp)
		r.reloads.WithLabelValues("error").Inc()
		r.log.Error("configuration reload failed; the running configuration stays", "error", err)
		return err
	}
	a.bind(r.exec, r.planLimit)
	r.exec.Load(a.registry, a.policy)
	if r.callers != nil {
		r.callers.swap(a)
	}
	r.mcp.Retain(a.mcp)
	if r.notifier != nil {
		r.notifier.Load(a.notifiers)
	}
	r.cur = a
	r.reloads.WithLabelValues("ok").Inc()
	r.log.Info("configuration reloaded", "tools", a.registry.Len(), "mcpServers", a.mcpServers)
	return nil
}

// refresh rebuilds the registry of the running configuration with the
// MCP servers' current tools.
func (r *reloader) refresh() {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, err := r.cur.rebuild(r.mcp)
	if err != nil {
		r.log.Error("the MCP servers' tools changed, but the catalog could not be rebuilt; it stays as it was", "error", err)
		return
	}
	r.cur.registry = reg
	r.exec.Load(reg, r.cur.policy)
	r.log.Info("MCP tools changed; catalog rebuilt", "tools", reg.Len())
}

// liveAuth is the identity of a serving process; a reload swaps in the
// callers and issuers it read (keeping the issuers' cached keys).
type liveAuth struct {
	p   atomic.Pointer[toolhttp.TokenIdentity]
	log *slog.Logger
}

func newLiveAuth(a *app, log *slog.Logger) *liveAuth {
	l := &liveAuth{log: log}
	l.p.Store(newIdentity(a, log, nil))
	return l
}

// swap installs the identity of a reloaded configuration.
func (l *liveAuth) swap(a *app) { l.p.Store(newIdentity(a, l.log, l.p.Load())) }

// Token implements toolhttp.Identity.
func (l *liveAuth) Token(ctx context.Context, token string) (*registry.Caller, error) {
	return l.p.Load().Token(ctx, token)
}

// Certificate implements toolhttp.Identity.
func (l *liveAuth) Certificate(cert *x509.Certificate) (*registry.Caller, bool) {
	return l.p.Load().Certificate(cert)
}

// Challenge implements toolhttp.Identity.
func (l *liveAuth) Challenge() string { return l.p.Load().Challenge() }

// start runs the reloader in the background; the function it returns
// stops it and waits until no reload runs any more.
func (r *reloader) start(ctx context.Context, hup <-chan os.Signal, mcpChanged <-chan struct{}) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.run(ctx, hup, mcpChanged)
	}()
	return func() {
		cancel()
		<-done
	}
}

// run reloads on SIGHUP and, with TOOLSVC_WATCH, when the configuration
// files change, and rebuilds the catalog when MCP tools change, until ctx
// ends.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal, mcpChanged <-chan struct{}) {
	var changed <-chan struct{}
	if r.cfg.Watch && len(r.cfg.ConfigPaths) > 0 {
		w, err := newWatcher(r.cfg.ConfigPaths, r.log)
		if err != nil {
			r.log.Error("TOOLSVC_WATCH: cannot watch the configuration; reload with SIGHUP", "error", err)
		} else {
			defer w.close()
			changed = w.changed
			r.log.Info("watching the configuration for changes", "paths", strings.Join(r.cfg.ConfigPaths, ","))
		}
	}
	// A catalog rebuilt for the MCP servers' tools waits after each
	// rebuild twice as long as it took (a second at least) before the next:
	// a server that changes its tools without pause costs a share of the
	// CPU, not all of it. Changes meanwhile come to one rebuild.
	var (
		pacing  <-chan time.Time
		pending bool
	)
	refresh := func() {
		start := time.Now()
		r.refresh()
		pacing = time.After(max(time.Second, 2*time.Since(start)))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.log.Info("SIGHUP: reloading the configuration")
			_ = r.Reload()
		case <-changed:
			r.log.Info("configuration files changed: reloading")
			_ = r.Reload()
		case <-mcpChanged:
			if pacing != nil {
				pending = true
				continue
			}
			refresh()
		case <-pacing:
			pacing = nil
			if pending {
				pending = false
				refresh()
			}
		}
	}
}

// watchDebounce lets an editor or a deployment finish writing before the
// configuration is read.
const watchDebounce = 300 * time.Millisecond

// watcher reports changes of configuration files. It watches directories
// (a file's own directory, since editors and Kubernetes replace files by
// renaming), and signals changed once per burst of events.
type watcher struct {
	w       *fsnotify.Watcher
	changed chan struct{}
	done    chan struct{}
	log     *slog.Logger
	files   map[string]bool // watched files, by absolute path
	dirs    map[string]bool // watched configuration directories (recursively)
}

func newWatcher(paths []string, log *slog.Logger) (*watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &watcher{w: fw, changed: make(chan struct{}, 1), done: make(chan struct{}), log: log, files: map[string]bool{}, dirs: map[string]bool{}}
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			fw.Close()
			return nil, err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			fw.Close()
			return nil, err
		}
		if fi.IsDir() {
			w.dirs[abs] = true
			err = w.addTree(abs)
		} else {
			w.files[abs] = true
			err = fw.Add(filepath.Dir(abs))
		}
		if err != nil {
			fw.Close()
			return nil, err
		}
	}
	go w.loop()
	return w, nil
}

func (w *watcher) addTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return w.w.Add(p)
		}
		return nil
	})
}

// relevant says whether an event may change the configuration: any change
// in a configuration directory, and changes of a watched file's name (or
// of "..data", which Kubernetes swaps to update mounted files).
func (w *watcher) relevant(name string) bool {
	if w.files[name] || strings.HasPrefix(filepath.Base(name), "..data") {
		return true
	}
	for d := range w.dirs {
		if name == d || strings.HasPrefix(name, d+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

func (w *watcher) loop() {
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-w.done:
			if timer != nil {
				timer.Stop()
			}
			return
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if !w.relevant(ev.Name) {
				continue
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Stat(ev.Name); err == nil && fi.IsDir() {
					_ = w.addTree(ev.Name) // a new sub-directory of resources
				}
			}
			if timer == nil {
				timer = time.NewTimer(watchDebounce)
			} else {
				timer.Reset(watchDebounce)
			}
			fire = timer.C
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			w.log.Warn("watching the configuration", "error", err)
		case <-fire:
			fire = nil
			select {
			case w.changed <- struct{}{}:
			default:
			}
		}
	}
}

func (w *watcher) close() {
	close(w.done)
	w.w.Close()
}
