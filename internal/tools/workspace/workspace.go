// Package workspace maps a call's instance key to an isolated directory
// under the workspace, for the tools that touch files or run programs.
package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// Workspace is the directory file and shell tools are confined to.
type Workspace struct {
	base string
}

// New returns the workspace at dir, creating it.
func New(dir string) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return &Workspace{base: abs}, nil
}

// Base returns the workspace's absolute path.
func (w *Workspace) Base() string { return w.base }

// Dir returns the absolute directory for instanceKey, creating it. The
// empty key is the workspace itself. A key made only of letters, digits,
// '.', '_' and '-' that starts with a letter or digit (at most 64 bytes)
// names its directory as it is; any other key is hashed, so no key can
// name a path outside the workspace or collide with a plain one.
func (w *Workspace) Dir(instanceKey string) (string, error) {
	if instanceKey == "" {
		return w.base, nil
	}
	dir := filepath.Join(w.base, SanitizeKey(instanceKey))
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	return dir, nil
}

// Root opens the directory for instanceKey as an os.Root, which refuses
// every path that would leave it (.., absolute paths, symlinks out).
func (w *Workspace) Root(instanceKey string) (*os.Root, error) {
	dir, err := w.Dir(instanceKey)
	if err != nil {
		return nil, err
	}
	return os.OpenRoot(dir)
}

// SanitizeKey returns the directory name for an instance key.
func SanitizeKey(key string) string {
	if plainKey(key) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "_k" + hex.EncodeToString(sum[:12])
}

func plainKey(key string) bool {
	if len(key) == 0 || len(key) > 64 {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return false
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}
