package httpfetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/net/http/httpguts"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// fetcher is the client both tools share.
type fetcher struct {
	o        Options
	guard    *guard
	resolver Resolver
	dialer   *net.Dialer
	client   *http.Client
	refused  map[string]string
}

func newFetcher(o Options) *fetcher {
	f := &fetcher{o: o, guard: newGuard(o), resolver: o.Resolver, refused: refusedHeaders()}
	if f.resolver == nil {
		f.resolver = net.DefaultResolver
	}
	f.dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: f.guard.control}
	tr := &http.Transport{
		Proxy:                  nil, // never a proxy from the environment
		DialContext:            f.dialContext,
		ForceAttemptHTTP2:      true,
		TLSClientConfig:        &tls.Config{RootCAs: o.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    10 * time.Second,
		MaxIdleConns:           32,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	f.client = &http.Client{Transport: tr}
	return f
}

// maxAddrs bounds how many resolved addresses one dial tries.
const maxAddrs = 8

// dialContext resolves with the configured resolver and dials the
// addresses in turn. It checks nothing itself: the dialer's Control hook
// checks each address right before connecting.
func (f *fetcher) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return f.dialer.DialContext(ctx, network, addr)
	}
	addrs, err := f.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	var refused []string
	var firstErr error
	for _, a := range addrs[:min(len(addrs), maxAddrs)] {
		c, err := f.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		var r *refusal
		if errors.As(err, &r) {
			refused = append(refused, r.msg)
		} else if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return nil, refusef("host %s resolves only to refused addresses: %s", host, strings.Join(refused, "; "))
}

// checkRedirect re-checks every redirect target and bounds the chain.
// When the target changes host (or port) or leaves https, it sends no
// Referer (which may hold the URL's secrets) and none of the headers the
// call set (set: their canonical names) but those in keptHeaders: the
// credentials a model passes (Authorization, Cookie, X-Api-Key, …) are
// for the URL's host only.
func (f *fetcher) checkRedirect(req *http.Request, via []*http.Request, set []string) error {
	if len(via) > MaxRedirects {
		return refusef("stopped after %d redirects (the next one pointed to %s); fetch the final URL directly if you know it", MaxRedirects, req.URL.Redacted())
	}
	if r := f.guard.checkURL(req.URL); r != nil {
		return refusef("redirect to %s refused: %v", req.URL.Redacted(), r)
	}
	first := via[0].URL
	if !strings.EqualFold(req.URL.Host, first.Host) || (first.Scheme == "https" && req.URL.Scheme != "https") {
		req.Header.Del("Referer")
		for _, h := range set {
			if !slices.Contains(keptHeaders(), h) {
				req.Header.Del(h)
			}
		}
		// Not set by the call, but never for another host either.
		for _, h := range []string{"Authorization", "Cookie", "Cookie2"} {
			req.Header.Del(h)
		}
	}
	return nil
}

// keptHeaders are the headers a call sets that a redirect to another host
// still sends: they say what is wanted, and hold no secret.
func keptHeaders() []string {
	return []string{"Accept", "Accept-Language", "Content-Language", "Content-Type", "Range"}
}

// args are the tools' arguments.
type args struct {
	URL       string            `json:"url"`
	Headers   map[string]string `json:"headers"`
	Body      *string           `json:"body"`
	TimeoutMs int64             `json:"timeoutMs"`
	MaxBytes  int64             `json:"maxBytes"`
	Format    string            `json:"format"`
}

func (f *fetcher) schema(method string) json.RawMessage {
	type m = map[string]any
	props := m{
		"url": m{"type": "string", "minLength": 1, "maxLength": 8192,
			"description": "Absolute http:// or https:// URL of a public internet host, e.g. https://example.com/docs/page.html. No user:password@ part.",
			"examples":    []string{"https://example.com/"}},
		"headers": m{"type": "object", "maxProperties": 32,
			"description": "Request headers, name to value. Not allowed: " + headerList(f.refused) +
				". Only the URL's host gets them: a redirect that changes host or leaves https drops all but " + strings.Join(keptHeaders(), ", ") + " (and sends no Referer).",
			"propertyNames":        m{"pattern": "^[A-Za-z0-9!#$%&'*+.^_`|~-]+$", "maxLength": 128},
			"additionalProperties": m{"type": "string", "maxLength": 8192}},
		"timeoutMs": m{"type": "integer", "minimum": 100, "maximum": f.o.Timeout.Milliseconds(),
			"description": fmt.Sprintf("Time allowed for the whole request including redirects and the body, in milliseconds (default and maximum %d).", f.o.Timeout.Milliseconds())},
		"maxBytes": m{"type": "integer", "minimum": 1, "maximum": f.o.MaxBytes,
			"description": fmt.Sprintf("Most body bytes to read, after decompression (default %d). A longer body is cut and truncated is true.", f.o.DefaultBytes)},
		"format": m{"type": "string", "enum": []string{"auto", "text", "markdown", "json", "raw"}, "default": "auto",
			"description": "How to return the body: auto (HTML as Markdown, JSON parsed, other text as text, binary as base64), " +
				"text (decoded to UTF-8, HTML left as HTML), markdown (HTML converted to Markdown), json (parsed JSON; text when it is not valid JSON), " +
				"raw (the bytes unchanged: a string when they are UTF-8, base64 otherwise)."},
	}
	if method == "POST" {
		props["body"] = m{"type": "string", "maxLength": f.o.MaxRequestBytes,
			"description": "Request body, sent as it is (UTF-8). Content-Type defaults to application/json when it is valid JSON, text/plain otherwise."}
	}
	b, err := json.Marshal(m{"type": "object", "properties": props, "required": []string{"url"}, "additionalProperties": false})
	if err != nil {
		panic(err) // a literal map of strings and numbers always marshals
	}
	return b
}

func refusedError(r *refusal) *registry.Error {
	return registry.ToolError("refused: "+r.msg,
		"Fetch only public http(s) URLs by host name or public IP address. Do not retry this URL in another spelling; if it must be reachable, ask the operator to allow it.")
}

// countBound bounds how much of a cut body is read to count (and keep) it.
const countBound = 256 << 20

func (f *fetcher) run(ctx context.Context, method string, req *registry.Request) (any, error) {
	var a args
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	if method == "GET" {
		a.Body = nil
	}
	hdr, herr := f.requestHeaders(a.Headers)
	if herr != nil {
		return nil, herr
	}
	var body io.Reader
	if method == "POST" && a.Body != nil {
		if len(*a.Body) > f.o.MaxRequestBytes {
			return nil, registry.ToolError(fmt.Sprintf("body is %d bytes; at most %d are allowed", len(*a.Body), f.o.MaxRequestBytes), "Send a smaller body.")
		}
		body = strings.NewReader(*a.Body)
		if hdr.Get("Content-Type") == "" {
			if json.Valid([]byte(*a.Body)) {
				hdr.Set("Content-Type", "application/json")
			} else {
				hdr.Set("Content-Type", "text/plain; charset=utf-8")
			}
		}
	}
	timeout, byArgs := requestTimeout(ctx, f.o.Timeout, a.TimeoutMs)
	limit := f.o.DefaultBytes
	if a.MaxBytes > 0 {
		limit = min(a.MaxBytes, f.o.MaxBytes)
	}
	format := a.Format
	if format == "" {
		format = "auto"
	}

	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(rctx, method, a.URL, body)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, registry.ToolError(fmt.Sprintf("URL %q is not valid: %v", a.URL, err),
			"Pass an absolute URL like https://example.com/path, percent-encoding spaces and special characters.")
	}
	// Check the very URL the client will request.
	if r := f.guard.checkURL(hreq.URL); r != nil {
		return nil, refusedError(r)
	}
	hreq.Header = hdr
	hreq.Header.Set("User-Agent", "toolsvc/"+f.o.Version)
	if f.o.Propagator != nil {
		f.o.Propagator.Inject(ctx, propagation.HeaderCarrier(hreq.Header))
	}
	set := make([]string, 0, len(a.Headers))
	for name := range a.Headers {
		set = append(set, http.CanonicalHeaderKey(name))
	}
	client := *f.client // shares the transport
	client.CheckRedirect = func(req *http.Request, via []*http.Request) error { return f.checkRedirect(req, via, set) }
	resp, err := client.Do(hreq)
	if err != nil {
		return nil, f.requestError(ctx, rctx, hreq.URL, err, timeout, byArgs)
	}
	defer resp.Body.Close()

	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(min(resp.ContentLength, limit+1)))
	}
	_, rerr := buf.ReadFrom(io.LimitReader(resp.Body, limit+1))
	if rerr != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	out := &output{
		Status:      resp.StatusCode,
		Headers:     safeHeaders(resp.Header),
		ContentType: resp.Header.Get("Content-Type"),
		FinalURL:    resp.Request.URL.Redacted(),
	}
	data := buf.Bytes()
	whole := bodySize{total: int64(len(data)), exact: true}
	if int64(len(data)) > limit {
		// Count the rest within the call's deadline (the request's ends
		// the body), keeping all of it when the service keeps cut outputs.
		whole.total, whole.exact, whole.spill = req.CountRest(ctx, "body", data, resp.Body, countBound)
		whole.counted, whole.maxBytes = true, limit
		data = data[:limit]
		out.Truncated = true
	}
	if rerr != nil {
		out.Truncated = true
		msg := rerr.Error()
		if rctx.Err() != nil {
			msg = fmt.Sprintf("the %s timeout expired", timeout)
		}
		out.addNote(fmt.Sprintf("reading the body stopped after %d bytes: %s", len(data), msg))
	}
	out.Bytes = len(data)
	reserve := noteRoom(req.CallID, req.MaxOutputBytes)
	render(rctx, out, data, resp.Header.Get("Content-Encoding"), format,
		limits{html: convertLimit(req.MaxOutputBytes), output: req.MaxOutputBytes, reserve: reserve})
	out.fit(req.MaxOutputBytes, reserve)
	out.finish(ctx, req, whole)
	return out, nil
}

// maxReserve bounds the time requestTimeout keeps back from the call.
const maxReserve = time.Second

// requestTimeout is how long a request may take: the tool's timeout, or
// the timeoutMs argument when that is shorter (byArgs, so a larger
// one could help), and in any case less than the time the call has left.
// At the call's deadline the executor answers E_TIMEOUT and whatever was
// read is lost, so the request ends first: a tenth of the time left
// before it, at most maxReserve, kept for counting, rendering and fitting
// what was read (HTML is not converted once the request's deadline has
// passed), so the tool answers in its own words with the partial body.
// A timeout it derives is rounded, so that messages say "29s", not
// "28.999874s", by less than half the reserve.
func requestTimeout(ctx context.Context, limit time.Duration, ms int64) (timeout time.Duration, byArgs bool) {
	timeout = limit
	if d := time.Duration(ms) * time.Millisecond; ms > 0 && d < timeout {
		timeout, byArgs = d, true
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return timeout, byArgs
	}
	left := time.Until(dl)
	d := left - min(left/10, maxReserve)
	if d >= timeout {
		return timeout, byArgs
	}
	if d >= time.Second {
		// The reserve is more than 100ms here.
		return d.Round(100 * time.Millisecond), false
	}
	return d.Truncate(time.Millisecond), false
}

// requestHeaders validates the call's headers.
func (f *fetcher) requestHeaders(in map[string]string) (http.Header, error) {
	h := make(http.Header, len(in)+2)
	for name, value := range in {
		canon := http.CanonicalHeaderKey(name)
		if why, ok := f.refused[canon]; ok {
			return nil, registry.ToolError(fmt.Sprintf("header %s may not be set: %s", canon, why),
				"Remove it from headers. Headers that may not be set: "+headerList(f.refused)+".")
		}
		if strings.HasPrefix(canon, "Proxy-") {
			return nil, registry.ToolError(fmt.Sprintf("header %s may not be set: no proxy is used", canon), "Remove it from headers.")
		}
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, registry.ToolError(fmt.Sprintf("header name %q is not a valid HTTP header name", name), "Use letters, digits and '-' in header names.")
		}
		if !httpguts.ValidHeaderFieldValue(value) {
			return nil, registry.ToolError(fmt.Sprintf("value of header %s contains characters not allowed in HTTP headers (such as line breaks)", canon),
				"Put the value on one line without control characters.")
		}
		h.Add(canon, value)
	}
	return h, nil
}

// requestError turns a failed request into an error result.
func (f *fetcher) requestError(parent, rctx context.Context, requested *url.URL, err error, timeout time.Duration, byArgs bool) error {
	var r *refusal
	if errors.As(err, &r) {
		var ue *url.Error
		if errors.As(err, &ue) && ue.URL != requested.String() && !strings.HasPrefix(r.msg, "redirect") && !strings.HasPrefix(r.msg, "stopped") {
			r = refusef("redirect to %s refused: %s", ue.URL, r.msg)
		}
		return refusedError(r)
	}
	if parent.Err() != nil {
		return parent.Err()
	}
	if rctx.Err() != nil {
		hint := "That is as long as the call may take: the server may be down or overloaded. Try again later, or another URL."
		if byArgs {
			hint = fmt.Sprintf("Retry with a larger timeoutMs (at most %d), or try again later.", f.o.Timeout.Milliseconds())
		}
		return registry.ToolError(fmt.Sprintf("no response within %s", timeout), hint)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return registry.ToolError(fmt.Sprintf("could not resolve host %s: %s", dnsErr.Name, dnsErr.Err),
			"Check the spelling of the host name.")
	}
	var certErr *tls.CertificateVerificationError
	var hostErr x509.HostnameError
	var authErr x509.UnknownAuthorityError
	if errors.As(err, &certErr) || errors.As(err, &hostErr) || errors.As(err, &authErr) {
		return registry.ToolError("TLS certificate verification failed: "+err.Error(),
			"The server's certificate is not trusted for this host; do not retry over http unless the user asks for it.")
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		// The service's own limit, not the site's: a model told "request
		// failed" would take the site for down.
		return registry.ToolError("the request was not sent: the service has no file descriptor left for a connection (too many open files); the site was not reached",
			"This is the service's limit, not the site's: try again in a few seconds, or make fewer calls at once.")
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error()
	}
	return registry.ToolError("request failed: "+msg, "Check the URL; the server may be down or refusing connections.")
}
