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
// where <caller>, <name> and <key> are sanitised (see SanitizeKey), and
//
//	.empty                             an empty directory, for reading a
//	                                   directory not made yet (see Peek)
//
// Directories are opened one component at a time beneath the root and
// never through a symbolic link: a link where a directory is expected is
// refused, so a link planted by a program cannot redirect a later call.
package workspace

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// Workspace is the directory file and shell tools are confined to.
//
// It keeps the instance directories it opened most recently open (at most
// cacheSize of them), so a call usually finds its directory with one
// lookup instead of walking and reopening every component: a cached
// directory is used only while its path still leads to that very
// directory, and is not a link itself (see statAt); anything else
// (removed, moved, replaced, never opened) takes the full walk of Open.
type Workspace struct {
	base string
	// dir is the workspace root, open for the cache's lookups.
	dir *os.File
	// empty is the directory Peek gives for one that does not exist; nil
	// when it could not be made.
	empty *entry

	// reserve is Options.Reserve.
	reserve int64

	mu    sync.Mutex
	cache map[string]*entry
	lru   list.List // of *entry, most recently used first
}

// cacheSize bounds how many instance directories a Workspace keeps open.
const cacheSize = 64

// entry is one cached instance directory. refs counts the Dirs handed
// out and the cache's own hold; the directory is closed at zero.
type entry struct {
	rel    string
	path   string // Path of rel
	root   *os.Root
	dev    uint64
	ino    uint64
	refs   int
	cached bool
	elem   *list.Element
}

// Options configure a Workspace.
type Options struct {
	// Reserve is the free space of the workspace's file system that the
	// file tools leave to others (the store, when it shares the file
	// system): a write, or a new directory, that would leave less free is
	// refused (see Room). 0 reserves nothing. A reserve of half the file
	// system's size or more keeps a tenth of it instead.
	Reserve int64
}

// New returns the workspace at dir, creating it. The directory itself is
// the operator's choice and is trusted; everything beneath it is not.
//
// The service must be able to write the workspace: a caller's first call
// that writes makes its directory beneath it, and Peek needs .empty,
// made here. New makes callers/ and tries making a directory in the root,
// in callers/ and in shared/ (where it exists); where the process may not
// (another user's directory, a read-only mount) it returns a
// *NotWritableError, so the service refuses to start instead of failing
// every call of the file and shell tools. Files meant only to be read can
// be mounted read-only beneath a writable workspace, as a caller's
// directory (callers/<caller>/default).
func New(dir string, o Options) (*Workspace, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		if denied(err) {
			return nil, &NotWritableError{Dir: abs, Err: err}
		}
		return nil, fmt.Errorf("workspace: %w", err)
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if err := writable(abs); err != nil {
		f.Close()
		return nil, err
	}
	w := &Workspace{base: abs, dir: f, cache: map[string]*entry{}, reserve: o.Reserve}
	// Without .empty (a full file system), Peek opens as Open does.
	if empty, err := openEmpty(abs); err == nil {
		w.empty = &entry{root: empty, refs: 1}
	}
	return w, nil
}

// NotWritableError is New's refusal of a workspace the process may not
// write.
type NotWritableError struct {
	// Dir is the workspace; Err what the file system said.
	Dir string
	Err error
}

func (e *NotWritableError) Error() string {
	uid := os.Getuid()
	fix := fmt.Sprintf("make the directory writable by that user (chown -R %d %s; in Kubernetes, the pod's securityContext.fsGroup)", uid, e.Dir)
	if errors.Is(e.Err, syscall.EROFS) {
		fix = "mount a writable volume at " + e.Dir
	}
	return fmt.Sprintf("workspace: TOOLSVC_WORKSPACE %s cannot be written by this process (uid %d, gid %d): %v; "+
		"the file and shell tools make the callers' directories in it. Fix: %s, or set TOOLSVC_WORKSPACE to a directory that is writable",
		e.Dir, uid, os.Getgid(), e.Err, fix)
}

func (e *NotWritableError) Unwrap() error { return e.Err }

// denied reports whether err says the process may not write there (rather
// than that the file system is full, or failed).
func denied(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// probeName is the directory New makes and removes to learn whether it
// may: no name of the layout starts with a dot but .empty.
const probeName = ".write-test"

// writable makes callers/ beneath base, then tries making a directory in
// base, callers/ and shared/ (where it exists). It returns a
// *NotWritableError where the process may not; a full file system is not
// its concern (see Room).
func writable(base string) error {
	root, err := os.OpenRoot(base)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	defer root.Close()
	if err := root.Mkdir("callers", 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		if denied(err) {
			return &NotWritableError{Dir: base, Err: fmt.Errorf("cannot make %s: %w", filepath.Join(base, "callers"), unwrapPath(err))}
		}
		return nil
	}
	for _, name := range []string{".", "callers", "shared"} {
		err := root.Mkdir(filepath.Join(name, probeName), 0o700)
		if errors.Is(err, fs.ErrExist) {
			err = nil // left by a start that ended here
		}
		if err == nil {
			err = root.Remove(filepath.Join(name, probeName))
		}
		if denied(err) {
			return &NotWritableError{Dir: base, Err: fmt.Errorf("cannot make a directory in %s: %w", filepath.Join(base, name), unwrapPath(err))}
		}
	}
	return nil
}

// unwrapPath returns the error of a *fs.PathError, whose path and
// operation a message names otherwise.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// emptyDir is the name of the empty directory beneath the root.
const emptyDir = ".empty"

// openEmpty opens the empty directory beneath base, making it.
func openEmpty(base string) (*os.Root, error) {
	root, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	// The mode of an instance directory: fs__stat of "." shows it for an
	// instance not made yet (0555 read as a workspace that cannot be
	// written). Nothing writes here: only Peek hands it out.
	if err := root.Mkdir(emptyDir, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, err
	}
	_ = root.Chmod(emptyDir, 0o750) // made 0555 by an earlier version
	return openChild(root, emptyDir, nil)
}

// dirBytes is what a new directory is counted to take: a block.
const dirBytes = 4096

// minFreeInodes is how many inodes the file tools leave free: a caller
// making empty files or directories runs out of inodes, not of bytes.
const minFreeInodes = 4096

// NoRoomError is Room's refusal.
type NoRoomError struct {
	Free, Need, Reserve int64
	Inodes              bool // it is inodes that are short, not bytes
}

func (e *NoRoomError) Error() string {
	if e.Inodes {
		return fmt.Sprintf("the workspace's file system would be left with fewer than %d inodes (files and directories)", minFreeInodes)
	}
	if e.Need == 0 {
		return fmt.Sprintf("the workspace's file system has %d bytes free, less than the %d kept free for the service (TOOLSVC_WORKSPACE_RESERVE)", e.Free, e.Reserve)
	}
	return fmt.Sprintf("the workspace's file system has %d bytes free, and this needs %d more, which would leave less than the %d kept free for the service (TOOLSVC_WORKSPACE_RESERVE)", e.Free, e.Need, e.Reserve)
}

// Room returns a *NoRoomError when taking need more bytes and inodes more
// inodes would leave the workspace's file system with less free than the
// reserve, or with fewer than minFreeInodes inodes; nil when it would not,
// when there is no reserve, or when the file system cannot say.
func (w *Workspace) Room(need, inodes int64) error {
	if w.reserve <= 0 || need <= 0 && inodes <= 0 {
		return nil // nothing is taken
	}
	freeBytes, freeInodes, size, ok := freeSpace(w.dir)
	if !ok {
		return nil
	}
	reserve := w.reserve
	if reserve >= size/2 {
		// A small file system of the workspace's own (a 32 MiB volume
		// under the 64 MiB default) would take no write at all: a tenth
		// of it is kept instead.
		reserve = size / 10
	}
	if freeInodes >= 0 && freeInodes-inodes < minFreeInodes {
		return &NoRoomError{Free: freeBytes, Need: need, Reserve: reserve, Inodes: true}
	}
	if freeBytes-need < reserve {
		return &NoRoomError{Free: freeBytes, Need: need, Reserve: reserve}
	}
	return nil
}

// Close closes the directories the workspace keeps open. Dirs still in
// use stay usable until they are closed.
func (w *Workspace) Close() error {
	w.mu.Lock()
	for _, e := range w.cache {
		w.uncacheLocked(e)
	}
	if w.empty != nil {
		w.releaseLocked(w.empty)
	}
	w.mu.Unlock()
	return w.dir.Close()
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
	// It is shared with other calls: close the Dir, never the Root.
	Root *os.Root

	release func()
}

// Close releases the directory. Root must not be used afterwards.
func (d *Dir) Close() error {
	if d.release == nil {
		return d.Root.Close()
	}
	d.release()
	d.release = nil
	return nil
}

// File opens the directory itself as a file, for handing its descriptor
// to a sandboxed program. The caller closes it.
func (d *Dir) File() (*os.File, error) { return d.Root.Open(".") }

// Open opens owner's directory for key, creating missing directories. It
// walks from the workspace root one component at a time and refuses a
// component that is a symbolic link or not a directory (ErrLink); each
// opened component is checked to be the very directory that was looked
// at, so a link swapped in between is refused too.
func (w *Workspace) Open(o Owner, key string) (*Dir, error) {
	return w.open(o, key, true)
}

// Peek is Open for reading: it makes no directory. Where owner's
// directory for key does not exist yet, it returns an empty directory
// that is never written, so a caller that only reads cannot fill the
// workspace with directories of made-up instance keys.
func (w *Workspace) Peek(o Owner, key string) (*Dir, error) {
	if w.empty == nil {
		return w.open(o, key, true)
	}
	d, err := w.open(o, key, false)
	if !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	w.mu.Lock()
	w.empty.refs++
	w.mu.Unlock()
	d = w.dirOf(w.empty)
	d.Path = w.Path(o, key)
	return d, nil
}

func (w *Workspace) open(o Owner, key string, create bool) (*Dir, error) {
	names := components(o, key)
	rel := strings.Join(names, "/")
	if e := w.cached(rel); e != nil {
		return w.dirOf(e), nil
	}
	room := w.Room
	if !create {
		room = nil
	}
	root, err := w.walk(names, room)
	if err != nil {
		return nil, err
	}
	fi, err := root.Stat(".")
	if err != nil {
		root.Close()
		return nil, fmt.Errorf("workspace: %s: %w", rel, err)
	}
	dev, ino := fileID(fi)
	e := &entry{rel: rel, path: w.Path(o, key), root: root, dev: dev, ino: ino, refs: 1}
	w.mu.Lock()
	if old := w.cache[rel]; old != nil {
		w.uncacheLocked(old)
	}
	w.cache[rel], e.cached, e.elem = e, true, w.lru.PushFront(e)
	e.refs++ // the caller's
	for w.lru.Len() > cacheSize {
		w.uncacheLocked(w.lru.Back().Value.(*entry))
	}
	w.mu.Unlock()
	return w.dirOf(e), nil
}

// walk opens the directory names, one component at a time from the
// workspace root, never through a link, creating missing ones when room
// (see openChild) is set.
func (w *Workspace) walk(names []string, room func(need, inodes int64) error) (*os.Root, error) {
	root, err := os.OpenRoot(w.base)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	rel := "."
	for _, name := range names {
		rel = filepath.Join(rel, name)
		next, err := openChild(root, name, room)
		root.Close()
		if err != nil && denied(err) && room != nil {
			// Not the caller's doing: a directory made before the
			// service ran as this user, or changed since it started.
			return nil, fmt.Errorf("workspace: %s: %w; the service (uid %d) may not write this directory of the workspace, which an operator has to fix", rel, err, os.Getuid())
		}
		if err != nil {
			return nil, fmt.Errorf("workspace: %s: %w", rel, err)
		}
		root = next
	}
	return root, nil
}

// cached returns the cached entry for rel, with a reference taken, if its
// path still leads to it.
func (w *Workspace) cached(rel string) *entry {
	w.mu.Lock()
	e := w.cache[rel]
	if e == nil {
		w.mu.Unlock()
		return nil
	}
	e.refs++
	w.lru.MoveToFront(e.elem)
	w.mu.Unlock()
	if statAt(w.dir, rel, e.dev, e.ino) {
		return e
	}
	w.mu.Lock()
	if w.cache[rel] == e {
		w.uncacheLocked(e)
	}
	w.releaseLocked(e)
	w.mu.Unlock()
	return nil
}

func (w *Workspace) dirOf(e *entry) *Dir {
	return &Dir{Path: e.path, Root: e.root, release: func() {
		w.mu.Lock()
		w.releaseLocked(e)
		w.mu.Unlock()
	}}
}

// uncacheLocked drops the cache's hold on e.
func (w *Workspace) uncacheLocked(e *entry) {
	if !e.cached {
		return
	}
	e.cached = false
	delete(w.cache, e.rel)
	w.lru.Remove(e.elem)
	w.releaseLocked(e)
}

func (w *Workspace) releaseLocked(e *entry) {
	if e.refs--; e.refs == 0 {
		e.root.Close()
	}
}

// openChild opens the directory name directly beneath parent, never
// through a link, creating it if missing when room is set and says there
// is room for one.
func openChild(parent *os.Root, name string, room func(need, inodes int64) error) (*os.Root, error) {
	fi, err := parent.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) && room != nil {
		if err := room(dirBytes, 1); err != nil {
			return nil, err
		}
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
