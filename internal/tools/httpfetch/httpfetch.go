// Package httpfetch provides the http__get and http__post tools: HTTP
// requests a model may make to the public internet, and nowhere else.
//
// A model's arguments are hostile input, so the tools defend against
// server-side request forgery in layers:
//
//   - The URL is parsed strictly: http and https only, no user info, no
//     ambiguous numeric hosts (2130706433, 0177.0.0.1, 0x7f.1, 127.1), no
//     IPv4-mapped IPv6 literals, no zones, only valid host names.
//   - Host names are checked against the operator's DenyHosts and, when it
//     is set, AllowHosts, before the first request and on every redirect.
//   - The address every connection is actually made to is checked in the
//     net.Dialer Control hook, after resolution and immediately before
//     connect(2), so DNS rebinding, redirects and resolver tricks cannot
//     reach a refused address: loopback, private, link-local, CGNAT,
//     unspecified, multicast, broadcast, reserved, documentation and
//     benchmarking ranges, IPv4-mapped and IPv4-compatible IPv6, ULA,
//     NAT64 and 6to4 addresses that embed a refused IPv4 address, Teredo,
//     and cloud metadata addresses. AllowCIDRs opens ranges on purpose.
//   - No proxy from the environment, no cookie jar, at most five
//     redirects, each re-checked; when a redirect changes host or leaves
//     https, the Referer and the headers the call set (credentials above
//     all) are dropped, but for a few that hold no secret.
//   - The body is bounded while it is read (after gzip decoding, so a
//     compression bomb stops at the limit), HTML is converted to Markdown
//     from a bounded start of it, and the output is fitted to the call's
//     output limit with a truncation flag and a marker that says where
//     what it shows stops.
package httpfetch

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Defaults of Options.
const (
	DefaultTimeout         = 30 * time.Second
	DefaultMaxBytes        = 5 << 20
	DefaultBytes           = 1 << 20
	DefaultMaxRequestBytes = 1 << 20
	// MaxRedirects is how many redirects a request follows.
	MaxRedirects = 5
)

// Resolver resolves host names to addresses. *net.Resolver implements it;
// tests pass their own to map names to loopback without DNS. Whatever it
// returns is still checked at dial time.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure the HTTP tools.
//
// Host patterns (AllowHosts, DenyHosts) are either an exact host name
// ("example.com", matching only that name) or "*." followed by a name
// ("*.example.com", matching every subdomain of it at any depth but not
// example.com itself). Matching ignores case and a trailing dot, and is
// done on the IDNA (punycode) form of the URL's host, as it is dialled. An
// IP literal in a URL matches only a pattern that is the same IP text.
//
// The rules, in order, for every URL (the first request and each
// redirect):
//
//  1. A host that matches DenyHosts is refused.
//  2. When AllowHosts is non-empty, a host that matches none of its
//     patterns is refused: AllowHosts narrows what may be fetched, it
//     never opens an address.
//  3. Every address connected to must pass the address check: it is
//     admitted if it is in AllowCIDRs, and refused if it is in one of the
//     refused ranges (see the package comment). So a host in AllowHosts
//     that resolves to a private address is still refused, unless that
//     address is in AllowCIDRs. A cloud metadata address (169.254.169.254,
//     169.254.170.2, fd00:ec2::254, 100.100.100.200, 168.63.129.16,
//     192.0.0.192) is admitted only by an AllowCIDRs entry that is exactly
//     that single address (/32 or /128), never by a wider range.
type Options struct {
	// Version is the service version sent as User-Agent "toolsvc/<Version>".
	Version string
	// AllowCIDRs are address ranges admitted even though they would be
	// refused (for example an internal API at 10.1.2.3/32).
	AllowCIDRs []netip.Prefix
	// AllowHosts, when non-empty, are the only hosts that may be fetched.
	AllowHosts []string
	// DenyHosts are hosts that are never fetched.
	DenyHosts []string
	// Timeout is the tool's timeout and the largest timeoutMs a call may
	// ask for; 0 is DefaultTimeout.
	Timeout time.Duration
	// MaxBytes is the largest response body a call may read (decoded
	// bytes); 0 is DefaultMaxBytes.
	MaxBytes int64
	// DefaultBytes is the body limit of a call that does not set maxBytes;
	// 0 is DefaultBytes, and it is capped at MaxBytes.
	DefaultBytes int64
	// MaxRequestBytes bounds the body of http__post; 0 is
	// DefaultMaxRequestBytes.
	MaxRequestBytes int
	// MaxOutputBytes is the tools' output limit; 0 uses the registry default.
	MaxOutputBytes int
	// Resolver resolves host names; nil is net.DefaultResolver.
	Resolver Resolver
	// RootCAs verifies https servers; nil is the system pool.
	RootCAs *x509.CertPool
	// Propagator, when set, writes the call's trace context (W3C
	// traceparent of the execute_tool span) on every request, so the
	// fetched service's spans join the trace; nil sends none.
	Propagator propagation.TextMapPropagator
}

// Validate reports options the tools cannot honour: invalid CIDRs, host
// patterns that are not "name" or "*.name", negative limits.
func (o Options) Validate() error {
	var errs []error
	for _, p := range o.AllowCIDRs {
		if !p.IsValid() {
			errs = append(errs, fmt.Errorf("allow CIDR %v is not valid", p))
		}
	}
	for _, list := range []struct {
		name     string
		patterns []string
	}{{"allow host", o.AllowHosts}, {"deny host", o.DenyHosts}} {
		for _, p := range list.patterns {
			if _, err := normalizePattern(p); err != nil {
				errs = append(errs, fmt.Errorf("%s %q: %w", list.name, p, err))
			}
		}
	}
	if o.Timeout < 0 || o.MaxBytes < 0 || o.DefaultBytes < 0 || o.MaxRequestBytes < 0 || o.MaxOutputBytes < 0 {
		errs = append(errs, errors.New("timeouts and limits must not be negative"))
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.DefaultBytes <= 0 {
		o.DefaultBytes = DefaultBytes
	}
	o.DefaultBytes = min(o.DefaultBytes, o.MaxBytes)
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.Version == "" {
		o.Version = "dev"
	}
	return o
}

// Tools returns http__get and http__post, sharing one client. Invalid host
// patterns in o are kept as literal text (so a deny pattern still denies
// what it spells); call o.Validate first to fail fast on them.
func Tools(o Options) []*registry.Tool {
	f := newFetcher(o.withDefaults())
	return []*registry.Tool{f.tool("GET"), f.tool("POST")}
}

func (f *fetcher) tool(method string) *registry.Tool {
	yes, no := true, false
	def := registry.Definition{
		Tier:           registry.SideEffecting,
		Timeout:        f.o.Timeout,
		MaxOutputBytes: f.o.MaxOutputBytes,
		Tags:           []string{"http", "network"},
		Parameters:     f.schema(method),
		OutputSchema: json.RawMessage(`{"type": "object", "required": ["status", "headers", "contentType", "format", "body", "bytes", "truncated", "finalUrl"],
  "properties": {"status": {"type": "integer"}, "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "contentType": {"type": "string"}, "format": {"type": "string", "enum": ["markdown", "text", "json", "base64"]},
    "body": {"description": "The body: a string, or the parsed value when format is json."},
    "bytes": {"type": "integer"}, "truncated": {"type": "boolean"}, "finalUrl": {"type": "string"}, "note": {"type": "string"}}}`),
	}
	common := fmt.Sprintf("Only public internet addresses over http or https are reachable: "+
		"loopback, private, link-local and cloud metadata addresses are refused, and so are hosts the operator has not allowed. "+
		"Follows up to %d redirects (each re-checked). A non-2xx status is returned as a normal result with its status; read it. "+
		"The body comes back by format: auto converts HTML to Markdown, parses JSON, returns other text as text and binary data as base64; "+
		"it is cut at maxBytes (default %d, at most %d) or to fit the output limit, and 'truncated' and 'note' say so.",
		MaxRedirects, f.o.DefaultBytes, f.o.MaxBytes)
	switch method {
	case "GET":
		def.Name = "http__get"
		def.Description = "Fetch a URL with an HTTP GET request and return {status, headers, contentType, format, body, bytes, truncated, finalUrl, note}. " + common
		def.Annotations = &registry.Annotations{Title: "HTTP GET", ReadOnlyHint: &yes, IdempotentHint: &yes, OpenWorldHint: &yes}
	default:
		def.Name = "http__post"
		def.Description = "Send an HTTP POST request with a text body and return {status, headers, contentType, format, body, bytes, truncated, finalUrl, note}. " +
			"The Content-Type defaults to application/json when the body is valid JSON and text/plain otherwise; set it in headers to override. " + common
		def.Annotations = &registry.Annotations{Title: "HTTP POST", ReadOnlyHint: &no, DestructiveHint: &yes, IdempotentHint: &no, OpenWorldHint: &yes}
	}
	return &registry.Tool{Definition: def, Handler: registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
		return f.run(ctx, method, req)
	}), Normalize: normalizeURL}
}

// normalizeURL gives the url argument the spelling the request is made
// with, its scheme and host in lower case, so a policy rule on
// "http://example.com/" also sees "HTTP://Example.COM/" as that.
func normalizeURL(args map[string]any) bool {
	s, ok := args["url"].(string)
	if !ok {
		return false
	}
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	u.Host = strings.ToLower(u.Host)
	n := u.String()
	if n == s {
		return false
	}
	if again, err := url.Parse(n); err != nil || again.String() != n {
		return false
	}
	args["url"] = n
	return true
}

// refusedHeaders are request headers a call may not set, and why.
func refusedHeaders() map[string]string {
	hop := "it is a hop-by-hop or framing header managed by the HTTP client"
	return map[string]string{
		"Host":                "the host comes from the URL",
		"Connection":          hop,
		"Keep-Alive":          hop,
		"Proxy-Connection":    hop,
		"Te":                  hop,
		"Trailer":             hop,
		"Transfer-Encoding":   hop,
		"Upgrade":             hop,
		"Content-Length":      hop,
		"Expect":              hop,
		"Proxy-Authorization": "no proxy is used",
		"Proxy-Authenticate":  "no proxy is used",
		"Accept-Encoding":     "compression is negotiated by the tool (gzip, decoded and bounded)",
		"User-Agent":          "the tool identifies itself as toolsvc",
	}
}

func headerList(m map[string]string) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
