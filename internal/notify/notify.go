// Package notify sends approval events (requested, decided, expired) to
// the webhooks of kind: Notifier resources: a generic signed JSON webhook
// or the Slack incoming-webhook shape. Delivery happens off the call path:
// every notifier has its own bounded queue and worker, retries with
// backoff, and drops (and counts) what it cannot queue, so a receiver that
// is down or hangs never blocks or fails a call.
package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// The notifier types.
const (
	TypeWebhook = "webhook"
	TypeSlack   = "slack"
)

// Headers of a delivery.
const (
	// SignatureHeader carries "t=<unix seconds>,v1=<hex HMAC-SHA256 of
	// "<t>.<body>" keyed with the secret>".
	SignatureHeader = "X-Toolsvc-Signature"
	EventHeader     = "X-Toolsvc-Event"
	DeliveryHeader  = "X-Toolsvc-Delivery"
)

// EnvRef names an environment variable that holds a value.
type EnvRef struct {
	Env string `yaml:"env"`
}

// Spec is the spec of a kind: Notifier resource.
type Spec struct {
	// Type is webhook (generic JSON) or slack (incoming-webhook shape).
	Type string `yaml:"type"`
	// URL, or URLFrom an environment variable (Slack webhook URLs are
	// secrets), is where deliveries are POSTed.
	URL     string  `yaml:"url,omitempty"`
	URLFrom *EnvRef `yaml:"urlFrom,omitempty"`
	// SecretFrom names the variable holding the HMAC key; without it
	// deliveries are not signed.
	SecretFrom *EnvRef `yaml:"secretFrom,omitempty"`
	// Events selects requested, decided, expired; empty is all three.
	Events []string `yaml:"events,omitempty"`
	// Tools are name globs; empty is every tool.
	Tools []string `yaml:"tools,omitempty"`
	// IncludeArguments puts the call's arguments into webhook bodies (off:
	// they may hold personal data or secrets).
	IncludeArguments bool `yaml:"includeArguments,omitempty"`
	// Timeout bounds one attempt (default 5s, at most 1m).
	Timeout string `yaml:"timeout,omitempty"`
	// MaxAttempts is how often a delivery is tried (default 5, 1..20).
	MaxAttempts int `yaml:"maxAttempts,omitempty"`
	// QueueSize bounds the deliveries waiting (default 100, 1..10000).
	QueueSize int `yaml:"queueSize,omitempty"`
}

// Target is a checked notifier.
type Target struct {
	Name        string
	Type        string
	URL         string
	secret      []byte
	events      []registry.ApprovalEventKind
	tools       []string
	args        bool
	timeout     time.Duration
	maxAttempts int
	queueSize   int
}

// Decode checks spec and resolves its variables with lookup.
func Decode(name string, spec Spec, lookup func(string) (string, bool)) (*Target, error) {
	t := &Target{Name: name, Type: spec.Type, tools: spec.Tools, args: spec.IncludeArguments, timeout: 5 * time.Second, maxAttempts: 5, queueSize: 100}
	switch spec.Type {
	case TypeWebhook, TypeSlack:
	case "":
		return nil, fmt.Errorf("type is required (webhook or slack)")
	default:
		return nil, fmt.Errorf("type must be webhook or slack, got %q", spec.Type)
	}
	t.URL = spec.URL
	if spec.URLFrom != nil {
		if spec.URL != "" {
			return nil, fmt.Errorf("give url or urlFrom, not both")
		}
		v, ok := lookup(spec.URLFrom.Env)
		if !ok || v == "" {
			return nil, fmt.Errorf("urlFrom: the environment variable %q is not set", spec.URLFrom.Env)
		}
		t.URL = v
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("url must be an absolute http or https URL")
	}
	if spec.SecretFrom != nil {
		v, ok := lookup(spec.SecretFrom.Env)
		if !ok || len(v) < 16 {
			return nil, fmt.Errorf("secretFrom: the environment variable %q must hold at least 16 characters", spec.SecretFrom.Env)
		}
		t.secret = []byte(v)
	}
	for _, e := range spec.Events {
		k := registry.ApprovalEventKind(e)
		switch k {
		case registry.EventApprovalRequested, registry.EventApprovalDecided, registry.EventApprovalExpired:
			t.events = append(t.events, k)
		default:
			return nil, fmt.Errorf("events: unknown event %q (want requested, decided or expired)", e)
		}
	}
	for _, g := range spec.Tools {
		if _, err := pathMatch(g); err != nil {
			return nil, fmt.Errorf("tools: bad glob %q", g)
		}
	}
	if spec.Timeout != "" {
		if t.timeout, err = time.ParseDuration(spec.Timeout); err != nil || t.timeout <= 0 || t.timeout > time.Minute {
			return nil, fmt.Errorf("timeout must be a duration between 1ms and 1m, got %q", spec.Timeout)
		}
	}
	if spec.MaxAttempts != 0 {
		if spec.MaxAttempts < 1 || spec.MaxAttempts > 20 {
			return nil, fmt.Errorf("maxAttempts must be between 1 and 20")
		}
		t.maxAttempts = spec.MaxAttempts
	}
	if spec.QueueSize != 0 {
		if spec.QueueSize < 1 || spec.QueueSize > 10000 {
			return nil, fmt.Errorf("queueSize must be between 1 and 10000")
		}
		t.queueSize = spec.QueueSize
	}
	return t, nil
}

func pathMatch(g string) (bool, error) { return pathMatchName(g, "") }

// wants reports whether t sends ev.
func (t *Target) wants(ev registry.ApprovalEvent) bool {
	if len(t.events) > 0 && !slices.Contains(t.events, ev.Kind) {
		return false
	}
	return len(t.tools) == 0 || registry.MatchAny(t.tools, ev.Approval.ToolName)
}

// key identifies a target's configuration: a reload keeps the worker of a
// target whose key did not change.
func (t *Target) key() string {
	return fmt.Sprintf("%s|%s|%s|%x|%v|%v|%v|%s|%d|%d", t.Name, t.Type, t.URL, sha256.Sum256(t.secret), t.events, t.tools, t.args, t.timeout, t.maxAttempts, t.queueSize)
}

// Options configure a Dispatcher.
type Options struct {
	// PublicURL is the console's address as people reach it
	// ("https://toolsvc.example.com"); links point below it.
	PublicURL string
	Logger    *slog.Logger
	// Registerer takes the delivery metrics; nil records none.
	Registerer prometheus.Registerer
	// Client sends deliveries; nil is a client without proxy or cookies.
	Client *http.Client
	// Backoff is the pause before the first retry, doubled for each
	// further one (at most maxBackoff); 0 is one second. A receiver's
	// Retry-After (on 429 and 503) lengthens a pause, up to maxBackoff.
	Backoff time.Duration
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Dispatcher is an ApprovalObserver that queues events for the notifiers
// loaded into it.
type Dispatcher struct {
	o       Options
	log     *slog.Logger
	client  *http.Client
	results *prometheus.CounterVec
	retries *prometheus.CounterVec
	queued  *prometheus.GaugeVec
	seconds *prometheus.HistogramVec

	mu      sync.Mutex
	workers map[string]*worker // by target name
	closed  bool
	// linksChecked is set once the links have been looked at, when the
	// first notifier was loaded: their warning is logged once.
	linksChecked bool
}

type worker struct {
	t      *Target
	key    string
	queue  chan delivery
	cancel context.CancelFunc
	done   chan struct{}

	// drops counts the deliveries dropped for a full queue since
	// dropLogged, when the last line about them was logged (under
	// Dispatcher.mu): a receiver that is down while approvals keep coming
	// must not write a line per approval.
	drops      int
	dropLogged time.Time
}

// maxBackoff bounds a pause between two attempts of a delivery.
const maxBackoff = 5 * time.Minute

// dropLogEvery is how often a notifier's dropped deliveries are logged at
// most; toolsvc_notifications_total counts each.
const dropLogEvery = time.Minute

type delivery struct {
	id    string
	event registry.ApprovalEventKind
	body  []byte
}

// New returns a dispatcher with no notifiers.
func New(o Options) *Dispatcher {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	d := &Dispatcher{o: o, log: o.Logger, client: o.Client, workers: map[string]*worker{},
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolsvc_notifications_total",
			Help: "Notifications by notifier and result: delivered, failed (every attempt failed) or dropped (queue full or notifier removed)."}, []string{"notifier", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "toolsvc_notification_retries_total",
			Help: "Delivery attempts after a failed one, by notifier."}, []string{"notifier"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "toolsvc_notification_queue_length",
			Help: "Notifications waiting to be delivered, by notifier."}, []string{"notifier"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "toolsvc_notification_delivery_seconds",
			Help: "Time from queueing a notification to its delivery, by notifier.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 8)}, []string{"notifier"}),
	}
	if d.client == nil {
		d.client = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(d.results, d.retries, d.queued, d.seconds)
	}
	return d
}

// Load replaces the notifiers: workers of unchanged notifiers go on, those
// of removed or changed ones stop (their queued deliveries are dropped).
func (d *Dispatcher) Load(targets []*Target) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	if len(targets) > 0 && !d.linksChecked {
		d.linksChecked = true
		if localOnly(d.o.PublicURL) {
			d.log.Warn("notify: links in notifications open only on the machine the service runs on; set TOOLSVC_PUBLIC_URL to the address people reach it at (e.g. https://toolsvc.example.com)",
				"links", d.o.PublicURL+"/ui/approvals/…")
		}
	}
	next := map[string]*worker{}
	for _, t := range targets {
		k := t.key()
		if w, ok := d.workers[t.Name]; ok && w.key == k {
			next[t.Name] = w
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		w := &worker{t: t, key: k, queue: make(chan delivery, t.queueSize), cancel: cancel, done: make(chan struct{})}
		for _, r := range []string{"delivered", "failed", "dropped"} {
			d.results.WithLabelValues(t.Name, r)
		}
		d.retries.WithLabelValues(t.Name)
		d.queued.WithLabelValues(t.Name).Set(0)
		go d.run(ctx, w)
		next[t.Name] = w
	}
	for name, w := range d.workers {
		if next[name] != w {
			w.stop()
		}
	}
	d.workers = next
}

func (w *worker) stop() {
	w.cancel()
	<-w.done
}

// Close stops every worker; what is still queued is dropped.
func (d *Dispatcher) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	for _, w := range d.workers {
		w.stop()
	}
	d.workers = map[string]*worker{}
}

// ObserveApproval implements registry.ApprovalObserver: it renders the
// event for each notifier that wants it and queues it without waiting.
func (d *Dispatcher) ObserveApproval(ev registry.ApprovalEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, w := range d.workers {
		if !w.t.wants(ev) {
			continue
		}
		id := newID()
		body, err := d.render(w.t, id, ev)
		if err != nil {
			d.log.Error("notify: rendering an event", "notifier", w.t.Name, "error", err)
			continue
		}
		select {
		case w.queue <- delivery{id: id, event: ev.Kind, body: body}:
			d.queued.WithLabelValues(w.t.Name).Inc()
		default:
			d.results.WithLabelValues(w.t.Name, "dropped").Inc()
			w.drops++
			if now := d.o.Now(); w.dropLogged.IsZero() || now.Sub(w.dropLogged) >= dropLogEvery {
				d.log.Warn("notify: queue full; notifications dropped (logged at most once a minute; toolsvc_notifications_total{result=\"dropped\"} counts each)",
					"notifier", w.t.Name, "dropped", w.drops, "event", string(ev.Kind), "approvalId", ev.Approval.ID)
				w.drops, w.dropLogged = 0, now
			}
		}
	}
}

func (d *Dispatcher) run(ctx context.Context, w *worker) {
	defer close(w.done)
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case <-w.queue:
					d.queued.WithLabelValues(w.t.Name).Dec()
					d.results.WithLabelValues(w.t.Name, "dropped").Inc()
				default:
					return
				}
			}
		case job := <-w.queue:
			d.queued.WithLabelValues(w.t.Name).Dec()
			d.deliver(ctx, w.t, job)
		}
	}
}

// deliver tries job until it is accepted, attempts run out or ctx ends.
func (d *Dispatcher) deliver(ctx context.Context, t *Target, job delivery) {
	start := d.o.Now()
	pause := d.o.Backoff
	for attempt := 1; ; attempt++ {
		err := d.send(ctx, t, job)
		if err == nil {
			d.results.WithLabelValues(t.Name, "delivered").Inc()
			d.seconds.WithLabelValues(t.Name).Observe(d.o.Now().Sub(start).Seconds())
			return
		}
		var p permanent
		refused := errors.As(err, &p) && p.final()
		if attempt >= t.maxAttempts || ctx.Err() != nil || refused {
			result := "failed"
			if ctx.Err() != nil {
				result = "dropped"
			}
			d.results.WithLabelValues(t.Name, result).Inc()
			d.log.Warn("notify: delivery failed", "notifier", t.Name, "event", string(job.event), "delivery", job.id, "attempts", attempt, "error", err)
			return
		}
		d.retries.WithLabelValues(t.Name).Inc()
		wait := pause
		if p.retryAfter > wait {
			// The receiver said when it takes more (it is busy or
			// limits us): sooner would only be refused again.
			wait = min(p.retryAfter, maxBackoff)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
		case <-timer.C:
		}
		pause = min(2*pause, maxBackoff)
	}
}

// permanent is a receiver's answer other than 2xx.
type permanent struct {
	status int
	// retryAfter is the receiver's Retry-After of a 429 or 503; 0 is none.
	retryAfter time.Duration
}

// final reports whether the answer would be the same if asked again: a
// redirect (which is not followed) and a 4xx other than 408 and 429.
func (p permanent) final() bool {
	return p.status/100 == 3 || p.status/100 == 4 && p.status != http.StatusRequestTimeout && p.status != http.StatusTooManyRequests
}

func (p permanent) Error() string {
	if p.status/100 == 3 {
		return "the receiver answered " + strconv.Itoa(p.status) + ", a redirect, which is not followed: give the notifier the URL it redirects to"
	}
	if p.retryAfter > 0 {
		return "the receiver answered " + strconv.Itoa(p.status) + " with Retry-After " + p.retryAfter.String()
	}
	return "the receiver answered " + strconv.Itoa(p.status)
}

// retryAfter reads a Retry-After header, delay-seconds or an HTTP date
// (RFC 9110, 10.2.3), as a wait from now; 0 is none or unreadable.
func retryAfter(h string, now time.Time) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.ParseUint(h, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// Beyond maxBackoff it is maxBackoff anyway; bounding it first
		// keeps a huge number from overflowing the Duration (ParseUint
		// gives its largest for one out of range).
		return time.Duration(min(n, uint64(maxBackoff/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return min(max(t.Sub(now), 0), maxBackoff)
	}
	return 0
}

func (d *Dispatcher) send(ctx context.Context, t *Target, job delivery) error {
	ctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(job.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "toolsvc-notify")
	req.Header.Set(EventHeader, "approval."+string(job.event))
	req.Header.Set(DeliveryHeader, job.id)
	if len(t.secret) > 0 {
		req.Header.Set(SignatureHeader, Sign(t.secret, d.o.Now(), job.body))
	}
	resp, err := d.client.Do(req)
	if err != nil {
		// The url.Error would quote the URL, which is logged with the
		// failure: a Slack webhook's URL is its secret (urlFrom), in its
		// path, where redaction of queries does not reach. The host is
		// no secret and says which receiver failed.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = fmt.Errorf("POST to %s: %w", req.URL.Host, uerr.Err)
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	p := permanent{status: resp.StatusCode}
	if p.status == http.StatusTooManyRequests || p.status == http.StatusServiceUnavailable {
		p.retryAfter = retryAfter(resp.Header.Get("Retry-After"), d.o.Now())
	}
	return p
}

// Sign returns the signature header value of body sent at t.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac.Sum(nil))
}

// Verify checks a signature header against body: the MAC must match and
// its time be within tolerance of now. Receivers written in Go may use it.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return fmt.Errorf("malformed signature header")
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("signature time is %s away from now", d.Round(time.Second))
	}
	want := Sign(secret, time.Unix(sec, 0), body)
	if !hmac.Equal([]byte(want), []byte("t="+ts+",v1="+sig)) {
		return fmt.Errorf("signature does not match")
	}
	return nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "ntf_" + hex.EncodeToString(b[:])
}

// Message is the body of a generic webhook delivery.
type Message struct {
	ID       string           `json:"id"`
	Event    string           `json:"event"`
	Time     time.Time        `json:"time"`
	URL      string           `json:"url,omitempty"`
	Approval *MessageApproval `json:"approval"`
}

// MessageApproval is the approval request in a Message.
type MessageApproval struct {
	ID              string `json:"id"`
	Status          string `json:"status"`
	CallerID        string `json:"callerId"`
	ToolCallID      string `json:"toolCallId"`
	ToolName        string `json:"toolName"`
	Tier            string `json:"tier,omitempty"`
	Rule            string `json:"rule,omitempty"`
	Reason          string `json:"reason,omitempty"`
	ArgumentsDigest string `json:"argumentsDigest"`
	// Arguments, sent with includeArguments, are left out when longer
	// than registry.ListedArgumentsBytes, as in a list of requests: a
	// queue of notifications must not hold a copy of every large call.
	// ArgumentsBytes, sent with includeArguments, is their length; the
	// request (url, or GET /approvals/{id}) has them whole.
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	ArgumentsBytes int             `json:"argumentsBytes,omitempty"`
	CreatedAt      time.Time       `json:"createdAt"`
	ExpiresAt      time.Time       `json:"expiresAt"`
	DecidedAt      time.Time       `json:"decidedAt,omitzero"`
	DecidedBy      string          `json:"decidedBy,omitempty"`
	DecisionReason string          `json:"decisionReason,omitempty"`
}

// localOnly reports whether links below publicURL open only on the
// machine the service runs on: their host is localhost, a loopback or an
// unspecified address, or missing.
func localOnly(publicURL string) bool {
	if publicURL == "" {
		return false // no links
	}
	u, err := url.Parse(publicURL)
	if err != nil {
		return true
	}
	host := strings.ToLower(u.Hostname())
	if host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && (ip.IsLoopback() || ip.IsUnspecified())
}

// Link is the console page of an approval request below publicURL.
func Link(publicURL, approvalID string) string {
	if publicURL == "" {
		return ""
	}
	return strings.TrimRight(publicURL, "/") + "/ui/approvals/" + url.PathEscape(approvalID)
}

func (d *Dispatcher) render(t *Target, id string, ev registry.ApprovalEvent) ([]byte, error) {
	a := ev.Approval
	link := Link(d.o.PublicURL, a.ID)
	if t.Type == TypeSlack {
		return json.Marshal(slackMessage(ev, link))
	}
	m := Message{ID: id, Event: "approval." + string(ev.Kind), Time: ev.Time.UTC(), URL: link, Approval: &MessageApproval{
		ID: a.ID, Status: string(a.Status), CallerID: a.CallerID, ToolCallID: a.ToolCallID, ToolName: a.ToolName, Tier: string(a.Tier),
		Rule: a.Rule, Reason: a.Reason, ArgumentsDigest: a.ArgumentsDigest, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt,
		DecidedAt: a.DecidedAt, DecidedBy: a.DecidedBy, DecisionReason: a.DecisionReason,
	}}
	if t.args {
		// A listed request (an expiry is announced from a list) has its
		// length but may lack the arguments.
		m.Approval.ArgumentsBytes = max(a.ArgumentsBytes, len(a.Arguments))
		if m.Approval.ArgumentsBytes <= registry.ListedArgumentsBytes {
			m.Approval.Arguments = a.Arguments
		}
	}
	return json.Marshal(m)
}

// slackEscape escapes text for Slack's mrkdwn (&, < and > only).
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

func slackMessage(ev registry.ApprovalEvent, link string) map[string]any {
	a := ev.Approval
	var head string
	switch ev.Kind {
	case registry.EventApprovalRequested:
		head = fmt.Sprintf(":raised_hand: *Approval requested*: `%s` by %s", slackEscape(a.ToolName), slackEscape(a.CallerID))
	case registry.EventApprovalDecided:
		head = fmt.Sprintf(":white_check_mark: *%s* by %s: `%s` of %s", slackEscape(string(a.Status)), slackEscape(a.DecidedBy), slackEscape(a.ToolName), slackEscape(a.CallerID))
		if a.Status == registry.ApprovalDenied {
			head = ":no_entry:" + head[len(":white_check_mark:"):]
		}
	default:
		head = fmt.Sprintf(":hourglass: *Approval expired*: `%s` by %s; nobody decided in time", slackEscape(a.ToolName), slackEscape(a.CallerID))
	}
	detail := []string{}
	if a.Tier != "" {
		detail = append(detail, "tier "+slackEscape(string(a.Tier)))
	}
	if a.Rule != "" {
		detail = append(detail, "rule "+slackEscape(a.Rule))
	}
	if a.DecisionReason != "" {
		detail = append(detail, "reason: "+slackEscape(a.DecisionReason))
	}
	if ev.Kind == registry.EventApprovalRequested {
		detail = append(detail, "expires "+a.ExpiresAt.UTC().Format(time.RFC3339))
	}
	text := head
	if len(detail) > 0 {
		text += "\n" + strings.Join(detail, " · ")
	}
	if link != "" {
		text += "\n<" + link + "|Open the request in the console>"
	}
	return map[string]any{
		"text":   text,
		"blocks": []any{map[string]any{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": text}}},
	}
}

func pathMatchName(g, name string) (bool, error) { return path.Match(g, name) }
