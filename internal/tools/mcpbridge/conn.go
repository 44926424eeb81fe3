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
}

func newConn(m *Manager, s *Server) *conn {
	c := &conn{m: m, srv: s, first: make(chan struct{}), refresh: make(chan struct{}, 1),
		broken: make(chan struct{}, 1), done: make(chan struct{}), state: stateConnecting, since: time.Now()}
	c.ctx, c.cancel = context.WithCancel(m.ctx)
	return c
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
	tools, err := listTools(ctx, cs)
	if err != nil {
		_ = cs.Close()
		cleanup()
		return nil, nil, nil, fmt.Errorf("tools/list: %w", st.explain(err))
	}
	c.setUp(cs, st, tools)
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
			if err := c.ping(cs, st, closeSession); err != nil {
				return err
			}
		case <-c.broken:
			if err := c.ping(cs, st, closeSession); err != nil {
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
			if err := c.relist(cs, st, closeSession); err != nil {
				return err
			}
			listed = time.Now()
		case <-relist:
			relist = nil
			if err := c.relist(cs, st, closeSession); err != nil {
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
		closeSession()
		return c.lost(cs, st, fmt.Errorf("ping: %w", err))
	}
	return nil
}

// relistInterval is the least time between two listings of a server's
// tools on its notifications.
const relistInterval = time.Second

// relist lists the tools of a live session again; it returns why the
// session was lost (and closed) doing so, or nil.
func (c *conn) relist(cs *mcp.ClientSession, st *stream, closeSession func()) error {
	ctx, cancel := context.WithTimeout(c.ctx, c.m.o.ConnectTimeout)
	tools, err := listTools(ctx, cs)
	cancel()
	if err != nil {
		if c.ctx.Err() != nil {
			return nil
		}
		closeSession()
		return c.lost(cs, st, fmt.Errorf("tools/list: %w", err))
	}
	c.setUp(cs, st, tools)
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
	st := &stream{pace: newPacer(maxServerMessages, maxServerBurst, c.slowed), out: newLineRecorder(), noted: c.notJSONRPC}
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

func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	size := 0
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		if size += len(b); size > maxListingBytes {
			return nil, fmt.Errorf("the server's tools take more than %d MiB of JSON", maxListingBytes>>20)
		}
		tools = append(tools, t)
		if len(tools) > 10000 {
			return nil, errors.New("the server lists more than 10000 tools")
		}
	}
	return tools, nil
}

func hashTools(tools []*mcp.Tool) string {
	b, _ := json.Marshal(tools)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// setUp records a live session and its listing, and signals a change
// when the tools differ from the previous listing. The listing of the
// first attempt is no change: Ensure waits for it, so the registry being
// built already has it.
func (c *conn) setUp(cs *mcp.ClientSession, st *stream, tools []*mcp.Tool) {
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
	if !wasUp {
		c.state, c.since = stateConnected, time.Now()
	}
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

func (c *conn) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	state := stateUnreachable
	if c.everUp {
		state = stateReconnecting
	}
	if c.state != state {
		c.state, c.since = state, time.Now()
	}
}

// lost records that the session cs, whose stream is st, ended, and
// returns why (redacted), or nil when the conn was cancelled.
func (c *conn) lost(cs *mcp.ClientSession, st *stream, err error) error {
	c.mu.Lock()
	if c.session == cs {
		c.session = nil
	}
	c.mu.Unlock()
	if c.ctx.Err() != nil {
		return nil
	}
	err = c.redactedError(st.explain(err))
	c.setDown(fmt.Errorf("connection lost: %w", err))
	return err
}

func (c *conn) detach(cs *mcp.ClientSession) {
	c.mu.Lock()
	if c.session == cs {
		c.session = nil
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
	c.mu.Unlock()
	c.calls.Wait()
	c.cancel()
	<-c.done
}

// acquire returns the live session for one call and its stream, or why
// there is none.
func (c *conn) acquire() (*mcp.ClientSession, *stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.retired:
		return nil, nil, &registry.Error{Code: registry.CodeTool,
			Message:    fmt.Sprintf("MCP server %s was removed from the configuration", c.srv.name),
			Suggestion: "List the tools again; this one is no longer available."}
	case c.session == nil:
		msg := fmt.Sprintf("MCP server %s is unreachable", c.srv.name)
		if c.err != nil {
			msg += ": " + c.err.Error()
		}
		return nil, nil, &registry.Error{Code: registry.CodeTool, Message: msg + "; the service keeps reconnecting",
			Suggestion: "Try again later, or use another tool."}
	}
	c.calls.Add(1)
	return c.session, c.stream, nil
}

// call runs one tools/call on the server, for a tool of tier.
func (c *conn) call(ctx context.Context, remote string, tier registry.Tier, req *registry.Request) (any, error) {
	cs, st, err := c.acquire()
	if err != nil {
		return nil, err
	}
	defer c.calls.Done()
	params := &mcp.CallToolParams{Name: remote, Arguments: req.Arguments}
	carrier := propagation.MapCarrier{}
	c.m.o.Propagator.Inject(ctx, carrier)
	if len(carrier) > 0 {
		params.Meta = mcp.Meta{}
		for k, v := range carrier {
			params.Meta[k] = v
		}
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		if ctx.Err() != nil {
			// A stdio server's answer waits in the pipe behind the
			// messages it sent before it, which are read at a bounded
			// pace: the call of a server that floods times out for the
			// server's sake, not its request's, and says so (the
			// executor keeps a handler's own E_TIMEOUT).
			if st != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && st.pace.behind(time.Now()) {
				return nil, c.overloaded(tier)
			}
			return nil, ctx.Err()
		}
		if bad := st.badMessage(); bad != nil {
			poke(c.broken) // the session has ended: make it again
			return nil, &registry.Error{Code: registry.CodeTool,
				Message:    c.srv.redact(fmt.Sprintf("MCP server %s %s; toolsvc ended its session and is starting it again", c.srv.name, bad.wrote(", where only JSON-RPC messages may go"))),
				Suggestion: "The tool's server is faulty, not your call. Try the call once more in a few seconds; if it fails the same way, use another tool or tell the user the tool is broken."}
		}
		var rpc *jsonrpc.Error
		answered := errors.As(err, &rpc)
		if !answered {
			poke(c.broken) // not an answer from the server: check the connection
		}
		if tooLarge(err) {
			return nil, &registry.Error{Code: registry.CodeTool,
				Message:    fmt.Sprintf("MCP server %s: %v, the most toolsvc reads", c.srv.name, errAnswerTooLarge),
				Suggestion: "Ask the tool for less: narrower arguments or fewer results."}
		}
		e := &registry.Error{Code: registry.CodeTool, Message: c.srv.redact(fmt.Sprintf("MCP server %s: %v", c.srv.name, err))}
		if !answered {
			// The connection failed, not the tool: it is made again.
			e.Suggestion = "The connection to the tool's server was lost and is being made again; try the call again in a few seconds, or use another tool."
		}
		return nil, e
	}
	return resultOutput(res)
}

// overloaded is the error of a call that ended because the server sends
// messages of its own accord faster than they are read.
func (c *conn) overloaded(tier registry.Tier) *registry.Error {
	suggestion := "The tool's server is overloaded; your request is not the cause, so do not make it smaller. Try the call again later, or use another tool."
	if tier != registry.ReadOnly {
		suggestion = "The server may have run the call: check whether its change took effect before you call it again. " + suggestion
	}
	return &registry.Error{Code: registry.CodeTimeout,
		Message: fmt.Sprintf("MCP server %s did not answer in time: it sends messages of its own accord (notifications, requests) faster than toolsvc reads them (%d a second), and toolsvc had not yet read its answer when the call's time was up; the call was stopped",
			c.srv.name, maxServerMessages),
		Suggestion: suggestion}
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
	if resp.StatusCode/100 == 2 && mediaType(resp.Header.Get("Content-Type")) == "text/event-stream" {
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
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, err
	}
	if b.left < 0 {
		if b.pace == nil {
			return b.body.Read(p)
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
			return 0, errAnswerTooLarge
		}
		return 0, err
	}
	n, err := b.body.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	return n, err
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
