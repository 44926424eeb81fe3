package main

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestTLSFilesMustBeRegular: a named pipe given as a TLS file
// stops the start at once, naming the file and what it is, instead of a
// start that waits for a writer for good.
func TestTLSFilesMustBeRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("cannot make a named pipe:", err)
	}
	ca := newCA(t)
	certPEM, keyPEM := ca.issue(t, "localhost", 2, true)
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, cert, certPEM)
	writeFile(t, key, keyPEM)
	for _, c := range []struct{ name, cert, key, clientCA, want string }{
		{"cert", fifo, key, "", fifo + " is a named pipe (FIFO), not a regular file"},
		{"key", cert, fifo, "", fifo + " is a named pipe (FIFO), not a regular file"},
		{"client CA", cert, key, fifo, "TOOLSVC_TLS_CLIENT_CA_FILE: " + fifo + " is a named pipe"},
	} {
		t.Run(c.name, func(t *testing.T) {
			environ := []string{"TOOLSVC_ADDR=127.0.0.1:0", "TOOLSVC_WORKSPACE=" + t.TempDir(), "TOOLSVC_DATA_DIR=" + t.TempDir(),
				"TOOLSVC_TLS_CERT_FILE=" + c.cert, "TOOLSVC_TLS_KEY_FILE=" + c.key}
			if c.clientCA != "" {
				environ = append(environ, "TOOLSVC_TLS_CLIENT_CA_FILE="+c.clientCA)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- run(ctx, []string{"toolsvc"}, environ, io.Discard, io.Discard) }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("start: %v, want an error containing %q", err, c.want)
				}
			case <-time.After(time.Minute):
				cancel()
				t.Fatal("toolsvc still starts after a minute")
			}
		})
	}
}
