package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/toolsvc/toolsvc/internal/config"
	toolhttp "github.com/toolsvc/toolsvc/internal/http"
	"github.com/toolsvc/toolsvc/internal/ratelimit"
)

// newIdentity is the identity of a configuration: its static keys, client
// certificates and Issuer resources. prev's cached keys are kept.
func newIdentity(a *app, log *slog.Logger, prev *toolhttp.TokenIdentity) *toolhttp.TokenIdentity {
	o := toolhttp.JWTOptions{Static: a.auth, Logger: log}
	for _, is := range a.issuers {
		ji := toolhttp.JWTIssuer{
			Name: is.Name, Issuer: is.Issuer, Audience: is.Audience, Discovery: is.Discovery, JWKSURL: is.JWKSURL,
			JWKSFile: is.JWKSFile, Algorithms: is.Algorithms, ClockSkew: is.ClockSkew, Map: is.Caller,
		}
		if is.JWKSFile != "" {
			ji.ReadJWKS = is.ReadJWKS
		}
		o.Issuers = append(o.Issuers, ji)
	}
	return toolhttp.NewTokenIdentity(o, prev)
}

// newRateLimiter is the limiter of the callers' rate limits: shared
// through Redis when TOOLSVC_RATE_LIMIT_REDIS_URL is set, else local.
func newRateLimiter(cfg Config, log *slog.Logger) (ratelimit.Limiter, func(), error) {
	if cfg.RateLimitRedisURL == "" {
		return ratelimit.NewLocal(0, nil), func() {}, nil
	}
	r, err := ratelimit.NewRedis(ratelimit.RedisOptions{
		URL: cfg.RateLimitRedisURL, Prefix: cfg.RateLimitRedisPrefix, FailOpen: cfg.RateLimitFailure == "open",
	})
	if err != nil {
		return nil, nil, err
	}
	log.Info("rate limits shared through Redis", "prefix", cfg.RateLimitRedisPrefix, "onFailure", cfg.RateLimitFailure)
	return r, func() { _ = r.Close() }, nil
}

// tlsFiles serve the certificate, key and client CAs of TOOLSVC_TLS_*,
// read again on SIGHUP (through the reloader) and when the files change.
// A reload that fails keeps what is served.
type tlsFiles struct {
	cert, key, clientCA string
	log                 *slog.Logger
	cur                 atomic.Pointer[tls.Config]
}

func newTLSFiles(cfg Config, log *slog.Logger) (*tlsFiles, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	t := &tlsFiles{cert: cfg.TLSCertFile, key: cfg.TLSKeyFile, clientCA: cfg.TLSClientCAFile, log: log}
	if err := t.reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// reload reads the files and, when they are good, serves them to new
// connections.
func (t *tlsFiles) reload() error {
	pair, err := loadKeyPair(t.cert, t.key)
	if err != nil {
		t.log.Error("TLS: the certificate was not reloaded; the previous one stays", "error", err)
		return fmt.Errorf("TOOLSVC_TLS_CERT_FILE/TOOLSVC_TLS_KEY_FILE: %w", err)
	}
	// NextProtos offers HTTP/2 as http.Server.ServeTLS does for its own
	// configuration, which this one replaces at every handshake.
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2", "http/1.1"}}
	if t.clientCA != "" {
		pem, err := config.ReadFile(t.clientCA)
		if err != nil {
			return fmt.Errorf("TOOLSVC_TLS_CLIENT_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("TOOLSVC_TLS_CLIENT_CA_FILE holds no PEM certificate")
		}
		// A client certificate is optional (bearer tokens still work), but
		// one that is sent must verify.
		c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	t.cur.Store(c)
	if leaf, err := x509.ParseCertificate(pair.Certificate[0]); err == nil {
		t.log.Info("TLS certificate loaded", "subject", leaf.Subject.String(), "notAfter", leaf.NotAfter)
	}
	return nil
}

// loadKeyPair is tls.LoadX509KeyPair reading its files as configuration
// files are read: regular files of bounded size, so a named pipe or a
// device named by mistake is an error at once instead of a start (or a
// reload) that blocks or fills memory.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := config.ReadFile(certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := config.ReadFile(keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// config is the server's TLS configuration: every handshake takes the
// files' current state.
func (t *tlsFiles) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.cur.Load(), nil
		},
	}
}

// watch reloads when the files change, until ctx ends.
func (t *tlsFiles) watch(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.log.Error("TLS: cannot watch the certificate files; reload with SIGHUP", "error", err)
		return
	}
	defer w.Close()
	files := map[string]bool{}
	for _, f := range []string{t.cert, t.key, t.clientCA} {
		if f == "" {
			continue
		}
		abs, err := filepath.Abs(f)
		if err != nil {
			continue
		}
		files[abs] = true
		if err := w.Add(filepath.Dir(abs)); err != nil {
			t.log.Error("TLS: cannot watch the certificate files; reload with SIGHUP", "error", err)
			return
		}
	}
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			// Kubernetes swaps a "..data" link; editors rename files.
			if files[ev.Name] || filepath.Base(ev.Name) == "..data" {
				fire = time.After(watchDebounce)
			}
		case <-w.Errors:
		case <-fire:
			fire = nil
			if t.reload() == nil {
				t.log.Info("TLS files changed: reloaded")
			}
		}
	}
}
