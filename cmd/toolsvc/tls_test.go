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
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) *testCA {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "toolsvc test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a leaf certificate; server certificates are for 127.0.0.1.
func (ca *testCA) issue(t *testing.T, cn string, serial int64, server bool) (certPEM, keyPEM []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: []string{"Example"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = []string{cn + ".clients.example"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	// Write and rename, as a deployment swaps certificates.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// serveInBackground runs the service in the test's process with environ
// until the test ends, and returns its log.
func serveInBackground(t *testing.T, environ []string) *logtest.Buffer {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	logs := &logtest.Buffer{}
	go func() { done <- run(ctx, []string{"toolsvc"}, environ, io.Discard, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("run did not return after cancel")
		}
	})
	return logs
}

// TestTLSAndClientCertificates serves HTTPS with certificates the test
// makes, maps client certificates to callers, and reloads the server
// certificate on file change and on SIGHUP.
func TestTLSAndClientCertificates(t *testing.T) {
	mine := make(chan os.Signal, 1)
	signal.Notify(mine, syscall.SIGHUP)
	defer signal.Stop(mine)

	ca := newCA(t)
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, caFile := filepath.Join(certs, "tls.crt"), filepath.Join(certs, "tls.key"), filepath.Join(certs, "ca.crt")
	// The certificate and key are links into a directory of their own, so
	// rewriting their targets makes no event where the server watches:
	// only SIGHUP reloads them (below).
	c, k := ca.issue(t, "server-1", 10, true)
	live := t.TempDir()
	writeFile(t, filepath.Join(live, "tls.crt"), c)
	writeFile(t, filepath.Join(live, "tls.key"), k)
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.Symlink(filepath.Join(live, f), filepath.Join(certs, f)); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, caFile, ca.pem)
	conf := filepath.Join(dir, "conf")
	if err := os.Mkdir(conf, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "callers.yaml"), []byte(`apiVersion: toolsvc/v1
kind: Caller
metadata: {name: bot}
spec:
  clientCert: {subject: "CN=bot,O=Example"}
  tools: ["text__*"]
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: builder}
spec:
  clientCert: {sans: ["builder.clients.example"]}
  tools: ["json__*"]
---
apiVersion: toolsvc/v1
kind: Caller
metadata: {name: human}
spec:
  tokenSha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 # "test"
`), 0o600); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	environ := []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_LOG_FLUSH_INTERVAL=0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(), "TOOLSVC_CONFIG=" + conf,
		"TOOLSVC_TLS_CERT_FILE=" + certFile, "TOOLSVC_TLS_KEY_FILE=" + keyFile, "TOOLSVC_TLS_CLIENT_CA_FILE=" + caFile}
	logs := serveInBackground(t, environ)

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := func(cn string) *http.Client {
		cfg := &tls.Config{RootCAs: roots}
		if cn != "" {
			cp, kp := ca.issue(t, cn, time.Now().UnixNano(), false)
			pair, err := tls.X509KeyPair(cp, kp)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
	}
	get := func(c *http.Client, path, token string) (int, string, *tls.ConnectionState) {
		req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error(), nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.TLS
	}
	anon := client("")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if code, _, _ := get(anon, "/healthz", ""); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not serving HTTPS:\n%s", logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// HTTP/2 is offered (ALPN), as a Go server offers it by default: the
	// per-handshake configuration must say so too.
	h2 := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	if resp, err := h2.Get("https://" + addr + "/healthz"); err != nil {
		t.Errorf("HTTP/2 client: %v", err)
	} else {
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("an HTTP/2 client was served %s", resp.Proto)
		}
	}
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP is served beside HTTPS")
		}
	}

	if code, body, _ := get(client("bot"), "/tools", ""); code != 200 || !strings.Contains(body, "text__transform") || strings.Contains(body, "json__query") {
		t.Errorf("client certificate by subject: %d %s", code, body)
	}
	if code, body, _ := get(client("builder"), "/tools", ""); code != 200 || !strings.Contains(body, "json__query") || strings.Contains(body, "text__transform") {
		t.Errorf("client certificate by SAN: %d %s", code, body)
	}
	if code, _, _ := get(client("stranger"), "/tools", ""); code != 401 {
		t.Errorf("a certificate of no caller: %d, want 401", code)
	}
	if code, _, _ := get(anon, "/tools", ""); code != 401 {
		t.Errorf("no credentials: %d, want 401", code)
	}
	if code, _, _ := get(anon, "/tools", "test"); code != 200 {
		t.Errorf("bearer token over HTTPS: %d", code)
	}
	// A certificate from another CA is refused in the handshake.
	other := newCA(t)
	cp, kp := other.issue(t, "bot", 5, false)
	pair, _ := tls.X509KeyPair(cp, kp)
	rogue := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}}}
	if code, _, _ := get(rogue, "/tools", ""); code != 0 {
		t.Errorf("a certificate of another CA got HTTP %d", code)
	}

	served := func() string {
		_, _, st := get(anon, "/healthz", "")
		if st == nil || len(st.PeerCertificates) == 0 {
			return ""
		}
		return st.PeerCertificates[0].Subject.CommonName
	}
	// SIGHUP: the link targets change (no event where the server
	// watches), then the signal reloads them.
	c, k = ca.issue(t, "server-2", 11, true)
	writeFile(t, filepath.Join(live, "tls.key"), k)
	writeFile(t, filepath.Join(live, "tls.crt"), c)
	if served() != "server-1" {
		t.Fatal("the certificate changed before SIGHUP")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the certificate reload on SIGHUP", func() bool { return served() == "server-2" })

	// File change: new files replace the links; no signal is sent.
	c, k = ca.issue(t, "server-3", 12, true)
	writeFile(t, keyFile, k)
	writeFile(t, certFile, c)
	waitUntil(t, "the certificate reload on file change", func() bool { return served() == "server-3" })
	if !strings.Contains(logs.String(), "TLS certificate loaded") {
		t.Errorf("no reload logged:\n%s", logs)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestHealthOverTLS: `toolsvc health` speaks HTTPS to an instance that
// serves it and trusts exactly the certificate in TOOLSVC_TLS_CERT_FILE.
func TestHealthOverTLS(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(t, "server", 2, true)
	writeFile(t, certFile, c)
	writeFile(t, keyFile, k)
	addr := freeAddr(t)
	environ := []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(),
		"TOOLSVC_TLS_CERT_FILE=" + certFile, "TOOLSVC_TLS_KEY_FILE=" + keyFile}
	serveInBackground(t, environ)
	health := func(env []string) (string, error) {
		var out strings.Builder
		err := run(context.Background(), []string{"toolsvc", "health"}, env, &out, io.Discard)
		return out.String(), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := health(environ)
		if err == nil && out == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("toolsvc health over TLS: %q %v", out, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Another certificate in the file (a deployment that swapped it, an
	// impostor on the port): the check fails and says why.
	other, _ := newCA(t).issue(t, "server", 3, true)
	otherFile := filepath.Join(t.TempDir(), "other.crt")
	writeFile(t, otherFile, other)
	env := append(append([]string{}, environ...), "TOOLSVC_TLS_CERT_FILE="+otherFile)
	if _, err := health(env); err == nil || !strings.Contains(err.Error(), "does not serve the certificate in TOOLSVC_TLS_CERT_FILE") {
		t.Errorf("health with another certificate: %v", err)
	}
	// Plain HTTP against the HTTPS port fails.
	plain := []string{"TOOLSVC_ADDR=" + addr}
	if _, err := health(plain); err == nil {
		t.Error("health over plain HTTP to an HTTPS port succeeded")
	}
}
