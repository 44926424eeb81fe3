package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// issueSANs makes a client certificate whose only names are the SANs set
// by with.
func (ca *testCA) issueSANs(t *testing.T, serial int64, with func(*x509.Certificate)) tls.Certificate {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "client", Organization: []string{"Example"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	with(tmpl)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// TestClientCertSANTypeOverTLS: through the service, a certificate from
// the trusted CA whose DNS name spells a caller's e-mail address or URI is
// no such caller (401); the e-mail and URI SANs themselves are.
func TestClientCertSANTypeOverTLS(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile, caFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.crt")
	c, k := ca.issue(t, "server", 2, true)
	writeFile(t, certFile, c)
	writeFile(t, keyFile, k)
	writeFile(t, caFile, ca.pem)
	conf := filepath.Join(dir, "callers.yaml")
	if err := os.WriteFile(conf, []byte(`apiVersion: toolsvc/v1
kind: Caller
metadata: {name: ops-mail}
spec:
  clientCert: {sans: ["ops@example.com"]}
  scopes: [call, approve, admin]
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: build-bot}
spec:
  clientCert: {sans: ["spiffe://example.org/build-bot"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs := serveInBackground(t, []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_LOG_FLUSH_INTERVAL=0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(),
		"TOOLSVC_CONFIG=" + conf, "TOOLSVC_TLS_CERT_FILE=" + certFile, "TOOLSVC_TLS_KEY_FILE=" + keyFile, "TOOLSVC_TLS_CLIENT_CA_FILE=" + caFile})

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	// get answers the status of GET /tools with the certificate.
	get := func(cert *tls.Certificate) int {
		cfg := &tls.Config{RootCAs: roots}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := client.Get("https://" + addr + "/tools")
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if get(nil) == 401 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving HTTPS:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	spiffe, _ := url.Parse("spiffe://example.org/build-bot")
	for _, tc := range []struct {
		name string
		with func(*x509.Certificate)
		want int
	}{
		{"DNS SAN spelling the e-mail address", func(c *x509.Certificate) { c.DNSNames = []string{"ops@example.com"} }, 401},
		{"DNS SAN spelling the URI", func(c *x509.Certificate) { c.DNSNames = []string{"spiffe://example.org/build-bot"} }, 401},
		{"e-mail SAN", func(c *x509.Certificate) { c.EmailAddresses = []string{"ops@example.com"} }, 200},
		{"URI SAN", func(c *x509.Certificate) { c.URIs = []*url.URL{spiffe} }, 200},
	} {
		cert := ca.issueSANs(t, time.Now().UnixNano(), tc.with)
		if code := get(&cert); code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
		}
	}
}

// TestClientCertSANRefusedAtStart: a clientCert SAN that is none of the
// four types stops the start, naming the file, line, caller and entry.
func TestClientCertSANRefusedAtStart(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "callers.yaml")
	if err := os.WriteFile(conf, []byte(`apiVersion: toolsvc/v1
kind: Caller
metadata: {name: fine}
spec:
  tokenSha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: ops}
spec:
  clientCert: {sans: ["ops@"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := run(ctx, []string{"toolsvc"}, []string{"TOOLSVC_ADDR=" + freeAddr(t), "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(),
		"TOOLSVC_CONFIG=" + conf}, io.Discard, io.Discard)
	if err == nil {
		t.Fatal("the service started")
	}
	if want := `callers.yaml:7: Caller "ops": clientCert.sans[0] "ops@": is not an e-mail address`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}
