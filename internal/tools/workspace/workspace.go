// Package workspace maps a call's caller and instance key to an isolated
// directory under the workspace, for the tools that touch files or run
// programs.
//
// The layout beneath the workspace root is
//
//	callers/<caller>/default           a caller's files when the call has no instanceKey
//	callers/<caller>/instances/<key>   a caller's files for one instanceKey
//	shared/<name>/default              the same for callers whose Caller resource
//	shared/<name>/instances/<key>      names the shared workspace <name>
//
// where <caller>, <name> and <key> are sanitised (see SanitizeKey).
// Directories are opened one component at a time beneath the root and
// never through a symbolic link: a link where a directory is expected is
// refused, so a link planted by a program cannot redirect a later call.
package workspace

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Workspace is the directory file and shell tools are confined to.
type Workspace struct {
	base string
}

// New returns the workspace at dir, creating it. The directory itself is
// the operator's choice and is trusted; everything beneath it is not.
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

// Owner says whose files a call works on.
type Owner struct {
	// CallerID is the authenticated caller's id; "" is "anonymous".
	CallerID string
	// Shared, when set, names a workspace the caller shares with every
	// caller that names the same one (the Caller resource's workspace).
	Shared string
}

// OwnerOf returns the owner of a call made by the caller with id and
// shared workspace name (a registry.Caller's ID and Workspace).
func OwnerOf(id, shared string) Owner { return Owner{CallerID: id, Shared: shared} }

// ErrLink means a symbolic link (or another non-directory) was found
// where the workspace layout expects a directory.
var ErrLink = errors.New("not a directory (symbolic links are not followed)")

// components returns the directory names of owner's instance key,
// relative to the workspace root.
func components(o Owner, key string) []string {
	var c []string
	switch {
	case o.Shared != "":
		c = []string{"shared", SanitizeKey(o.Shared)}
	case o.CallerID == "":
		c = []string{"callers", "anonymous"}
	default:
		c = []string{"callers", SanitizeKey(o.CallerID)}
	}
	if key == "" {
		return append(c, "default")
	}
	return append(c, "instances", SanitizeKey(key))
}

// Path returns the absolute path of owner's directory for key without
// opening or creating it. It is a name for messages and for HOME; the
// confinement never resolves it again (see Open).
func (w *Workspace) Path(o Owner, key string) string {
	return filepath.Join(append([]string{w.base}, components(o, key)...)...)
}

// Dir is one opened instance directory.
type Dir struct {
	// Path is the directory's name (see Workspace.Path).
	Path string
	// Root is the opened directory; every path beneath it is resolved by
	// os.Root, which refuses .., absolute paths and links that leave it.
	Root *os.Root
}

// Close closes the directory.
func (d *Dir) Close() error { return d.Root.Close() }

// File opens the directory itself as a file, for handing its descriptor
// to a sandboxed program. The caller closes it.
func (d *Dir) File() (*os.File, error) { return d.Root.Open(".") }

// Open opens owner's directory for key, creating missing directories. It
// walks from the workspace root one component at a time and refuses a
// component that is a symbolic link or not a directory (ErrLink); each
// opened component is checked to be the very directory that was looked
// at, so a link swapped in between is refused too.
func (w *Workspace) Open(o Owner, key string) (*Dir, error) {
	root, err := os.OpenRoot(w.base)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	rel := "."
	for _, name := range components(o, key) {
		rel = filepath.Join(rel, name)
		next, err := openChild(root, name)
		root.Close()
		if err != nil {
			return nil, fmt.Errorf("workspace: %s: %w", rel, err)
		}
		root = next
	}
	return &Dir{Path: w.Path(o, key), Root: root}, nil
}

// openChild opens the directory name directly beneath parent, creating
// it if missing, never through a link.
func openChild(parent *os.Root, name string) (*os.Root, error) {
	fi, err := parent.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		if err := parent.Mkdir(name, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		fi, err = parent.Lstat(name)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, ErrLink
	}
	child, err := parent.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	got, err := child.Stat(".")
	if err != nil || !os.SameFile(fi, got) {
		child.Close()
		return nil, ErrLink
	}
	return child, nil
}

// SanitizeKey returns the directory name for an instance key or caller
// id. A key made only of letters, digits, '.', '_' and '-' that starts
// with a letter or digit (at most 64 bytes) names its directory as it is;
// any other key is hashed, so no key can name a path outside its parent
// or collide with a plain one.
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
