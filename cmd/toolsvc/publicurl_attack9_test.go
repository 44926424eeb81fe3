package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/notify"
)

// TestPublicURLFromAddr: without TOOLSVC_PUBLIC_URL, links use the scheme
// the service serves and a host a browser can open.
func TestPublicURLFromAddr(t *testing.T) {
	tlsEnv := []string{"TOOLSVC_TLS_CERT_FILE=/certs/tls.crt", "TOOLSVC_TLS_KEY_FILE=/certs/tls.key"}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"TOOLSVC_ADDR=127.0.0.1:8080"}, "http://127.0.0.1:8080"},
		{nil, "http://127.0.0.1:8080"},
		{append([]string{"TOOLSVC_ADDR=127.0.0.1:8443"}, tlsEnv...), "https://127.0.0.1:8443"},
		{[]string{"TOOLSVC_ADDR=:8080"}, "http://localhost:8080"},
		{[]string{"TOOLSVC_ADDR=0.0.0.0:8080"}, "http://localhost:8080"},
		{append([]string{"TOOLSVC_ADDR=[::]:8443"}, tlsEnv...), "https://localhost:8443"},
		{[]string{"TOOLSVC_ADDR=10.1.2.3:8080"}, "http://10.1.2.3:8080"},
		{[]string{"TOOLSVC_ADDR=[2001:db8::1]:8080"}, "http://[2001:db8::1]:8080"},
		{[]string{"TOOLSVC_ADDR=toolsvc.internal:8080"}, "http://toolsvc.internal:8080"},
		{append([]string{"TOOLSVC_ADDR=:8443", "TOOLSVC_PUBLIC_URL=https://toolsvc.example.com/"}, tlsEnv...), "https://toolsvc.example.com"},
	} {
		cfg, err := loadConfig(tc.env)
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if got := cfg.publicURL(); got != tc.want {
			t.Errorf("%v: links below %q, want %q", tc.env, got, tc.want)
		}
	}
}

// TestNotificationLinkOverTLS: a service serving HTTPS on 127.0.0.1
// without TOOLSVC_PUBLIC_URL links its notifications to https://, and warns
// once at start that the links open only where it runs.
func TestNotificationLinkOverTLS(t *testing.T) {
	var mu sync.Mutex
	var got []notify.Message
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m notify.Message
		_ = json.NewDecoder(r.Body).Decode(&m)
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}))
	defer recv.Close()

	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(t, "server", 2, true)
	writeFile(t, certFile, c)
	writeFile(t, keyFile, k)
	conf := filepath.Join(dir, "conf")
	if err := os.Mkdir(conf, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"callers.yaml", "policy.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "console", f))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(conf, f), b)
	}
	writeFile(t, filepath.Join(conf, "notifier.yaml"), []byte(`apiVersion: toolsvc/v1
kind: Notifier
metadata: {name: oncall-hook}
spec:
  type: webhook
  url: `+recv.URL+`
`))
	addr := freeAddr(t)
	logs := serveInBackground(t, []string{"TOOLSVC_ADDR=" + addr, "TOOLSVC_LOG_FLUSH_INTERVAL=0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(),
		"TOOLSVC_CONFIG=" + conf, "TOOLSVC_TLS_CERT_FILE=" + certFile, "TOOLSVC_TLS_KEY_FILE=" + keyFile})

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	call := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "https://"+addr+"/calls",
			strings.NewReader(`{"toolCallId":"linked","toolName":"text__transform","arguments":{"operation":"upper","text":"hi"}}`))
		req.Header.Set("Authorization", "Bearer agent-token")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := call()
		if code/100 == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no call over HTTPS: %d %s\n%s", code, body, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(15 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no notification arrived\n%s", logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	link := got[0].URL
	mu.Unlock()
	if want := "https://" + addr + "/ui/approvals/"; !strings.HasPrefix(link, want) {
		t.Errorf("the notification links to %q, want it below %q", link, want)
	}
	if n := strings.Count(logs.String(), "links in notifications open only on the machine the service runs on; set TOOLSVC_PUBLIC_URL"); n != 1 {
		t.Errorf("the warning about local links was logged %d times, want once:\n%s", n, logs)
	}
}
