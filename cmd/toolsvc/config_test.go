package main

import (
	"runtime"
	"strings"
	"testing"
)

// TestAPIKeyFromAFile: a key written by "openssl rand -hex 32 > file" and
// passed on as the file's content ends in a newline that no client sends;
// kept, every request was 401 while the log said authentication was on.
func TestAPIKeyFromAFile(t *testing.T) {
	for _, raw := range []string{"s3cret\n", "s3cret\r\n", "  s3cret\t"} {
		cfg, err := loadConfig([]string{"TOOLSVC_API_KEY=" + raw})
		if err != nil || cfg.APIKey != "s3cret" {
			t.Errorf("%q: key %q, %v", raw, cfg.APIKey, err)
		}
	}
	for raw, want := range map[string]string{
		"   ":           "TOOLSVC_API_KEY is only whitespace",
		"two words":     "TOOLSVC_API_KEY has a space or control character at byte 3",
		"bell\x07inner": "TOOLSVC_API_KEY has a space or control character at byte 4",
	} {
		if _, err := loadConfig([]string{"TOOLSVC_API_KEY=" + raw}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", raw, err, want)
		}
	}
	if cfg, err := loadConfig([]string{"TOOLSVC_API_KEY="}); err != nil || cfg.APIKey != "" {
		t.Errorf("empty key: %q, %v", cfg.APIKey, err)
	}
}

// TestConcurrencyFollowsGOMAXPROCS: the defaults count the CPUs the Go
// runtime uses (a container's CPU limit), not the node's cores.
func TestConcurrencyFollowsGOMAXPROCS(t *testing.T) {
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	cfg, err := loadConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.maxConcurrency(), 64; got != want {
		t.Errorf("maxConcurrency at GOMAXPROCS 1: %d, want %d", got, want)
	}
	if got, want := cfg.processConcurrency(), 4; got != want {
		t.Errorf("processConcurrency at GOMAXPROCS 1: %d, want %d", got, want)
	}
}
