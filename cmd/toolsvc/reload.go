package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
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

	// reloading lets one reload run at a time. It is held while the files
	// are read, which may take long (a slow volume), so nothing else waits
	// on it: SIGHUP and the watcher go through run, which queues them.
	reloading sync.Mutex
	// files counts the resources of each configuration file of the
	// running configuration (held with reloading).
	files map[string]int

	mu  sync.Mutex
	cur *app
	// stopped is set when the service begins to stop: a reload that ends
	// after it applies nothing.
	stopped bool
}

func newReloader(cfg Config, log *slog.Logger, exec *registry.Executor, callers *liveAuth, mcp *mcpbridge.Manager, reg prometheus.Registerer, cur *app) *reloader {
	r := &reloader{cfg: cfg, log: log, exec: exec, callers: callers, mcp: mcp, cur: cur, files: countResources(cfg.ConfigPaths),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolsvc_config_reloads_total",
			Help: "Configuration reloads (SIGHUP or file changes), by result: ok, or error (the running configuration was kept).",
		}, []string{"result"})}
	reg.MustRegister(r.reloads)
	r.reloads.WithLabelValues("ok")
	r.reloads.WithLabelValues("error")
	return r
}

// errStopping is what a reload that ended after the service began to stop
// returns.
var errStopping = errors.New("the service is stopping: the reloaded configuration was not applied")

// Reload re-reads the configuration and swaps it in; on error the running
// configuration stays and the error is returned (and logged and counted).
func (r *reloader) Reload() error {
	r.reloading.Lock()
	defer r.reloading.Unlock()
	if r.tls != nil {
		// The certificate is reloaded whatever becomes of the resources.
		_ = r.tls.reload()
	}
	r.mu.Lock()
	workers := r.cur.workers
	r.mu.Unlock()
	// The files are read without r.mu: a read that hangs must not hold up
	// the catalog's MCP rebuilds, nor the service's stop.
	files := countResources(r.cfg.ConfigPaths)
	err := r.emptied(files)
	var a *app
	if err == nil {
		a, err = build(r.cfg, r.log, r.mcp, workers)
	}
	if err == nil && (a.auth == nil) != (r.callers == nil) {
		// The server decided at start whether requests are authenticated.
		err = fmt.Errorf("the reloaded configuration turns authentication %s; that needs a restart", map[bool]string{true: "on", false: "off"}[a.auth != nil])
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		r.mcp.Retain(r.cur.mcp) // close what this build connected
		r.log.Warn("a configuration reload ended after the service began to stop; it was not applied")
		return errStopping
	}
	if err != nil {
		// Close what the failed build connected; keep what runs.
		r.mcp.Retain(r.cur.mcp)
		r.reloads.WithLabelValues("error").Inc()
		var e *emptiedFile
		if errors.As(err, &e) {
			r.log.Warn("configuration reload refused; the running configuration stays", "file", e.file, "error", err)
		} else {
			r.log.Error("configuration reload failed; the running configuration stays", "error", err)
		}
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
	r.files = files
	r.reloads.WithLabelValues("ok").Inc()
	r.log.Info("configuration reloaded", "tools", a.registry.Len(), "mcpServers", a.mcpServers)
	return nil
}

// emptiedFile is the refusal of a configuration in which a file that held
// resources holds none: far more often a file caught half-written (an
// editor or a copy that truncates first) than a wish to drop its rules,
// which deleting the file says plainly.
type emptiedFile struct {
	file string
	had  int
}

func (e *emptiedFile) Error() string {
	held := fmt.Sprintf("%d resources", e.had)
	if e.had == 1 {
		held = "1 resource"
	}
	return fmt.Sprintf("%s held %s and now holds none (it is empty, or only comments), so it may be half-written: "+
		"write configuration files by renaming a complete file into place, and delete a file to remove its resources", e.file, held)
}

// emptied refuses files, the resources of each file now, when a file of
// the running configuration that held resources is there and holds none.
func (r *reloader) emptied(files map[string]int) error {
	for _, f := range slices.Sorted(maps.Keys(r.files)) {
		if n, ok := files[f]; ok && n == 0 && r.files[f] > 0 {
			return &emptiedFile{file: f, had: r.files[f]}
		}
	}
	return nil
}

// countResources returns the number of resources in each configuration
// file under paths (the files config.Load reads); a file that cannot be
// read or parsed is left out (building the configuration says why).
func countResources(paths []string) map[string]int {
	out := map[string]int{}
	for _, f := range configFiles(paths) {
		data, err := config.ReadFile(f)
		if err != nil {
			continue
		}
		if rs, err := config.Parse(f, data); err == nil {
			out[f] = len(rs)
		}
	}
	return out
}

// configFiles lists the files config.Load reads from paths: each named
// file, and the *.yaml and *.yml files under each directory, hidden
// entries skipped.
func configFiles(paths []string) []string {
	var out []string
	for _, p := range paths {
		files, _ := config.Files(p) // one gone since is read as no file
		out = append(out, files...)
	}
	return out
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

// stopWait bounds how long stopping waits for a reload in progress, so
// that one ending about then closes what it connected. One that takes
// longer (a file whose read never ends) is left behind: the process is
// ending, and it applies nothing.
const stopWait = 2 * time.Second

// start runs the reloader in the background; the function it returns
// stops it: no reload is applied after it returns, and it waits at most
// stopWait for one in progress.
func (r *reloader) start(ctx context.Context, hup <-chan os.Signal, mcpChanged <-chan struct{}) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var inProgress <-chan struct{}
	go func() {
		defer close(done)
		inProgress = r.run(ctx, hup, mcpChanged)
	}()
	return func() {
		cancel()
		<-done
		if inProgress == nil {
			return
		}
		select {
		case <-inProgress:
		case <-time.After(stopWait):
			r.log.Warn("stopping with a configuration reload still reading its files; it is not applied")
		}
	}
}

// run reloads on SIGHUP and, with TOOLSVC_WATCH, when the configuration
// files change, and rebuilds the catalog when MCP tools change, until ctx
// ends; then no reload is applied any more, and run returns a channel
// closed when the reload in progress (if any; else nil) returns.
//
// A reload runs beside run, so that a slow one holds up neither the stop
// nor the MCP rebuilds. What asks for a reload while one runs is logged
// and comes to one more reload after it: that one reads what changed
// meanwhile.
func (r *reloader) run(ctx context.Context, hup <-chan os.Signal, mcpChanged <-chan struct{}) <-chan struct{} {
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
	var (
		running   chan struct{} // closed when the reload in progress returns; nil: none runs
		startedAt time.Time
		again     bool // a reload was asked for while one ran
	)
	reload := func(why string) {
		if running != nil {
			again = true
			r.log.Warn(why+" while a configuration reload is running; another reload follows when it ends",
				"runningFor", time.Since(startedAt).Round(time.Millisecond).String())
			return
		}
		r.log.Info(why + ": reloading the configuration")
		running, startedAt = make(chan struct{}), time.Now()
		go func(done chan struct{}) {
			defer close(done)
			_ = r.Reload()
		}(running)
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
			r.mu.Lock()
			r.stopped = true
			r.mu.Unlock()
			return running
		case <-hup:
			reload("SIGHUP")
		case <-changed:
			reload("configuration files changed")
		case <-running:
			running = nil
			if again {
				again = false
				reload("changes came during the last reload")
			}
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
// configuration is read: the watcher reads the changed files once no event
// came for this long, and again after as long, until two reads agree.
const watchDebounce = 300 * time.Millisecond

// watchReads bounds the reads of one burst of changes: files still
// changing after that many are reloaded as they are (the reload refuses a
// file it cannot parse, or one emptied).
const watchReads = 10

// watchPoll is how often a configuration directory that was removed is
// looked for.
const watchPoll = 500 * time.Millisecond

// watcher reports changes of configuration files: the files named in
// TOOLSVC_CONFIG and the *.yaml and *.yml files under its directories
// (other files there, such as a workspace's, change nothing). It watches
// directories (a file's own directory, since editors and Kubernetes
// replace files by renaming), and signals changed once per burst of
// events, when the changed files read the same twice in a row. A watched
// directory that is removed (a deployment that replaces the whole
// directory) is polled for until it is back, then watched again.
type watcher struct {
	w       *fsnotify.Watcher
	changed chan struct{}
	done    chan struct{}
	log     *slog.Logger
	files   map[string]bool // named files, by absolute path
	dirs    map[string]bool // configuration directories (recursively)
	roots   map[string]bool // the directories watched at the top: dirs, and named files' directories
	gone    map[string]bool // roots that were removed, polled for
	known   map[string]bool // configuration files seen under dirs, so the removal of a directory tells whether it held any

	// The burst of changes being read: the files it changed, and their
	// contents at the last read (nil before the first).
	burst map[string]bool
	last  map[string]string
	reads int
}

func newWatcher(paths []string, log *slog.Logger) (*watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &watcher{w: fw, changed: make(chan struct{}, 1), done: make(chan struct{}), log: log,
		files: map[string]bool{}, dirs: map[string]bool{}, roots: map[string]bool{}, gone: map[string]bool{}, known: map[string]bool{}, burst: map[string]bool{}}
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
			w.roots[abs] = true
		} else {
			w.files[abs] = true
			w.roots[filepath.Dir(abs)] = true
		}
	}
	for root := range w.roots {
		if _, err := w.watch(root); err != nil {
			fw.Close()
			return nil, err
		}
	}
	go w.loop()
	return w, nil
}

// watch adds the watches of a root, and returns the configuration files
// it holds.
func (w *watcher) watch(root string) ([]string, error) {
	if w.dirs[root] {
		return w.addTree(root)
	}
	if err := w.w.Add(root); err != nil {
		return nil, err
	}
	var found []string
	for f := range w.files {
		if filepath.Dir(f) == root {
			found = append(found, f)
		}
	}
	return found, nil
}

// addTree watches dir and the directories under it, hidden ones left out
// as config.Load leaves them out, and returns the configuration files it
// holds.
func (w *watcher) addTree(dir string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return w.w.Add(p)
		}
		if config.IsYAML(p) {
			w.known[p] = true
			found = append(found, p)
		}
		return nil
	})
	return found, err
}

// configDir returns the configuration directory name is under, and
// whether it is a configuration file or directory there (no hidden
// component).
func (w *watcher) configDir(name string) (string, bool) {
	for d := range w.dirs {
		rel, err := filepath.Rel(d, name)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue
		}
		for _, part := range strings.Split(rel, string(filepath.Separator)) {
			if strings.HasPrefix(part, ".") {
				return d, false
			}
		}
		return d, true
	}
	return "", false
}

// changedBy returns the configuration files an event may have changed:
// the file it names; for a directory created, the files it holds; for one
// removed or renamed, those it held; for Kubernetes' "..data" link (whose
// swap updates every file of a mounted volume), every file of its
// directory. Events of other files change nothing.
func (w *watcher) changedBy(ev fsnotify.Event) []string {
	name := ev.Name
	if strings.HasPrefix(filepath.Base(name), "..data") {
		dir := filepath.Dir(name)
		var out []string
		for f := range w.files {
			if filepath.Dir(f) == dir {
				out = append(out, f)
			}
		}
		for f := range w.known {
			if strings.HasPrefix(f, dir+string(filepath.Separator)) {
				out = append(out, f)
			}
		}
		return out
	}
	if w.files[name] {
		return []string{name}
	}
	if _, ok := w.configDir(name); !ok {
		return nil
	}
	if ev.Has(fsnotify.Create) {
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			found, _ := w.addTree(name) // a new directory of resources
			return found
		}
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		var out []string
		for f := range w.known {
			if f == name || strings.HasPrefix(f, name+string(filepath.Separator)) {
				delete(w.known, f)
				out = append(out, f)
			}
		}
		if len(out) > 0 || !config.IsYAML(name) {
			return out
		}
	}
	if config.IsYAML(name) {
		if !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename) {
			w.known[name] = true
		}
		return []string{name}
	}
	return nil
}

// lost handles the removal of a root: its watches went with it (and a
// renamed one's would report the wrong names), so they are dropped, and
// the root is polled for. The running configuration stays meanwhile: a
// reload could only fail.
func (w *watcher) lost(root string) {
	for _, p := range w.w.WatchList() {
		if p == root || strings.HasPrefix(p, root+string(filepath.Separator)) {
			_ = w.w.Remove(p)
		}
	}
	for f := range w.known {
		if strings.HasPrefix(f, root+string(filepath.Separator)) {
			delete(w.known, f)
			w.burst[f] = true // read again when the directory is back
		}
	}
	w.gone[root] = true
	w.log.Warn("TOOLSVC_WATCH: a configuration directory is gone; the running configuration stays until the directory is back with its files", "dir", root)
}

// poll watches again the roots that are back, adds the configuration
// files they hold to the burst, and says whether any came back. A root is
// back when it holds its files again: a directory made again, its files
// not yet copied in, would reload as a configuration without them.
func (w *watcher) poll() bool {
	back := false
	for root := range w.gone {
		if fi, err := os.Stat(root); err != nil || !fi.IsDir() || !w.filled(root) {
			continue
		}
		files, err := w.watch(root)
		if err != nil {
			continue // removed again meanwhile: a later poll sees
		}
		delete(w.gone, root)
		for _, f := range files {
			w.burst[f] = true
		}
		back = true
		w.log.Info("TOOLSVC_WATCH: the configuration directory is back; watching it again", "dir", root)
	}
	return back
}

// filled says whether root holds configuration files again: a
// configuration directory one at least, a named file's directory that
// file.
func (w *watcher) filled(root string) bool {
	if w.dirs[root] && len(configFiles([]string{root})) == 0 {
		return false
	}
	for f := range w.files {
		if _, err := os.Stat(f); filepath.Dir(f) == root && err != nil {
			return false
		}
	}
	return true
}

// read returns what the burst's files hold now: a digest of each one's
// bytes, or why it could not be read.
func (w *watcher) read() map[string]string {
	out := make(map[string]string, len(w.burst))
	for f := range w.burst {
		data, err := config.ReadFile(f)
		if err != nil {
			out[f] = "error: " + err.Error()
			continue
		}
		sum := sha256.Sum256(data)
		out[f] = string(sum[:])
	}
	return out
}

func (w *watcher) loop() {
	timer := time.NewTimer(watchDebounce)
	timer.Stop()
	defer timer.Stop()
	var fire, polling <-chan time.Time
	var ticker *time.Ticker
	// wait (re)starts the quiet period before the burst's files are read.
	wait := func() {
		timer.Reset(watchDebounce)
		fire = timer.C
	}
	for {
		select {
		case <-w.done:
			if ticker != nil {
				ticker.Stop()
			}
			return
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			if w.roots[ev.Name] && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
				w.lost(ev.Name)
				if w.poll() { // back already (rm -rf dir; mkdir dir)
					wait()
				} else if ticker == nil {
					ticker = time.NewTicker(watchPoll)
					polling = ticker.C
				}
				continue
			}
			if files := w.changedBy(ev); len(files) > 0 {
				for _, f := range files {
					w.burst[f] = true
				}
				wait()
			}
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			w.log.Warn("watching the configuration", "error", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: any file may have changed.
				for root := range w.roots {
					if files, err := w.watch(root); err == nil {
						for _, f := range files {
							w.burst[f] = true
						}
					}
				}
				wait()
			}
		case <-polling:
			if w.poll() {
				wait()
			}
			if len(w.gone) == 0 {
				ticker.Stop()
				ticker, polling = nil, nil
			}
		case <-fire:
			fire = nil
			if len(w.gone) > 0 {
				continue // the directory's return starts the quiet period again
			}
			now := w.read()
			if !maps.Equal(now, w.last) && w.reads < watchReads {
				// Changed since the last read (or not read yet): read again
				// after a quiet period, so that a file being written is
				// not reloaded half-written.
				w.last = now
				w.reads++
				w.log.Debug("TOOLSVC_WATCH: configuration files changed since the last read; reading them again after a quiet period",
					"files", strings.Join(slices.Sorted(maps.Keys(w.burst)), ","), "reads", w.reads)
				wait()
				continue
			}
			if !maps.Equal(now, w.last) {
				w.log.Warn("TOOLSVC_WATCH: configuration files still changing; reloading what they hold now",
					"reads", w.reads, "files", strings.Join(slices.Sorted(maps.Keys(w.burst)), ","))
			}
			clear(w.burst)
			w.last, w.reads = nil, 0
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
