package policy

import (
	"crypto/x509"
	"net"
	"net/url"
	"strings"
	"testing"
)

// TestClientCertSANTypes: a configured SAN matches only a certificate SAN
// of its own type. A CA constrains DNS names, e-mail addresses, URIs and
// IP addresses separately, so a DNS name "ops@example.com" it lets a
// client have must not pass for the e-mail address of a caller.
func TestClientCertSANTypes(t *testing.T) {
	callers := []CallerDocument{
		{Name: "ops-mail", Source: "c.yaml:1", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"ops@example.com"}}}},
		{Name: "build-bot", Source: "c.yaml:8", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"spiffe://example.org/build-bot"}}}},
		{Name: "urn", Source: "c.yaml:15", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"urn:example:agent"}}}},
		{Name: "node", Source: "c.yaml:22", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"10.0.0.7"}}}},
		{Name: "host", Source: "c.yaml:29", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"builder.clients.example"}}}},
		// Typed prefixes, any case, as openssl prints SANs: a DNS name
		// that looks like an IP address, an e-mail address given as such.
		{Name: "dns-ip", Source: "c.yaml:36", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"DNS:10.9.9.9"}}}},
		{Name: "typed", Source: "c.yaml:43", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"email:typed@example.com", "ip:2001:db8::7", "uri:spiffe://example.org/typed"}}}},
	}
	a, err := NewAuthenticator(AuthOptions{Callers: callers})
	if err != nil {
		t.Fatal(err)
	}
	uri := func(s string) []*url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return []*url.URL{u}
	}
	for _, tc := range []struct {
		name string
		cert *x509.Certificate
		want string // "" is no caller
	}{
		{"e-mail SAN", &x509.Certificate{EmailAddresses: []string{"ops@example.com"}}, "ops-mail"},
		{"e-mail SAN, domain in another case", &x509.Certificate{EmailAddresses: []string{"ops@EXAMPLE.com"}}, "ops-mail"},
		{"e-mail SAN, local part in another case", &x509.Certificate{EmailAddresses: []string{"OPS@example.com"}}, ""},
		{"DNS SAN spelling an e-mail address", &x509.Certificate{DNSNames: []string{"ops@example.com"}}, ""},
		{"URI SAN", &x509.Certificate{URIs: uri("spiffe://example.org/build-bot")}, "build-bot"},
		{"DNS SAN spelling a URI", &x509.Certificate{DNSNames: []string{"spiffe://example.org/build-bot"}}, ""},
		{"e-mail SAN spelling a URI", &x509.Certificate{EmailAddresses: []string{"spiffe://example.org/build-bot"}}, ""},
		{"URN SAN", &x509.Certificate{URIs: uri("urn:example:agent")}, "urn"},
		{"DNS SAN spelling a URN", &x509.Certificate{DNSNames: []string{"urn:example:agent"}}, ""},
		{"IP SAN", &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("10.0.0.7")}}, "node"},
		{"IP SAN, 16-byte form", &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("10.0.0.7").To16()}}, "node"},
		{"DNS SAN spelling an IP address", &x509.Certificate{DNSNames: []string{"10.0.0.7"}}, ""},
		{"DNS SAN", &x509.Certificate{DNSNames: []string{"builder.clients.example"}}, "host"},
		{"DNS SAN in another case", &x509.Certificate{DNSNames: []string{"Builder.Clients.Example"}}, "host"},
		{"e-mail SAN spelling a DNS name", &x509.Certificate{EmailAddresses: []string{"builder.clients.example"}}, ""},
		{"dns: names a DNS SAN that looks like an IP address", &x509.Certificate{DNSNames: []string{"10.9.9.9"}}, "dns-ip"},
		{"dns: is not an IP SAN", &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("10.9.9.9")}}, ""},
		{"email:", &x509.Certificate{EmailAddresses: []string{"typed@example.com"}}, "typed"},
		{"email: is not a DNS SAN", &x509.Certificate{DNSNames: []string{"typed@example.com"}}, ""},
		{"ip:", &x509.Certificate{IPAddresses: []net.IP{net.ParseIP("2001:db8::7")}}, "typed"},
		{"uri:", &x509.Certificate{URIs: uri("spiffe://example.org/typed")}, "typed"},
		{"uri: is not a DNS SAN", &x509.Certificate{DNSNames: []string{"spiffe://example.org/typed"}}, ""},
	} {
		c, ok := a.AuthenticateCert(tc.cert)
		got := ""
		if ok {
			got = c.ID
		}
		if got != tc.want {
			t.Errorf("%s: authenticated %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestClientCertSANsCheckedAtLoad: an entry that is no SAN of the type it
// has (or names) fails the load, naming the file, line, caller and entry
// and saying how to give the type.
func TestClientCertSANsCheckedAtLoad(t *testing.T) {
	for _, tc := range []struct {
		san, want string
	}{
		{"ops@", "is not an e-mail address"},
		{"@example.com", "is not an e-mail address"},
		{"build bot.example", "no spaces or control characters"},
		{"build/bot.example", "is not a DNS name"},
		{"host..example", "is not a DNS name"},
		{"ops@example.com:8443", "is not a URI with a scheme"},
		{"ip:10.0.0.300", "must be an IP address"},
		{"uri:build.example", "is not a URI with a scheme"},
		{"email:build.example", "is not an e-mail address"},
		{"dns:", "is not a DNS name"},
	} {
		_, err := NewAuthenticator(AuthOptions{Callers: []CallerDocument{
			{Name: "ok", Source: "c.yaml:1", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"fine.example"}}}},
			{Name: "bad", Source: "c.yaml:9", Spec: CallerSpec{ClientCert: &ClientCertSpec{SANs: []string{"fine2.example", tc.san}}}},
		}})
		if err == nil {
			t.Errorf("%q was accepted", tc.san)
			continue
		}
		msg := err.Error()
		for _, w := range []string{`c.yaml:9: Caller "bad": clientCert.sans[1] ` + strquote(tc.san), tc.want} {
			if !strings.Contains(msg, w) {
				t.Errorf("%q: error %q does not say %q", tc.san, msg, w)
			}
		}
		if tc.want != "must be an IP address" && tc.want != "no spaces or control characters" && !strings.Contains(msg, "prefix it with its type: dns:, email:, uri: or ip:") {
			t.Errorf("%q: error %q does not say how to give the type", tc.san, msg)
		}
	}
}

func strquote(s string) string { return `"` + s + `"` }
