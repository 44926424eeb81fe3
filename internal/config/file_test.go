//go:build unix

package config

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readWithin runs read, failing the test when it has not returned after
// a minute: before ReadFile, a named pipe blocked the read, toolsvc
// validate and a reload forever.
func readWithin(t *testing.T, read func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the read still blocks after a minute")
		return nil
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip("cannot make a named pipe:", err)
	}
}

// TestReadFileRefusesSpecialFiles: only regular files of at most
// MaxFileBytes are read; the error names the path and what it is.
func TestReadFileRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	mkfifo(t, fifo)
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxFileBytes+1); err != nil { // sparse
		t.Fatal(err)
	}
	full := filepath.Join(dir, "full")
	if err := os.WriteFile(full, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(full, MaxFileBytes); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, fifo + " is a named pipe (FIFO), not a regular file"},
		{dir, dir + " is a directory, not a regular file"},
		{"https://rp2.alfred511.top/hf/dev/zero", "https://rp2.alfred511.top/hf/dev/zero is a character device, not a regular file"},
		{big, big + " is larger than 16 MiB"},
		{filepath.Join(dir, "missing"), "no such file"},
	} {
		err := readWithin(t, func() error { _, err := ReadFile(c.path); return err })
		if c.path == "https://rp2.alfred511.top/hf/dev/zero" && err != nil && strings.Contains(err.Error(), "no such file") {
			continue // a system without it
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadFile(%s) = %v, want an error containing %q", c.path, err, c.want)
		}
	}
	if b, err := ReadFile(full); err != nil || len(b) != MaxFileBytes {
		t.Errorf("ReadFile of a file of MaxFileBytes: %d bytes, %v", len(b), err)
	}
}

// TestLoadRefusesNamedPipe: a named pipe among a directory's YAML files,
// named as the configuration, or as a value file fails with an error
// rather than blocking.
func TestLoadRefusesNamedPipe(t *testing.T) {
	dir := t.TempDir()
	good := "apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: a}\nspec:\n  headers:\n    X: {valueFrom: {file: pipe}}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	mkfifo(t, filepath.Join(dir, "pipe"))
	mkfifo(t, filepath.Join(dir, "z.yaml"))

	err := readWithin(t, func() error { _, err := Load(dir); return err })
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "z.yaml")+" is a named pipe") {
		t.Errorf("Load of a directory with a named pipe: %v", err)
	}
	err = readWithin(t, func() error { _, err := Load(filepath.Join(dir, "z.yaml")); return err })
	if err == nil || !strings.Contains(err.Error(), "is a named pipe") {
		t.Errorf("Load of a named pipe: %v", err)
	}

	rs, err := Load(filepath.Join(dir, "a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Headers map[string]Value `yaml:"headers"`
	}
	if err := rs[0].Decode(&spec); err != nil {
		t.Fatal(err)
	}
	err = readWithin(t, func() error { _, err := spec.Headers["X"].Resolve(nil, rs[0].Dir()); return err })
	if err == nil || !strings.Contains(err.Error(), "line 6: reading value file: "+filepath.Join(dir, "pipe")+" is a named pipe") {
		t.Errorf("a value file that is a named pipe: %v", err)
	}
}
