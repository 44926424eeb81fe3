package mcpbridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/time/rate"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// The states of a connection.
const (
	stateConnecting   = "connecting"
	stateConnected    = "connected"
	stateReconnecting = "reconnecting"
	stateUnreachable  = "unreachable"
)

// conn is the connection to one server, kept up by its run loop.
type conn struct {
	m      *Manager
	srv    *Server // the transport settings (what the key covers)
	ctx    context.Context
	cancel context.CancelFunc
	// first is closed when the first attempt has succeeded or failed.
	first     chan struct{}
	firstOnce sync.Once
	// refresh asks the loop to list the tools again; broken tells it a
	// call found the connection dead.
	refresh chan struct{}
	broken  chan struct{}
	done    chan struct{}

	mu        sync.Mutex
	session   *mcp.ClientSession
	stream    *stream     // the session's, over stdio; nil over HTTP
	tools     []*mcp.Tool // the latest listing, sorted by name
	toolsHash string
	state     string
	err       error
	since     time.Time
	everUp    bool
	retired   bool
	calls     sync.WaitGroup
	// renamed holds the name mappings of the latest listing, already logged.
	renamed map[string]string
	// cutsLogged names the listing and bound whose cut descriptions were
	// logged last.
	cutsLogged string
	// reconnecting says that a live session was lost and the attempt to
	// make it again has not ended yet; retryAt is when that attempt
	// starts (zero: not yet known).
	reconnecting bool
	retryAt      time.Time
	// lostWhy is why the latest live session was lost.
	lostWhy error
	// changed is closed, and replaced, whenever the session, the state or
	// retryAt changes: calls that wait for a session made again watch it.
	changed chan struct{}
	// filter picks the tools a listing keeps: the include and exclude of
	// the latest configuration that uses the connection. filterGen counts
	// its changes; listedGen is the filterGen of the latest listing.
	filter               filter
	filterGen, listedGen int
	// refilter asks the loop to list the tools again at once, with a new
	// filter.
	refilter chan struct{}
}

func newConn(m *Manager, s *Server) *conn {
	c := &conn{m: m, srv: s, first: make(chan struct{}), refresh: make(chan struct{}, 1),
		broken: make(chan struct{}, 1), refilter: make(chan struct{}, 1), done: make(chan struct{}),
		state: stateConnecting, since: time.Now(), changed: make(chan struct{}), filter: filterOf(&s.spec)}
	c.ctx, c.cancel = context.WithCancel(m.ctx)
	return c
}

// notify wakes the calls waiting for a change; c.mu is held.
func (c *conn) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *conn) markFirst() { c.firstOnce.Do(func() { close(c.first) }) }

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// run keeps the connection up until the conn is cancelled.
func (c *conn) run() {
	defer close(c.done)
	defer c.markFirst()
	backoff := c.m.o.MinBackoff
	for c.ctx.Err() == nil {
		cs, st, cleanup, err := c.connect()
		if err == nil {
			c.markFirst()
			up := time.Now()
			err := c.serve(cs, st, cleanup)
			// Only a session that lasted resets the backoff: one lost
			// soon after it was made is an attempt that failed. A server
			// that exits once it has listed its tools was otherwise
			// started again twice a second for as long as it was
			// configured (48 times in 30 s), each time logged twice.
			if time.Since(up) >= c.m.o.MaxBackoff {
				backoff = c.m.o.MinBackoff
			}
			if err != nil && c.ctx.Err() == nil {
				c.m.log.Warn("mcp: connection lost; reconnecting", "server", c.srv.name, "error", err, "retryIn", backoff.String())
			}
		} else {
			if c.ctx.Err() == nil {
				err = c.redactedError(err)
				c.setDown(err)
				c.m.log.Warn("mcp: server not reachable; retrying", "server", c.srv.name, "endpoint", c.srv.describe(), "error", err, "retryIn", backoff.String())
			}
			// Only now: Ensure, woken by the first attempt, reads its state.
			c.markFirst()
		}
		// Full jitter around the backoff keeps many servers from
		// reconnecting in step.
		wait := backoff/2 + rand.N(backoff/2+1)
		c.mu.Lock()
		c.retryAt = time.Now().Add(wait)
		c.notify()
		c.mu.Unlock()
		select {
		case <-time.After(wait):
		case <-c.ctx.Done():
		}
		backoff = min(2*backoff, c.m.o.MaxBackoff)
	}
}

// connect makes one attempt: start the transport, initialise, list tools.
func (c *conn) connect() (*mcp.ClientSession, *stream, func(), error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.m.o.ConnectTimeout)
	defer cancel()
	transport, st, cleanup, err := c.transport()
	if err != nil {
		return nil, nil, nil, err
	}
	// No KeepAlive here: the SDK pings only sessions that began with
	// initialize, not those of the newer revision (server/discover); serve
	// pings every session itself.
	client := mcp.NewClient(&mcp.Implementation{Name: "toolsvc", Version: c.m.o.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { poke(c.refresh) },
	})
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		cleanup()
		return nil, nil, nil, fmt.Errorf("connect: %w", st.explain(err))
	}
	tools, gen, err := c.listTools(ctx, cs)
	if err != nil {
		_ = cs.Close()
		cleanup()
		return nil, nil, nil, fmt.Errorf("tools/list: %w", listingError(st.explain(err)))
	}
	c.setUp(cs, st, tools, gen)
	return cs, st, cleanup, nil
}

// serve watches a live session until it ends or the conn is cancelled;
// it returns why the session was lost (nil when cancelled).
func (c *conn) serve(cs *mcp.ClientSession, st *stream, cleanup func()) error {
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	closeSession := func() {
		_ = cs.Close()
		<-ended
		cleanup()
	}
	// A lost session is closed in the background, once calls no longer
	// get it (lost detaches it first): closing a stdio server waits up to
	// two seconds for it to exit after its stdin closes, then as long
	// again after SIGTERM. Done here, that held up the session made
	// again, and calls meanwhile were handed the dead session and failed
	// with the error of the call that ended it.
	closeLater := func() { c.m.wg.Go(closeSession) }
	var (
		listed time.Time // the last listing on a notification
		relist <-chan time.Time
		pings  <-chan time.Time // nil: no keepalive
	)
	if c.m.o.KeepAlive > 0 {
		t := time.NewTicker(c.m.o.KeepAlive)
		defer t.Stop()
		pings = t.C
	}
	for {
		select {
		case <-c.ctx.Done():
			c.detach(cs)
			closeSession()
			return nil
		case err := <-ended:
			cleanup()
			if err == nil {
				err = errors.New("the server closed the connection")
			}
			return c.lost(cs, st, err)
		case <-pings:
			if err := c.ping(cs, st, closeLater); err != nil {
				return err
			}
		case <-c.broken:
			if err := c.gone(cs); err != nil {
				// A call found the session dead and let it go.
				closeLater()
				return err
			}
			if err := c.ping(cs, st, closeLater); err != nil {
				return err
			}
		case <-c.refilter:
			if err := c.relist(cs, st, closeLater); err != nil {
				return err
			}
		case <-c.refresh:
			// A server that sends list_changed without pause is listed
			// once a relistInterval, not once a notification.
			if wait := time.Until(listed.Add(relistInterval)); wait > 0 {
				if relist == nil {
					relist = time.After(wait)
				}
				continue
			}
			if err := c.relist(cs, st, closeLater); err != nil {
				return err
			}
			listed = time.Now()
		case <-relist:
			relist = nil
			if err := c.relist(cs, st, closeLater); err != nil {
				return err
			}
			listed = time.Now()
		}
	}
}

// ping asks a live session's server whether it is there; it returns why
// the session was lost (and closed) when it is not, or nil.
func (c *conn) ping(cs *mcp.ClientSession, st *stream, closeSession func()) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.m.o.ConnectTimeout)
	err := cs.Ping(ctx, nil)
	cancel()
	if err != nil && c.ctx.Err() == nil {
		err = c.lost(cs, st, fmt.Errorf("ping: %w", err))
		closeSession()
		return err
	}
	return nil
}

// gone returns why the session cs was let go by a call that found it
// dead (see dead), or nil while it is the live session.
func (c *conn) gone(cs *mcp.ClientSession) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == cs {
		return nil
	}
	if c.lostWhy == nil {
		return errors.New("the session ended")
	}
	return c.lostWhy
}

// relistInterval is the least time between two listings of a server's
// tools on its notifications.
const relistInterval = time.Second

// relist lists the tools of a live session again; it returns why the
// session was lost (and closed) doing so, or nil.
func (c *conn) relist(cs *mcp.ClientSession, st *stream, closeSession func()) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.m.o.ConnectTimeout)
	tools, gen, err := c.listTools(ctx, cs)
	cancel()
	if err != nil {
		if c.ctx.Err() != nil {
			return nil
		}
		err = c.lost(cs, st, fmt.Errorf("tools/list: %w", listingError(st.explain(err))))
		closeSession()
		return err
	}
	c.setUp(cs, st, tools, gen)
	return nil
}

// transport makes the transport for one attempt, what the service learns
// of its stream (stdio only), and what undoes it.
func (c *conn) transport() (mcp.Transport, *stream, func(), error) {
	s := c.srv
	if s.url != "" {
		client := &http.Client{
			Transport: &headerTransport{base: c.m.o.Transport, headers: s.headers, prop: c.m.o.Propagator,
				events: newPacer(maxServerLines, maxServerLineBurst, c.slowed)},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
		return &mcp.StreamableClientTransport{Endpoint: s.url, HTTPClient: client, MaxEventSize: maxAnswerBytes}, nil, func() {}, nil
	}
	cmd := exec.Command(s.command, s.args...)
	cmd.Env = append([]string{"PATH=" + sandbox.DefaultPath}, s.env...)
	cmd.Dir = s.dir
	stderr := &lineLogger{log: func(line string, dropped int) {
		if dropped > 0 {
			c.m.log.Warn("mcp: server stderr lines not logged", "server", s.name, "lines", dropped, "reason", fmt.Sprintf("more than %d a second", maxLogLines))
		}
		c.m.log.Info("mcp: server stderr", "server", s.name, "line", line)
	}}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var reaper *sandbox.Reaper
	if c.m.o.Launcher != "" {
		// The reaper stops the server's whole tree within reaperGrace of
		// the SIGTERM the transport sends two seconds after closing the
		// server's stdin, before the transport's SIGKILL would come.
		var err error
		if reaper, err = sandbox.Reaped(cmd, c.m.o.Launcher, reaperGrace); err != nil {
			return nil, nil, nil, err
		}
	}
	cleanup := func() {
		// Whatever the server started is in its process group (or, under
		// the reaper, gone with it).
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		if reaper != nil {
			_ = reaper.Close()
		}
		stderr.flush()
	}
	st := &stream{pace: newPacer(maxServerMessages, maxServerBurst, c.slowed), drops: newPacer(maxDroppedMessages, maxDroppedMessages, c.dropsSlowed),
		out: newLineRecorder(), noted: c.notJSONRPC}
	st.out.drops = st.drops
	command := &commandTransport{cmd: cmd, terminate: 2 * time.Second, out: st.out}
	var t mcp.Transport = command
	if reaper != nil {
		t = &reapedTransport{commandTransport: command, reaper: reaper}
	}
	return &pacedTransport{Transport: t, pace: st.pace, st: st}, st, cleanup, nil
}

// notJSONRPC logs that a stdio server wrote something that is not a
// JSON-RPC message, with the JSON parser's own account, cut: the session
// ends with it, and is made again.
func (c *conn) notJSONRPC(bad *notJSONRPCError) {
	c.m.log.Warn("mcp: server wrote something that is not a JSON-RPC message to its standard output; its session ends and is made again",
		"server", c.srv.name, "wrote", bad.what, "line", bad.quote, "lineCut", bad.cut, "error", cutText(bad.raw.Error(), maxErrorText))
}

// slowed logs that a connection's reading was slowed for the first time.
func (c *conn) slowed() {
	c.m.log.Warn("mcp: server sends requests and notifications faster than toolsvc reads them; reading slowed", "server", c.srv.name, "rate", fmt.Sprintf("%d a second", maxServerMessages))
}

// dropsSlowed logs that the dropping of a connection's progress
// notifications was slowed for the first time.
func (c *conn) dropsSlowed() {
	c.m.log.Warn("mcp: server sends progress notifications faster than toolsvc drops them; reading slowed", "server", c.srv.name, "rate", fmt.Sprintf("%d a second", maxDroppedMessages))
}

// A server's requests and notifications of its own accord (progress, log
// messages, list_changed, pings) are read at a bounded rate: each costs
// the service far more to decode and dispatch than it costs the server to
// write, and a server that wrote notifications without pause kept a core
// of the service busy (98% over stdio, 82% over HTTP) for as long as it
// ran. Past the rate, reading waits, so the pipe or the TCP window fills
// and the server waits too; a server that floods slows only itself.
// Over stdio the messages are counted (answers to the service's own
// requests are not); over HTTP the lines of event streams, a few to an
// event, since the SDK's HTTP connection has methods of its own that a
// wrapper of the connection would hide.
const (
	maxServerMessages  = 100
	maxServerBurst     = 1000
	maxServerLines     = 4 * maxServerMessages
	maxServerLineBurst = 4 * maxServerBurst
	// streamLines is what opening an event stream costs (see RoundTrip).
	streamLines = maxServerLines / 10
	// maxDroppedMessages is the pace (and burst) of the progress
	// notifications a stdio server sends, which toolsvc drops before the
	// SDK decodes them (see lineRecorder.Read). The SDK's decoding costs
	// 30-60 µs a message, which is what the pace above bounds: a burst of
	// 100,000 sent with one answer took 17 minutes to read at it, every
	// call meanwhile timing out behind it. Dropping one costs about
	// 1.5 µs: at this pace a server that sends them without end takes
	// about 4% of a core, a finite burst is read 100 times faster, and an
	// answer written after it waits only behind what the pipe holds
	// (about 700 notifications, 70 ms).
	maxDroppedMessages = 10000
)

// pacer is the rate limit of one connection's reading.
type pacer struct {
	lim *rate.Limiter
	// slowed is called the first time reading has to wait.
	slowed   func()
	slowOnce sync.Once
	// due is when the latest read that had to wait may go on (Unix
	// nanoseconds; 0: none had to).
	due atomic.Int64
}

func newPacer(perSecond, burst int, slowed func()) *pacer {
	return &pacer{lim: rate.NewLimiter(rate.Limit(perSecond), burst), slowed: slowed}
}

// wait waits until n more may be read (n at most the burst), or done or
// ctx ends.
func (p *pacer) wait(ctx context.Context, done <-chan struct{}, n int) error {
	d := p.lim.ReserveN(time.Now(), n).Delay()
	if d <= 0 {
		return nil
	}
	p.slowOnce.Do(p.slowed)
	p.due.Store(time.Now().Add(d).UnixNano())
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-done:
		return io.EOF
	}
}

// behind reports whether reading was held back by the pace within
// behindWindow of now: a server's answers wait behind the messages it
// sent of its own accord, so an answer that has not come may not have
// been read yet.
func (p *pacer) behind(now time.Time) bool {
	due := p.due.Load()
	return due != 0 && now.UnixNano() < due+int64(behindWindow)
}

// behindWindow is how long after the pace last held reading back a
// server counts as one that sends more than toolsvc reads: in a flood,
// reading is held back a few milliseconds before every message.
const behindWindow = time.Second

// pacedTransport paces the requests and notifications its connection
// reads (see maxServerMessages), and tells st about the errors of its
// reading.
type pacedTransport struct {
	mcp.Transport
	pace *pacer
	st   *stream
}

func (t *pacedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pacedConn{Connection: conn, pace: t.pace, st: t.st, closed: make(chan struct{})}, nil
}

type pacedConn struct {
	mcp.Connection
	pace      *pacer
	st        *stream
	closed    chan struct{}
	closeOnce sync.Once
}

func (c *pacedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, c.st.read(err)
	}
	if _, ok := msg.(*jsonrpc.Request); !ok {
		return msg, nil
	}
	// Close unblocks a waiting Read, as the Connection contract asks.
	if err := c.pace.wait(ctx, c.closed, 1); err != nil {
		return nil, err
	}
	return msg, nil
}

// Write notes the id of a call's request in the call's trace.
func (c *pacedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() {
		traceOf(ctx).sent(req.ID)
	}
	return c.Connection.Write(ctx, msg)
}

func (c *pacedConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Connection.Close()
}

// reapedTransport starts a stdio server under its reaper, and fails when
// the server's program could not be executed, with the reason (exec format
// error, a missing #! interpreter), as starting it directly would: the
// reaper itself starts either way.
type reapedTransport struct {
	*commandTransport
	reaper *sandbox.Reaper
}

func (t *reapedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.commandTransport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if err := t.reaper.Started(ctx); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

// reaperGrace is how long a stdio server's reaper waits between SIGTERM
// and SIGKILL for the processes the server started.
const reaperGrace = time.Second

// maxListingBytes bounds the JSON of a server's tools, all pages of its
// listing together: each page is bounded as every message is, but a server
// that paginates could make the listing, which is kept, as large as it
// likes (41 pages of 15 MiB took 3.8 GB).
const maxListingBytes = maxAnswerBytes

// Bounds on one listing of a server's tools. maxTools counts the tools
// that include and exclude keep, so that a server of thousands of tools
// of which a few are wanted can be used; maxListedTools and
// maxListingPages bound what is read to find them. Each page is a round
// trip: a server that gave one tool a page with a new cursor each time
// was asked 10,000 times an attempt.
const (
	maxTools        = 10000
	maxListedTools  = 10 * maxTools
	maxListingPages = 1000
)

// filter is the include and exclude globs of a server.
type filter struct{ include, exclude []string }

func filterOf(s *Spec) filter {
	return filter{include: slices.Clone(s.Include), exclude: slices.Clone(s.Exclude)}
}

func (f filter) equal(g filter) bool {
	return slices.Equal(f.include, g.include) && slices.Equal(f.exclude, g.exclude)
}

func (f filter) keeps(name string) bool {
	return included(&Spec{Include: f.include, Exclude: f.exclude}, name)
}

// listTools lists the server's tools that the connection's filter keeps,
// all pages, and returns them with the filter's generation.
func (c *conn) listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, int, error) {
	c.mu.Lock()
	f, gen := c.filter, c.filterGen
	c.mu.Unlock()
	tools, err := listTools(ctx, cs, f)
	return tools, gen, err
}

func listTools(ctx context.Context, cs *mcp.ClientSession, f filter) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	size, listed := 0, 0
	// The hashes of the cursors given so far: a server that gives one
	// again would be asked for the same pages without end.
	seen := map[[sha256.Size]byte]bool{}
	params := &mcp.ListToolsParams{}
	for pages := 1; ; pages++ {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if listed++; listed > maxListedTools {
				return nil, fmt.Errorf("the server lists more than %s tools", thousands(maxListedTools))
			}
			if !f.keeps(t.Name) {
				continue
			}
			b, err := json.Marshal(t)
			if err != nil {
				return nil, err
			}
			if size += len(b); size > maxListingBytes {
				return nil, fmt.Errorf("the server's tools take more than %d MiB of JSON", maxListingBytes>>20)
			}
			if tools = append(tools, t); len(tools) > maxTools {
				return nil, fmt.Errorf("the server lists more than %s tools that include and exclude keep", thousands(maxTools))
			}
		}
		if res.NextCursor == "" {
			return tools, nil
		}
		sum := sha256.Sum256([]byte(res.NextCursor))
		if seen[sum] {
			return nil, fmt.Errorf("the server gave the cursor %s twice; its pages would be asked for without end", quoteCut(res.NextCursor, maxQuote))
		}
		seen[sum] = true
		if pages == maxListingPages {
			return nil, fmt.Errorf("the server's tools take more than %s pages", thousands(maxListingPages))
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
}

// quoteCut quotes s, cut at about n bytes, marked when it was cut.
func quoteCut(s string, n int) string {
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", registry.Clip(s, n), len(s))
}

// listingError is why a listing failed, said for the listing: the MCP
// SDK refuses a whole message nested deeper than it reads, so a single
// tool's schema nested that deep keeps every tool of the server out.
func listingError(err error) error {
	if what, ok := tooDeep(err); ok {
		return fmt.Errorf("%s; the MCP SDK refuses any message nested deeper than %s levels, so none of the server's tools can be read: a tool's schema is most likely nested that deep (toolsvc itself leaves out only the tool whose schema is nested deeper than %d levels, but cannot read a list of tools nested deeper than %s)", what, maxDepthText, maxSchemaDepth, maxDepthText)
	}
	return err
}

func hashTools(tools []*mcp.Tool) string {
	b, _ := json.Marshal(tools)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// setFilter makes f the filter of the connection's listings, and asks for
// a listing with it at once when it differs from the one in use; it
// returns the generation that listing will have, or 0 when the listing
// kept is already f's.
func (c *conn) setFilter(f filter) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.filter.equal(f) {
		return 0
	}
	c.filter = f
	c.filterGen++
	poke(c.refilter)
	return c.filterGen
}

// listedWith waits until a listing of generation gen or later is kept,
// or the session is not live, or ctx ends.
func (c *conn) listedWith(ctx context.Context, gen int) {
	for {
		c.mu.Lock()
		done := c.listedGen >= gen || c.session == nil
		ch := c.changed
		c.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// setUp records a live session and its listing, made with the filter of
// generation gen, and signals a change when the tools differ from the
// previous listing. The listing of the first attempt is no change: Ensure
// waits for it, so the registry being built already has it.
func (c *conn) setUp(cs *mcp.ClientSession, st *stream, tools []*mcp.Tool, gen int) {
	firstDone := false
	select {
	case <-c.first:
		firstDone = true
	default:
	}
	h := hashTools(tools)
	c.mu.Lock()
	changed := h != c.toolsHash
	wasUp := c.state == stateConnected
	c.session, c.stream, c.tools, c.toolsHash, c.err, c.everUp = cs, st, tools, h, nil, true
	c.listedGen, c.reconnecting = max(c.listedGen, gen), false
	if !wasUp {
		c.state, c.since = stateConnected, time.Now()
	}
	c.notify()
	c.mu.Unlock()
	if !wasUp {
		c.m.log.Info("mcp: server connected", "server", c.srv.name, "endpoint", c.srv.describe(), "tools", len(tools))
	}
	if changed && firstDone {
		c.m.signalChange()
	}
}

// redactedError is err with the URLs in its text redacted (an HTTP
// server's URL may carry a key, see Server.redact), for status and logs,
// and cut at maxErrorText.
func (c *conn) redactedError(err error) error {
	if err == nil {
		return nil
	}
	return errors.New(cutText(c.srv.redact(err.Error()), maxErrorText))
}

// maxErrorText bounds the text of an error kept in a server's status and
// logged. The server chooses much of it: the message of a JSON-RPC error
// it answers to initialize or tools/list may take all the 16 MiB of a
// message, and was logged on every attempt and served whole by every
// /readyz (8 MiB each).
const maxErrorText = 1 << 10

// cutText returns s cut at about n bytes (at a character's start), saying
// how long it was.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes in all)", registry.Clip(s, n), len(s))
}

// setDown records that an attempt to connect failed: the attempt made
// after a session was lost has ended.
func (c *conn) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down(err)
	c.reconnecting = false
}

// down records why the server is not connected; c.mu is held.
func (c *conn) down(err error) {
	c.err = err
	state := stateUnreachable
	if c.everUp {
		state = stateReconnecting
	}
	if c.state != state {
		c.state, c.since = state, time.Now()
	}
	c.notify()
}

// lost records that the session cs, whose stream is st, ended, and
// returns why (redacted), or nil when the conn was cancelled. Calls no
// longer get it from then on; they wait for the session made again.
func (c *conn) lost(cs *mcp.ClientSession, st *stream, err error) error {
	if c.ctx.Err() != nil {
		c.detach(cs)
		return nil
	}
	err = c.redactedError(explainLoss(st, err))
	c.mu.Lock()
	if c.session == cs {
		c.session, c.stream = nil, nil
		c.reconnecting, c.retryAt, c.lostWhy = true, time.Time{}, err
		c.down(fmt.Errorf("connection lost: %w", err))
	}
	c.mu.Unlock()
	return err
}

// ended reports whether the session cs, whose stream is st, is known to
// have ended: it was let go, or (over stdio) its reading failed.
func (c *conn) ended(cs *mcp.ClientSession, st *stream) bool {
	c.mu.Lock()
	gone := c.session != cs
	c.mu.Unlock()
	return gone || st.readFailed()
}

// dead lets go of the session cs, which a call found dead, and tells the
// loop to close it and make it again.
func (c *conn) dead(cs *mcp.ClientSession, st *stream, err error) {
	_ = c.lost(cs, st, err)
	poke(c.broken)
}

// explainLoss says why a session ended in plain words where they are
// known: what a stdio server wrote that is not a JSON-RPC message, or a
// message over the bound; err otherwise.
func explainLoss(st *stream, err error) error {
	if bad := st.badMessage(); bad != nil {
		return bad
	}
	if tooLarge(err) {
		return fmt.Errorf("the server sent a message larger than %d MiB, the most toolsvc reads", maxAnswerBytes>>20)
	}
	return err
}

func (c *conn) detach(cs *mcp.ClientSession) {
	c.mu.Lock()
	if c.session == cs {
		c.session, c.stream = nil, nil
		c.notify()
	}
	c.mu.Unlock()
}

func (c *conn) status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Status{State: c.state, Transport: c.srv.transport(), Tools: len(c.tools), Since: c.since}
	if c.err != nil {
		st.Error = c.err.Error()
	}
	return st
}

// retire waits for the calls running on the connection, then closes it.
func (c *conn) retire() {
	c.mu.Lock()
	c.retired = true
	c.notify()
	c.mu.Unlock()
	c.calls.Wait()
	c.cancel()
	<-c.done
}

// reconnectWait bounds how long a call waits for a session that is being
// made again: a server lost a moment ago (by the answer of another call,
// say) is usually back within a second, and a call that fails meanwhile
// tells the model nothing it can act on.
const reconnectWait = 5 * time.Second

// acquire returns the live session for one call and its stream, or why
// there is none. While a lost session is being made again, and the
// attempt is due within reconnectWait, it waits for it (not past ctx).
func (c *conn) acquire(ctx context.Context) (*mcp.ClientSession, *stream, error) {
	until := time.Now().Add(reconnectWait)
	for {
		c.mu.Lock()
		switch {
		case c.retired:
			c.mu.Unlock()
			return nil, nil, &registry.Error{Code: registry.CodeTool,
				Message:    fmt.Sprintf("MCP server %s was removed from the configuration", c.srv.name),
				Suggestion: "List the tools again; this one is no longer available."}
		case c.session != nil:
			c.calls.Add(1)
			cs, st := c.session, c.stream
			c.mu.Unlock()
			return cs, st, nil
		}
		now := time.Now()
		wait := c.reconnecting && c.ctx.Err() == nil && now.Before(until) && (c.retryAt.IsZero() || c.retryAt.Before(until))
		ch, why := c.changed, c.err
		c.mu.Unlock()
		if !wait {
			return nil, nil, c.unreachable(why)
		}
		timer := time.NewTimer(until.Sub(now))
		select {
		case <-ch:
		case <-timer.C:
		case <-c.ctx.Done():
		case <-ctx.Done():
			timer.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, nil, &registry.Error{Code: registry.CodeTimeout,
					Message:    fmt.Sprintf("MCP server %s was being connected again (%v), and was not back when the call's time was up; the call was not sent", c.srv.name, why),
					Suggestion: "Your request is not the cause. Try the call again in a few seconds, or use another tool."}
			}
			return nil, nil, ctx.Err()
		}
		timer.Stop()
	}
}

// unreachable is the error of a call made while the server has no live
// session: nothing was sent.
func (c *conn) unreachable(why error) error {
	msg := fmt.Sprintf("MCP server %s is unreachable", c.srv.name)
	if why != nil {
		msg += ": " + why.Error()
	}
	return &registry.Error{Code: registry.CodeTool, Message: msg + "; the service keeps reconnecting, and this call was not sent",
		Suggestion: "Try again later, or use another tool."}
}

// call runs one tools/call on the server, for a tool of tier.
func (c *conn) call(ctx context.Context, remote string, tier registry.Tier, req *registry.Request) (any, error) {
	params := &mcp.CallToolParams{Name: remote, Arguments: req.Arguments}
	carrier := propagation.MapCarrier{}
	c.m.o.Propagator.Inject(ctx, carrier)
	if len(carrier) > 0 {
		params.Meta = mcp.Meta{}
		for k, v := range carrier {
			params.Meta[k] = v
		}
	}
	for try := 1; ; try++ {
		cs, st, err := c.acquire(ctx)
		if err != nil {
			return nil, err
		}
		tr := &callTrace{}
		res, err := cs.CallTool(context.WithValue(ctx, callTraceKey{}, tr), params)
		c.calls.Done()
		if err == nil {
			return resultOutput(res)
		}
		if errors.Is(err, mcp.ErrConnectionClosed) && ctx.Err() == nil && c.ended(cs, st) {
			// The session had ended before the request was written (the
			// answer to another call, or a ping, ended it): the server
			// never saw this call, so it is sent again, once, on the
			// session made anew, whatever its tier. The SDK says so of a
			// JSON-RPC error answer with the code of "client is closing"
			// or "server is closing" too: a session toolsvc does not know
			// to have ended is not taken to have ended.
			c.dead(cs, st, err)
			if try == 1 {
				continue
			}
			return nil, c.unreachable(c.gone(cs))
		}
		return nil, c.failed(ctx, cs, st, tr, tier, err)
	}
}

// failed is the error of a call that the server did not answer with a
// result toolsvc can read.
func (c *conn) failed(ctx context.Context, cs *mcp.ClientSession, st *stream, tr *callTrace, tier registry.Tier, err error) error {
	name := c.srv.name
	if ctx.Err() != nil {
		// A stdio server's answer waits in the pipe behind the messages
		// it sent before it, which are read at a bounded pace: the call
		// of a server that floods times out for the server's sake, not
		// its request's, and says so (the executor keeps a handler's own
		// E_TIMEOUT).
		if st != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && st.behind(time.Now()) {
			return c.overloaded(st, tier)
		}
		return ctx.Err()
	}
	var bad *notJSONRPCError
	if errors.As(err, &bad) {
		// The session has ended with it: make it again.
		c.dead(cs, st, err)
		return &registry.Error{Code: registry.CodeTool,
			Message:    c.srv.redact(fmt.Sprintf("MCP server %s %s; toolsvc ended its session and is starting it again", name, bad.wrote(", where only JSON-RPC messages may go"))),
			Suggestion: "The tool's server is faulty, not your call. Try the call once more in a few seconds; if it fails the same way, use another tool or tell the user the tool is broken."}
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) && rpc.Code != codeRejected {
		// The server's own error answer.
		return &registry.Error{Code: registry.CodeTool, Message: c.srv.redact(fmt.Sprintf("MCP server %s: %v", name, err))}
	}
	if what, ok := unreadable(err); ok {
		// The answer came, and its result is not what MCP says a
		// tools/call result is: the session goes on.
		return c.unreadableAnswer("gave an answer toolsvc cannot read: "+what, tier)
	}
	rejected := errors.As(err, &rpc) && rpc.Code == codeRejected
	if what, own, ok := c.failedAnswer(st, tr, err); ok && !errors.Is(err, mcp.ErrSessionMissing) {
		if rejected {
			// The server turned the request away for now (a 502, 503,
			// 504 or 429): the session goes on.
			poke(c.broken)
			return &registry.Error{Code: registry.CodeTool,
				Message:    c.srv.redact(fmt.Sprintf("MCP server %s turned the call away: %s", name, what)),
				Suggestion: "The server is busy or restarting. Try the call again in a few seconds, or use another tool."}
		}
		c.dead(cs, st, err) // the SDK ends the session with it
		switch {
		case !own:
			return c.endedByAnother(what, tier)
		case tooLarge(err):
			return &registry.Error{Code: registry.CodeTool,
				Message:    fmt.Sprintf("MCP server %s: %v, the most toolsvc reads", name, errAnswerTooLarge),
				Suggestion: "Ask the tool for less: narrower arguments or fewer results."}
		}
		return c.unreadableAnswer(fmt.Sprintf("answered the call with %s, which toolsvc cannot read", what), tier)
	}
	// Not an answer from the server: the connection failed, not the tool,
	// and is made again.
	if st.readFailed() || errors.Is(err, mcp.ErrSessionMissing) {
		c.dead(cs, st, err) // the session has ended
	} else {
		poke(c.broken) // check the connection
	}
	return &registry.Error{Code: registry.CodeTool, Message: c.srv.redact(fmt.Sprintf("MCP server %s: %v", name, err)),
		Suggestion: "The connection to the tool's server was lost and is being made again; try the call again in a few seconds, or use another tool."}
}

// codeRejected is the code of jsonrpc2.ErrRejected, which the SDK's HTTP
// transport wraps around a request it could not send (a refused
// connection) or that the server turned away for now (502, 503, 504,
// 429): no answer of the server's.
const codeRejected = -32005

// unreadableAnswer is the error of a call whose answer toolsvc cannot
// read, which what says: the server is faulty, and asking again will most
// likely get the same answer.
func (c *conn) unreadableAnswer(what string, tier registry.Tier) *registry.Error {
	suggestion := "The tool's server is faulty, not your call; calling it again the same way will most likely get the same answer. Use another tool, or tell the user the tool is broken."
	if tier != registry.ReadOnly {
		suggestion = "The server answered, so it may have run the call: check whether its change took effect before you call it again. " + suggestion
	}
	return &registry.Error{Code: registry.CodeTool,
		Message:    c.srv.redact(fmt.Sprintf("MCP server %s %s", c.srv.name, what)),
		Suggestion: suggestion}
}

// endedByAnother is the error of a call whose session ended, while it
// ran, because of what the server sent another call.
func (c *conn) endedByAnother(what string, tier registry.Tier) *registry.Error {
	suggestion := "Your request is not the cause. Try the call again in a few seconds, or use another tool."
	if tier != registry.ReadOnly {
		suggestion = "The server may have run the call: check whether its change took effect before you call it again. " + suggestion
	}
	return &registry.Error{Code: registry.CodeTool,
		Message:    c.srv.redact(fmt.Sprintf("MCP server %s: the session ended while this call was running, when the server sent %s in answer to something else; toolsvc is making the session again, and this call's answer was lost", c.srv.name, what)),
		Suggestion: suggestion}
}

// failedAnswer reports whether a call failed because an answer of the
// server could not be read (too large, not a JSON-RPC message, an HTTP
// status other than 2xx), what the server sent in plain words (a noun
// phrase: "text that is not JSON"), and whether that
// answer was this call's own rather than another call's (or a message of
// the server's own accord); when that cannot be told, it is.
func (c *conn) failedAnswer(st *stream, tr *callTrace, err error) (what string, own, ok bool) {
	if tooLarge(err) {
		what = fmt.Sprintf("a message larger than %d MiB (the most toolsvc reads)", maxAnswerBytes>>20)
		if st != nil {
			id, sent := tr.sentID()
			return what, !sent || answerTo(st.lastLine(), id), true
		}
		return what, tr.overBound(), true
	}
	if st != nil {
		return "", false, false
	}
	if code := tr.answerStatus(); code != 0 && code/100 != 2 {
		what = fmt.Sprintf("the HTTP status %d %s", code, http.StatusText(code))
		if code/100 == 3 {
			what += " (redirects are not followed)"
		}
		return what, true, true
	}
	return undecodable(err.Error(), tr)
}

// overloaded is the error of a call that ended because the server sends
// messages of its own accord faster than they are read.
func (c *conn) overloaded(st *stream, tier registry.Tier) *registry.Error {
	suggestion := "The tool's server is overloaded; your request is not the cause, so do not make it smaller. Try the call again later, or use another tool."
	if tier != registry.ReadOnly {
		suggestion = "The server may have run the call: check whether its change took effect before you call it again. " + suggestion
	}
	what := fmt.Sprintf("messages of its own accord (notifications, requests) faster than toolsvc reads them (%d a second)", maxServerMessages)
	if !st.pace.behind(time.Now()) {
		what = fmt.Sprintf("progress notifications, which toolsvc did not ask for, faster than toolsvc drops them (%s a second)", thousands(maxDroppedMessages))
	}
	return &registry.Error{Code: registry.CodeTimeout,
		Message: fmt.Sprintf("MCP server %s did not answer in time: it sends %s, and toolsvc had not yet read its answer when the call's time was up; the call was stopped",
			c.srv.name, what),
		Suggestion: suggestion}
}

// thousands writes n with commas between its thousands, as the docs do.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// headerTransport adds the configured headers and the trace context to
// every request to an HTTP server.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
	prop    propagation.TextMapPropagator
	// events paces the lines of the connection's event streams (see
	// maxServerMessages).
	events *pacer
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	t.prop.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	if r.Method == http.MethodGet && t.events != nil {
		// A GET opens (or resumes) the stream of the server's own
		// messages, which the SDK opens again as soon as the server ends
		// it, after as little as the server asks (an SSE retry of 1 ms):
		// each counts as streamLines lines, so a server that ends every
		// stream at once is asked again at most 10 times a second.
		if err := t.events.wait(r.Context(), nil, streamLines); err != nil {
			return nil, err
		}
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// The SDK reads a JSON answer, and the body of a failed request, whole
	// (io.ReadAll): those are cut at maxAnswerBytes. An event stream it
	// reads an event at a time, each bounded by MaxEventSize; the stream
	// itself may last as long as the session.
	b := &boundedBody{ctx: r.Context(), body: resp.Body, left: maxAnswerBytes}
	stream := resp.StatusCode/100 == 2 && mediaType(resp.Header.Get("Content-Type")) == "text/event-stream"
	if r.Method == http.MethodPost {
		// The answer to a call's request (or to the notification that
		// cancels it, which carries its context too: the first answer
		// is the call's).
		b.trace = traceOf(r.Context())
		b.trace.answered(resp.StatusCode, stream)
	}
	if stream {
		b.left = -1
		if r.Method == http.MethodGet {
			// Only the stream of the server's own messages is paced: a
			// POST's stream carries the answer to a request of the
			// service's, however many lines it takes.
			b.pace = t.events
		}
	}
	resp.Body = b
	return resp, nil
}

// maxAnswerBytes bounds one message from an MCP server: the SDK's bound on
// a stdio frame (which CommandTransport applies), applied here to every
// answer and event over HTTP too.
const maxAnswerBytes = mcp.DefaultMaxLineLength

// errAnswerTooLarge is what reading an answer past maxAnswerBytes returns.
var errAnswerTooLarge = fmt.Errorf("the MCP server's answer is larger than %d MiB", maxAnswerBytes>>20)

// boundedBody is a response body that fails once more than left bytes
// have been read (left < 0: no bound), or once the request's context has
// ended: the request is the call's, so a read never outlasts the call,
// whatever transport carries it.
type boundedBody struct {
	ctx  context.Context
	body io.ReadCloser
	left int64
	// pace, for an event stream, paces its lines.
	pace *pacer
	// trace, for the answer to a call's request, is the call's.
	trace *callTrace
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.left < 0 {
		if b.pace == nil {
			n, err := b.body.Read(p)
			b.trace.streamed(n)
			return n, err
		}
		// No more lines in one read than the pacer's burst.
		p = p[:min(len(p), maxServerLineBurst)]
		n, err := b.body.Read(p)
		if lines := bytes.Count(p[:n], []byte{'\n'}); lines > 0 {
			if werr := b.pace.wait(b.ctx, nil, lines); werr != nil {
				return 0, werr
			}
		}
		return n, err
	}
	if b.left == 0 {
		// One byte more tells a body that ends here from a longer one.
		var one [1]byte
		n, err := b.body.Read(one[:])
		if n > 0 {
			b.trace.over()
			return 0, errAnswerTooLarge
		}
		if err == io.EOF {
			b.trace.ended()
		}
		return 0, err
	}
	n, err := b.body.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	if err == io.EOF {
		b.trace.ended()
	}
	return n, err
}

// callTrace is what the transport learns of one call's request and its
// answer while the call runs, so that a call whose session ended can tell
// whether its own answer ended it or something else the server sent: the
// SDK gives every call in flight the same error.
type callTrace struct {
	mu sync.Mutex
	// id is the id of the call's request, once written (stdio).
	id    jsonrpc.ID
	idSet bool
	// Over HTTP: the status of the answer to the request, whether it is
	// an event stream, whether its body was read to the end, whether it
	// was larger than maxAnswerBytes, and the bytes read of a stream.
	status     int
	stream     bool
	end, large bool
	read       int64
}

type callTraceKey struct{}

// traceOf returns the trace of the call whose context ctx is, or nil.
// Its methods do nothing on nil.
func traceOf(ctx context.Context) *callTrace {
	tr, _ := ctx.Value(callTraceKey{}).(*callTrace)
	return tr
}

func (t *callTrace) sent(id jsonrpc.ID) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.idSet {
		t.id, t.idSet = id, true
	}
}

func (t *callTrace) sentID() (jsonrpc.ID, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.id, t.idSet
}

func (t *callTrace) answered(status int, stream bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.status == 0 {
		t.status, t.stream = status, stream
	}
}

func (t *callTrace) answerStatus() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status
}

func (t *callTrace) ended() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.end = true
	t.mu.Unlock()
}

func (t *callTrace) over() {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.large = true
	t.mu.Unlock()
}

func (t *callTrace) streamed(n int) {
	if t == nil || n <= 0 {
		return
	}
	t.mu.Lock()
	t.read += int64(n)
	t.mu.Unlock()
}

// overBound reports whether the call's own answer was over
// maxAnswerBytes: its body, or its event stream (whose events the SDK
// bounds at that size: a stream shorter than that cannot hold one over
// it).
func (t *callTrace) overBound() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.large || t.stream && t.read >= maxAnswerBytes
}

func (b *boundedBody) Close() error { return b.body.Close() }

// tooLarge reports whether err says an answer was larger than
// maxAnswerBytes: the SDK passes on the body's error, and reports its own
// bounds on an event and on a stdio frame, as text only.
func tooLarge(err error) bool {
	s := err.Error()
	return strings.Contains(s, errAnswerTooLarge.Error()) || strings.Contains(s, "SSE event exceeded") ||
		strings.Contains(s, "frame exceeded the configured maximum line length")
}

func mediaType(contentType string) string {
	mt, _, _ := strings.Cut(contentType, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}

// lineLogger logs what a stdio server writes to stderr, a line at a time,
// each cut at 1 KiB, and at most maxLogLines a second: a server that
// writes without end would fill the service's log (it wrote 9 MB a
// second). The lines left out are counted, and the count is logged with
// the next line logged, or by flush when the server has ended, with the
// last lines left out: a server that dies with a long traceback says why
// at its end.
type lineLogger struct {
	mu  sync.Mutex
	buf bytes.Buffer
	log func(line string, dropped int)
	// now is time.Now; tests set it.
	now     func() time.Time
	window  time.Time
	logged  int
	dropped int
	// tail holds the last lines left out since a line was logged.
	tail []string
}

const (
	maxLogLine  = 1 << 10
	maxLogLines = 20
	// maxTailLines is how many of the last lines left out flush logs.
	maxTailLines = 5
)

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			room := max(0, maxLogLine-l.buf.Len())
			l.buf.Write(p[:min(room, len(p))])
			break
		}
		room := max(0, maxLogLine-l.buf.Len())
		l.buf.Write(p[:min(room, i)])
		l.emit()
		l.buf.Reset()
		p = p[i+1:]
	}
	return n, nil
}

// emit logs the line in buf, unless maxLogLines were logged in the
// current second.
func (l *lineLogger) emit() {
	now := time.Now()
	if l.now != nil {
		now = l.now()
	}
	if now.Sub(l.window) >= time.Second {
		l.window, l.logged = now, 0
	}
	if l.logged >= maxLogLines {
		l.dropped++
		if len(l.tail) == maxTailLines {
			l.tail = slices.Delete(l.tail, 0, 1)
		}
		l.tail = append(l.tail, l.buf.String())
		return
	}
	l.logged++
	l.log(l.buf.String(), l.dropped)
	l.dropped, l.tail = 0, nil
}

// flush logs, once the server has ended, a last line it did not end, and
// the count and the last few of the lines left out, past the rate: there
// is no next line to carry them.
func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 0 {
		l.dropped++
		l.tail = append(l.tail, l.buf.String())
		l.buf.Reset()
	}
	for i, line := range l.tail {
		dropped := 0
		if i == 0 {
			dropped = l.dropped - len(l.tail)
		}
		l.log(line, dropped)
	}
	l.dropped, l.tail = 0, nil
}

var _ io.Writer = (*lineLogger)(nil)
