package mcpbridge

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Defaults of Options.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultMinBackoff     = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
	DefaultKeepAlive      = 30 * time.Second
)

// Options configure a Manager.
type Options struct {
	// Logger may be nil.
	Logger *slog.Logger
	// Propagator injects the call's trace context into requests to HTTP
	// servers and into the _meta of every tools/call; nil is W3C Trace
	// Context.
	Propagator propagation.TextMapPropagator
	// OnChange is called, from the manager's own goroutine and never
	// concurrently with itself, after the tools of a server changed: a
	// list_changed notification, a reconnection that lists other tools, or
	// the first connection of a server that was unreachable at start.
	OnChange func()
	// ConnectTimeout bounds one connection attempt (connect and list).
	ConnectTimeout time.Duration
	// MinBackoff and MaxBackoff bound the wait between attempts, which
	// doubles after each failure.
	MinBackoff, MaxBackoff time.Duration
	// KeepAlive is the interval of pings that detect a dead server; a
	// negative value disables them.
	KeepAlive time.Duration
	// Transport carries requests to HTTP servers; nil uses a new one with
	// no proxy from the environment.
	Transport http.RoundTripper
	// Version is reported to servers as the client's version.
	Version string
	// Launcher, when set, is the binary (toolsvc-sandbox, or toolsvc
	// itself) that starts each stdio server under a reaper of its own, so
	// that nothing the server starts outlives it, a setsid'd daemon
	// included (see sandbox.Reaped). Without it only the server's process
	// group is killed.
	Launcher string
}

// Manager keeps the connections to MCP servers. It is safe for
// concurrent use.
type Manager struct {
	o       Options
	log     *slog.Logger
	changed chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu    sync.Mutex
	conns map[string]*conn // by Server.key
}

// NewManager returns a manager with no connections; Close stops it.
func NewManager(o Options) *Manager {
	o.ConnectTimeout = cmp.Or(o.ConnectTimeout, DefaultConnectTimeout)
	o.MinBackoff = cmp.Or(o.MinBackoff, DefaultMinBackoff)
	o.MaxBackoff = max(cmp.Or(o.MaxBackoff, DefaultMaxBackoff), o.MinBackoff)
	if o.KeepAlive == 0 {
		o.KeepAlive = DefaultKeepAlive
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	if o.Transport == nil {
		o.Transport = &http.Transport{Proxy: nil, ForceAttemptHTTP2: true, MaxIdleConns: 32, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
	}
	m := &Manager{o: o, log: o.Logger, changed: make(chan struct{}, 1), conns: map[string]*conn{}}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.wg.Go(m.notify)
	return m
}

// notify calls OnChange once per burst of changes.
func (m *Manager) notify() {
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.changed:
			if m.o.OnChange != nil {
				m.o.OnChange()
			}
		}
	}
}

func (m *Manager) signalChange() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// Set is the servers of one configuration, each with its connection.
type Set struct {
	entries []entry
}

type entry struct {
	srv  *Server
	conn *conn
}

// Servers returns the names of the set's servers.
func (s *Set) Servers() []string {
	if s == nil {
		return nil
	}
	names := make([]string, len(s.entries))
	for i, e := range s.entries {
		names[i] = e.srv.name
	}
	return names
}

// Ensure connects the servers that have no connection yet, reuses the
// connections of the others, and returns the set. It waits until every
// new server's first attempt has succeeded or failed (each attempt is
// bounded by ConnectTimeout), or ctx ends; servers not reached keep
// trying in the background. Connections that the set does not use stay
// open until Retain is called with the set that is finally in use.
func (m *Manager) Ensure(ctx context.Context, servers []*Server) *Set {
	set := &Set{}
	var fresh []*conn
	refiltered := map[*conn]int{}
	m.mu.Lock()
	for _, s := range servers {
		c, ok := m.conns[s.key]
		if !ok {
			c = newConn(m, s)
			m.conns[s.key] = c
			fresh = append(fresh, c)
			m.wg.Go(c.run)
		} else if gen := c.setFilter(filterOf(&s.spec)); gen > 0 {
			// Listings keep only the tools the filter picks: one that
			// picks others is listed again.
			refiltered[c] = gen
		}
		set.entries = append(set.entries, entry{srv: s, conn: c})
	}
	m.mu.Unlock()
	for _, c := range fresh {
		select {
		case <-c.first:
		case <-ctx.Done():
			return set
		}
	}
	for c, gen := range refiltered {
		c.listedWith(ctx, gen)
	}
	return set
}

// Retain closes every connection the set does not use, once the calls
// running on it have finished.
func (m *Manager) Retain(set *Set) {
	keep := map[*conn]bool{}
	if set != nil {
		for _, e := range set.entries {
			keep[e.conn] = true
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for key, c := range m.conns {
		if keep[c] {
			continue
		}
		delete(m.conns, key)
		m.log.Info("mcp: closing server connection", "server", c.srv.name)
		m.wg.Go(c.retire)
	}
}

// Tools returns the registry tools of the set's servers from their latest
// listings, freshly made (registry.New takes ownership of what it gets).
// Tools that the registry would refuse (a name that cannot be made valid,
// an invalid schema) are left out and logged.
func (m *Manager) Tools(set *Set) []*registry.Tool {
	if set == nil {
		return nil
	}
	var out []*registry.Tool
	for _, e := range set.entries {
		out = append(out, e.conn.registryTools(e.srv)...)
	}
	return out
}

// Status is the state of one server's connection.
type Status struct {
	// State is "connecting", "connected", "reconnecting" (it was
	// connected and is being reached again) or "unreachable" (never
	// reached since it was configured).
	State     string `json:"state"`
	Transport string `json:"transport"`
	// Tools is the number of the server's tools that include and exclude
	// keep (before tools are left out for their schemas or names).
	Tools int `json:"tools"`
	// Error says why the server is not connected.
	Error string `json:"error,omitempty"`
	// Since is when the state began.
	Since time.Time `json:"since"`
}

// Status returns the state of every server, by name.
func (m *Manager) Status() map[string]Status {
	m.mu.Lock()
	conns := slices.Collect(maps.Values(m.conns))
	m.mu.Unlock()
	out := make(map[string]Status, len(conns))
	for _, c := range conns {
		out[c.srv.name] = c.status()
	}
	return out
}

// Readiness returns a value whose JSON is the current Status of every
// server, for readiness details.
func (m *Manager) Readiness() json.Marshaler { return readiness{m} }

type readiness struct{ m *Manager }

func (r readiness) MarshalJSON() ([]byte, error) { return json.Marshal(r.m.Status()) }

// Close closes every connection and stops the manager.
func (m *Manager) Close() {
	m.mu.Lock()
	conns := slices.Collect(maps.Values(m.conns))
	clear(m.conns)
	m.mu.Unlock()
	for _, c := range conns {
		c.cancel()
	}
	m.cancel()
	m.wg.Wait()
}
