package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/toolsvc/toolsvc/internal/config"
)

// health checks a running instance, for container health checks: on
// TOOLSVC_ADMIN_ADDR when it is set (clients cannot fill it), otherwise on
// TOOLSVC_ADDR. There, with TOOLSVC_TLS_CERT_FILE set, it speaks HTTPS and
// trusts exactly the certificate in that file: the instance it asks is
// its own, on loopback, whose name may not be in the certificate.
func health(ctx context.Context, cfg Config, stdout io.Writer) error {
	setting, addr, certFile := "TOOLSVC_ADDR", cfg.Addr, cfg.TLSCertFile
	if cfg.AdminAddr != "" {
		setting, addr, certFile = "TOOLSVC_ADMIN_ADDR", cfg.AdminAddr, "" // plain HTTP
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	scheme, transport := "http", &http.Transport{}
	if certFile != "" {
		pin, err := servedCertificate(certFile)
		if err != nil {
			return fmt.Errorf("health: %w", err)
		}
		scheme = "https"
		transport.TLSClientConfig = &tls.Config{
			// The certificate is checked below, against the file,
			// instead of against a name and roots.
			InsecureSkipVerify: true, //nolint:gosec
			VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
				if len(raw) == 0 || !bytes.Equal(raw[0], pin) {
					return errors.New("the instance does not serve the certificate in TOOLSVC_TLS_CERT_FILE")
				}
				return nil
			},
		}
	}
	defer transport.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s", resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}

// servedCertificate returns the DER bytes of the first certificate in a
// PEM file: the leaf the server presents.
func servedCertificate(file string) ([]byte, error) {
	b, err := config.ReadFile(file)
	if err != nil {
		return nil, err
	}
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, fmt.Errorf("%s: no certificate", file)
		}
		if block.Type == "CERTIFICATE" {
			return block.Bytes, nil
		}
	}
}
