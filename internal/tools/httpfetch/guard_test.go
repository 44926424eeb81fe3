package httpfetch

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

func prefixes(t *testing.T, cidrs ...string) []netip.Prefix {
	t.Helper()
	out := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = netip.MustParsePrefix(c)
	}
	return out
}

func TestCheckAddr(t *testing.T) {
	tests := []struct {
		addr  string
		allow []string
		want  string // "" admitted, else a fragment of the refusal
	}{
		{addr: "93.184.215.14"},
		{addr: "8.8.8.8"},
		{addr: "2606:4700:4700::1111"},
		{addr: "0.0.0.0", want: `"this network"`},
		{addr: "0.1.2.3", want: `"this network"`},
		{addr: "10.1.2.3", want: "private"},
		{addr: "100.64.0.1", want: "carrier-grade NAT"},
		{addr: "100.127.255.255", want: "carrier-grade NAT"},
		{addr: "100.128.0.1"},
		{addr: "127.0.0.1", want: "loopback"},
		{addr: "127.255.255.254", want: "loopback"},
		{addr: "169.254.1.1", want: "link-local"},
		{addr: "172.16.0.1", want: "private"},
		{addr: "172.31.255.255", want: "private"},
		{addr: "172.32.0.1"},
		{addr: "192.0.0.8", want: "IETF protocol"},
		{addr: "192.0.2.1", want: "documentation"},
		{addr: "192.168.1.1", want: "private"},
		{addr: "198.18.0.1", want: "benchmarking"},
		{addr: "198.51.100.7", want: "documentation"},
		{addr: "203.0.113.9", want: "documentation"},
		{addr: "224.0.0.1", want: "multicast"},
		{addr: "239.255.255.250", want: "multicast"},
		{addr: "240.0.0.1", want: "reserved"},
		{addr: "255.255.255.255", want: "broadcast"},
		{addr: "::", want: "unspecified"},
		{addr: "::1", want: "loopback"},
		{addr: "::127.0.0.1", want: "IPv4-compatible"},
		{addr: "::ffff:127.0.0.1", want: "loopback"}, // unmapped first: a dual-stack socket reaches 127.0.0.1
		{addr: "::ffff:8.8.8.8"},
		{addr: "fc00::1", want: "unique local"},
		{addr: "fdff::1", want: "unique local"},
		{addr: "fe80::1", want: "link-local"},
		{addr: "fe80::1%eth0", want: "link-local"},
		{addr: "fec0::1", want: "site-local"},
		{addr: "ff02::1", want: "multicast"},
		{addr: "2001:db8::1", want: "documentation"},
		{addr: "2001:0:4136:e378:8000:63bf:3fff:fdd2", want: "Teredo"},
		{addr: "64:ff9b::7f00:1", want: "64:ff9b::7f00:1 is a NAT64 address embedding 127.0.0.1, which is a loopback address (127.0.0.0/8)"},
		{addr: "64:ff9b::a9fe:a9fe", want: "metadata"},
		{addr: "64:ff9b::808:808"},
		{addr: "64:ff9b:1::1", want: "local-use NAT64"},
		{addr: "2002:7f00:1::1", want: "6to4 address embedding 127.0.0.1"},
		{addr: "2002:c0a8:101::1", want: "6to4 address embedding 192.168.1.1"},
		{addr: "2002:808:808::1"},
		// Cloud metadata.
		{addr: "169.254.169.254", want: "metadata"},
		{addr: "169.254.170.2", want: "metadata"},
		{addr: "fd00:ec2::254", want: "metadata"},
		{addr: "100.100.100.200", want: "metadata"},
		{addr: "168.63.129.16", want: "metadata"},
		{addr: "192.0.0.192", want: "metadata"},
		// Operator allowlist.
		{addr: "127.0.0.1", allow: []string{"127.0.0.1/32"}},
		{addr: "127.0.0.2", allow: []string{"127.0.0.1/32"}, want: "loopback"},
		{addr: "::ffff:127.0.0.1", allow: []string{"127.0.0.1/32"}},
		{addr: "127.0.0.1", allow: []string{"::ffff:127.0.0.0/104"}},
		{addr: "10.9.8.7", allow: []string{"10.0.0.0/8"}},
		{addr: "64:ff9b::a00:1", allow: []string{"10.0.0.0/8"}},
		{addr: "fd12::1", allow: []string{"fd12::/16"}},
		{addr: "169.254.169.254", allow: []string{"169.254.0.0/16"}, want: "metadata"},
		{addr: "169.254.169.254", allow: []string{"0.0.0.0/0"}, want: "metadata"},
		{addr: "169.254.169.254", allow: []string{"169.254.169.254/32"}},
		{addr: "169.254.1.1", allow: []string{"169.254.0.0/16"}},
	}
	for _, tt := range tests {
		g := newGuard(Options{AllowCIDRs: prefixes(t, tt.allow...)})
		err := g.checkAddr(netip.MustParseAddr(tt.addr))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s (allow %v): refused: %v", tt.addr, tt.allow, err)
		case tt.want != "" && err == nil:
			t.Errorf("%s (allow %v): admitted, want refusal %q", tt.addr, tt.allow, tt.want)
		case tt.want != "" && !strings.Contains(err.Error(), tt.want):
			t.Errorf("%s (allow %v): refusal %q does not mention %q", tt.addr, tt.allow, err, tt.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	tests := []struct {
		url   string
		opts  Options
		want  string // "" passes the pre-check
		canon string
	}{
		{url: "https://example.com/path?q=1", canon: "example.com"},
		{url: "http://EXAMPLE.com./", canon: "example.com"},
		{url: "http://93.184.215.14:8080/", canon: "93.184.215.14"},
		{url: "http://[2606:4700:4700::1111]/", canon: "2606:4700:4700::1111"},
		{url: "http://bücher.example/", canon: "xn--bcher-kva.example"},
		{url: "http://1e100.net/", canon: "1e100.net"},
		{url: "file:///etc/passwd", want: `scheme "file" is not allowed`},
		{url: "gopher://example.com:70/", want: `scheme "gopher"`},
		{url: "ftp://example.com/", want: `scheme "ftp"`},
		{url: "javascript:alert(1)", want: `scheme "javascript"`},
		{url: "//example.com/", want: "no scheme"},
		{url: "http:example.com", want: "no host"},
		{url: "http:///path", want: "no host"},
		{url: "http://user:pw@example.com/", want: "user info"},
		{url: "http://example.com@127.0.0.1/", want: "user info"},
		{url: "http://example.com:0/", want: "port"},
		{url: "http://example.com:70000/", want: "port"},
		{url: "http://127.0.0.1/", want: "loopback"},
		{url: "http://2130706433/", want: "ambiguous numeric"},
		{url: "http://0177.0.0.1/", want: "ambiguous numeric"},
		{url: "http://0x7f.1/", want: "ambiguous numeric"},
		{url: "http://0x7f000001/", want: "ambiguous numeric"},
		{url: "http://127.1/", want: "ambiguous numeric"},
		{url: "http://127.0.0.1./", want: "loopback"},
		{url: "http://127.000.000.001/", want: "ambiguous numeric"},
		{url: "http://example.0x10/", want: "ambiguous numeric"},
		{url: "http://１２７.０.０.１/", want: "loopback"},
		{url: "http://%31%32%37.0.0.1/", want: "loopback"},
		{url: "http://[::1]/", want: "loopback"},
		{url: "http://[::]/", want: "unspecified"},
		// The IPv4 form is suggested only when it would be fetched.
		{url: "http://[::ffff:127.0.0.1]/", want: "IPv4-mapped IPv6 address ::ffff:127.0.0.1 is not allowed, and the IPv4 address it maps, 127.0.0.1, is refused too: it is a loopback address"},
		{url: "http://[::ffff:7f00:1]/", want: "is refused too"},
		{url: "http://[::ffff:8.8.8.8]/", want: "IPv4-mapped IPv6 address ::ffff:8.8.8.8 is not allowed; write the IPv4 address 8.8.8.8 directly"},
		{url: "http://[fe80::1%25eth0]/", want: "zones"},
		{url: "http://[169.254.169.254]/", want: "not a valid IPv6 literal"},
		{url: "http://169.254.169.254/latest/meta-data/", want: "metadata"},
		{url: "http://[fd00:ec2::254]/", want: "metadata"},
		{url: "http://localhost/", want: "this machine"},
		{url: "http://api.LOCALHOST/", want: "this machine"},
		{url: "http://exa mple.com/", want: "not a valid host name"},
		{url: "http://a..b/", want: "not a valid host name"},
		{url: "http://evil.test/", opts: Options{DenyHosts: []string{"EVIL.test."}}, want: "denied by the operator"},
		{url: "http://x.evil.test/", opts: Options{DenyHosts: []string{"*.evil.test"}}, want: "denied"},
		{url: "http://evil.test/", opts: Options{DenyHosts: []string{"*.evil.test"}}, canon: "evil.test"},
		{url: "http://a.good.test/", opts: Options{AllowHosts: []string{"*.good.test"}}, canon: "a.good.test"},
		{url: "http://good.test/", opts: Options{AllowHosts: []string{"*.good.test"}}, want: "not in the operator's list of allowed hosts (*.good.test)"},
		{url: "http://other.test/", opts: Options{AllowHosts: []string{"good.test"}}, want: "not in the operator's list"},
		{url: "http://127.0.0.1/", opts: Options{AllowCIDRs: prefixes(t, "127.0.0.1/32")}, canon: "127.0.0.1"},
		{url: "http://127.0.0.1/", opts: Options{AllowCIDRs: prefixes(t, "127.0.0.1/32"), DenyHosts: []string{"127.0.0.1"}}, want: "denied"},
		// Ambiguous forms stay refused even when their address is allowed.
		{url: "http://2130706433/", opts: Options{AllowCIDRs: prefixes(t, "127.0.0.1/32")}, want: "ambiguous numeric"},
		{url: "http://[::ffff:127.0.0.1]/", opts: Options{AllowCIDRs: prefixes(t, "127.0.0.1/32")}, want: "write the IPv4 address 127.0.0.1 directly"},
	}
	for _, tt := range tests {
		u, err := url.Parse(tt.url)
		if err != nil {
			if tt.want == "" {
				t.Errorf("%s: url.Parse: %v", tt.url, err)
			}
			continue
		}
		g := newGuard(tt.opts)
		r := g.checkURL(u)
		switch {
		case tt.want == "" && r != nil:
			t.Errorf("%s: refused: %v", tt.url, r)
		case tt.want != "" && r == nil:
			t.Errorf("%s: passed, want refusal %q", tt.url, tt.want)
		case tt.want != "" && !strings.Contains(r.Error(), tt.want):
			t.Errorf("%s: refusal %q does not mention %q", tt.url, r, tt.want)
		}
		if tt.canon != "" {
			if got, r := canonicalHost(u); r != nil || got != tt.canon {
				t.Errorf("%s: canonical host %q (%v), want %q", tt.url, got, r, tt.canon)
			}
		}
	}
}

// TestControlRefusesLiteralDial dials the client's dial function directly
// with literal loopback addresses, past every URL check: the Control hook
// refuses them before connect, so the listener accepts nothing.
func TestControlRefusesLiteralDial(t *testing.T) {
	ln4 := listen(t, "127.0.0.1:0")
	targets := []*countingListener{ln4}
	if ln6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		targets = append(targets, newCounting(t, ln6))
	} else {
		t.Logf("no IPv6 loopback (%v); checking IPv4 only", err)
	}
	f := newFetcher(Options{}.withDefaults())
	for _, ln := range targets {
		for _, addr := range []string{ln.Addr().String(), mappedAddr(ln)} {
			if addr == "" {
				continue
			}
			c, err := f.dialContext(context.Background(), "tcp", addr)
			if err == nil {
				c.Close()
				t.Fatalf("dial %s: connected, want refusal", addr)
			}
			var r *refusal
			if !errors.As(err, &r) || !strings.Contains(err.Error(), "loopback") {
				t.Errorf("dial %s: %v, want a loopback refusal", addr, err)
			}
		}
		if n := ln.accepted.Load(); n != 0 {
			t.Errorf("%s accepted %d connections, want 0", ln.Addr(), n)
		}
	}

	// The same dial is admitted by an allow CIDR, so the refusal above is
	// the guard and not an unreachable listener.
	f = newFetcher(Options{AllowCIDRs: prefixes(t, "127.0.0.1/32")}.withDefaults())
	c, err := f.dialContext(context.Background(), "tcp", ln4.Addr().String())
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	c.Close()
}

func mappedAddr(ln net.Listener) string {
	ap := netip.MustParseAddrPort(ln.Addr().String())
	if !ap.Addr().Is4() {
		return ""
	}
	return netip.AddrPortFrom(netip.AddrFrom16(ap.Addr().As16()), ap.Port()).String()
}

func TestOptionsValidate(t *testing.T) {
	if err := (Options{AllowHosts: []string{"*.example.com", "api.example.org"}, DenyHosts: []string{"1.2.3.4"},
		AllowCIDRs: prefixes(t, "10.0.0.0/8")}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
	err := Options{AllowHosts: []string{"*"}, DenyHosts: []string{"bad host"}, AllowCIDRs: []netip.Prefix{{}}, MaxBytes: -1}.Validate()
	if err == nil {
		t.Fatal("invalid options passed")
	}
	for _, want := range []string{`allow host "*"`, `deny host "bad host"`, "allow CIDR", "negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func BenchmarkCheckAddr(b *testing.B) {
	g := newGuard(Options{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}})
	public := netip.MustParseAddr("2606:4700:4700::1111")
	for b.Loop() {
		if g.checkAddr(public) != nil {
			b.Fatal("refused")
		}
	}
}
