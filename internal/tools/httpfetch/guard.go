package httpfetch

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/net/idna"
)

// refusal is a request the tools will not make. Its message says what is
// allowed; it reaches the model as E_TOOL.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refusef(format string, args ...any) *refusal {
	return &refusal{msg: fmt.Sprintf(format, args...)}
}

// rangeRule is a refused address range and how to describe it.
type rangeRule struct {
	prefix netip.Prefix
	what   string
}

// refusedRanges lists every range the address check refuses, the most
// specific first so messages name the narrowest reason.
func refusedRanges() []rangeRule {
	rules := []struct{ cidr, what string }{
		{"0.0.0.0/8", `a "this network" address`},
		{"10.0.0.0/8", "a private address"},
		{"100.64.0.0/10", "a carrier-grade NAT (shared) address"},
		{"127.0.0.0/8", "a loopback address"},
		{"169.254.0.0/16", "a link-local address"},
		{"172.16.0.0/12", "a private address"},
		{"192.0.0.0/24", "an IETF protocol assignment address"},
		{"192.0.2.0/24", "a documentation address"},
		{"192.88.99.0/24", "a 6to4 relay anycast address"},
		{"192.168.0.0/16", "a private address"},
		{"198.18.0.0/15", "a benchmarking address"},
		{"198.51.100.0/24", "a documentation address"},
		{"203.0.113.0/24", "a documentation address"},
		{"224.0.0.0/4", "a multicast address"},
		{"255.255.255.255/32", "the broadcast address"},
		{"240.0.0.0/4", "a reserved address"},
		{"::/128", "the unspecified address"},
		{"::1/128", "a loopback address"},
		{"::ffff:0:0/96", "an IPv4-mapped IPv6 address"},
		{"::/96", "an IPv4-compatible IPv6 address"},
		{"64:ff9b:1::/48", "a local-use NAT64 address"},
		{"100::/64", "a discard-only address"},
		{"2001::/32", "a Teredo address"},
		{"2001:2::/48", "a benchmarking address"},
		{"2001:10::/28", "an ORCHID address"},
		{"2001:20::/28", "an ORCHID address"},
		{"2001:db8::/32", "a documentation address"},
		{"3fff::/20", "a documentation address"},
		{"fc00::/7", "a unique local (private) address"},
		{"fe80::/10", "a link-local address"},
		{"fec0::/10", "a site-local address"},
		{"ff00::/8", "a multicast address"},
	}
	out := make([]rangeRule, len(rules))
	for i, r := range rules {
		out[i] = rangeRule{netip.MustParsePrefix(r.cidr), r.what}
	}
	return out
}

// metadataAddrs are cloud instance metadata and platform endpoints. Most
// lie in refused ranges anyway; they are listed so that only an exact
// AllowCIDRs entry admits them, and because 168.63.129.16 is public.
func metadataAddrs() []netip.Addr {
	return []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, …
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("168.63.129.16"),   // Azure WireServer
		netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud
	}
}

// guard holds the operator's rules; it is immutable once built.
type guard struct {
	allow      []netip.Prefix
	ranges     []rangeRule
	metadata   []netip.Addr
	allowHosts []string
	denyHosts  []string
	nat64      netip.Prefix
	sixToFour  netip.Prefix
}

func newGuard(o Options) *guard {
	g := &guard{ranges: refusedRanges(), metadata: metadataAddrs(),
		nat64: netip.MustParsePrefix("64:ff9b::/96"), sixToFour: netip.MustParsePrefix("2002::/16")}
	for _, p := range o.AllowCIDRs {
		if !p.IsValid() {
			continue
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		g.allow = append(g.allow, p.Masked())
	}
	g.allowHosts = normalizePatterns(o.AllowHosts)
	g.denyHosts = normalizePatterns(o.DenyHosts)
	return g
}

// checkAddr decides an address the client is about to connect to. It
// returns nil or a *refusal.
func (g *guard) checkAddr(a netip.Addr) error {
	a = a.WithZone("")
	if a.Is4In6() {
		// A mapped address on a dual-stack socket reaches the IPv4 host.
		a = a.Unmap()
	}
	if why := g.refusedAs(a); why != "" {
		return refusef("%s is %s", a, why)
	}
	return nil
}

// refusedAs says what refused address a is ("a loopback address
// (127.0.0.0/8)"), or "" when it is admitted.
func (g *guard) refusedAs(a netip.Addr) string {
	if slices.Contains(g.metadata, a) {
		for _, p := range g.allow {
			if p.IsSingleIP() && p.Addr() == a {
				return ""
			}
		}
		return "a cloud metadata address"
	}
	for _, p := range g.allow {
		if p.Contains(a) {
			return ""
		}
	}
	for _, r := range g.ranges {
		if r.prefix.Contains(a) {
			return fmt.Sprintf("%s (%s)", r.what, r.prefix)
		}
	}
	if v4, kind, ok := g.embeddedIPv4(a); ok {
		if why := g.refusedAs(v4); why != "" {
			return fmt.Sprintf("a %s address embedding %s, which is %s", kind, v4, why)
		}
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address a NAT64 (64:ff9b::/96) or 6to4
// (2002::/16) address leads to.
func (g *guard) embeddedIPv4(a netip.Addr) (netip.Addr, string, bool) {
	if !a.Is6() {
		return netip.Addr{}, "", false
	}
	b := a.As16()
	switch {
	case g.nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case g.sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	}
	return netip.Addr{}, "", false
}

// control is the net.Dialer Control hook: it runs after the socket is
// created and before connect(2), on the exact address about to be
// connected to, whatever resolved or redirected to it.
func (g *guard) control(network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return refusef("network %s is not allowed; only TCP connections are made", network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return refusef("cannot check dial address %q: %v", address, err)
	}
	if err := g.checkAddr(ap.Addr()); err != nil {
		return refusef("connection refused by policy: %v", err)
	}
	return nil
}

// checkURL checks a URL before it is requested (the first request and
// every redirect): scheme, form of the host, and the operator's host
// lists. Addresses are checked again at dial time.
func (g *guard) checkURL(u *url.URL) *refusal {
	if u.Scheme != "http" && u.Scheme != "https" {
		if u.Scheme == "" {
			return refusef("URL %q has no scheme; only absolute http:// and https:// URLs can be fetched", u.Redacted())
		}
		return refusef("URL scheme %q is not allowed; only http and https URLs can be fetched", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return refusef("URL %q has no host; write it as %s://host/path", u.Redacted(), u.Scheme)
	}
	if u.User != nil {
		return refusef("URLs with user info (user:password@host) are not allowed; send credentials in an Authorization header instead")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return refusef("port %q is not valid; use a port from 1 to 65535", p)
		}
	}
	host, r := canonicalHost(u)
	if r != nil {
		return r
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if r := g.checkLiteral(a); r != nil {
			return r
		}
		if err := g.checkAddr(a); err != nil {
			return refusef("%v; only public internet addresses can be fetched, unless an operator allows the range", err)
		}
	} else if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return refusef("host %q refers to this machine; only public internet hosts can be fetched", host)
	}
	if matchAny(g.denyHosts, host) {
		return refusef("host %q is denied by the operator", host)
	}
	if len(g.allowHosts) > 0 && !matchAny(g.allowHosts, host) {
		return refusef("host %q is not in the operator's list of allowed hosts (%s)", host, listPatterns(g.allowHosts))
	}
	return nil
}

// checkLiteral refuses IP literal forms that are legal but misleading,
// suggesting the plain form only when that would be fetched.
func (g *guard) checkLiteral(a netip.Addr) *refusal {
	switch {
	case a.Zone() != "":
		return refusef("IPv6 zones (%%%s) are not allowed in URLs", a.Zone())
	case a.Is4In6():
		if why := g.refusedAs(a.Unmap()); why != "" {
			return refusef("IPv4-mapped IPv6 address %s is not allowed, and the IPv4 address it maps, %s, is refused too: it is %s; "+
				"only public internet addresses can be fetched, in any spelling", a, a.Unmap(), why)
		}
		return refusef("IPv4-mapped IPv6 address %s is not allowed; write the IPv4 address %s directly", a, a.Unmap())
	}
	return nil
}

// canonicalHost returns the URL's host as the client dials it: an IP
// literal, or a lower-case ASCII (IDNA) host name without a trailing dot.
// It refuses hosts that are not valid names, and numeric hosts that some
// resolvers read as IPv4 in decimal, octal, hex or shortened form.
func canonicalHost(u *url.URL) (string, *refusal) {
	h := u.Hostname()
	if strings.HasPrefix(u.Host, "[") {
		a, err := netip.ParseAddr(h)
		if err != nil || !a.Is6() {
			return "", refusef("host %q is not a valid IPv6 literal", h)
		}
		return a.String(), nil
	}
	if a, err := netip.ParseAddr(h); err == nil && a.Is4() {
		return h, nil
	}
	name, err := normalizeName(h)
	if err != nil {
		return "", refusef("host %q is not a valid host name: %v", h, err)
	}
	if a, err := netip.ParseAddr(name); err == nil && a.Is4() {
		// A Unicode form (full-width digits) of a dotted IPv4 address.
		return name, nil
	}
	if endsInNumber(name) {
		return "", refusef("host %q is an ambiguous numeric address (decimal, octal, hexadecimal or shortened IPv4); "+
			"write an IPv4 address as four decimal numbers without leading zeros, like 93.184.215.14, or use a host name", h)
	}
	return name, nil
}

// normalizeName lower-cases a host name, converts it to its IDNA ASCII
// form and drops one trailing dot; it refuses anything that is not a
// sequence of 1-63 byte labels of letters, digits, '-' and '_'.
func normalizeName(h string) (string, error) {
	name, err := idna.Lookup.ToASCII(h)
	if err != nil {
		return "", err
	}
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" || len(name) > 253 {
		return "", errors.New("a host name has 1 to 253 characters")
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return "", errors.New("each dot-separated label has 1 to 63 characters")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return "", fmt.Errorf("character %q is not allowed in a host name", c)
			}
		}
	}
	return name, nil
}

// endsInNumber is the WHATWG URL test for hosts to be read as IPv4: the
// last label is all digits or 0x followed by hex digits.
func endsInNumber(name string) bool {
	last := name[strings.LastIndexByte(name, '.')+1:]
	if strings.HasPrefix(last, "0x") {
		return strings.Trim(last[2:], "0123456789abcdef") == ""
	}
	return last != "" && strings.Trim(last, "0123456789") == ""
}

func normalizePattern(p string) (string, error) {
	p = strings.TrimSpace(p)
	rest, wild := strings.CutPrefix(p, "*.")
	if a, err := netip.ParseAddr(rest); err == nil && !wild {
		return a.String(), nil
	}
	name, err := normalizeName(rest)
	if err != nil {
		return "", fmt.Errorf(`want a host name or "*." and a host name: %w`, err)
	}
	if wild {
		return "*." + name, nil
	}
	return name, nil
}

func normalizePatterns(ps []string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		n, err := normalizePattern(p)
		if err != nil {
			n = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(p)), ".")
		}
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

func matchAny(patterns []string, host string) bool {
	for _, p := range patterns {
		if suffix, ok := strings.CutPrefix(p, "*."); ok {
			if strings.HasSuffix(host, "."+suffix) {
				return true
			}
		} else if p == host {
			return true
		}
	}
	return false
}

func listPatterns(ps []string) string {
	const show = 10
	if len(ps) <= show {
		return strings.Join(ps, ", ")
	}
	return strings.Join(ps[:show], ", ") + fmt.Sprintf(", and %d more", len(ps)-show)
}
