// Package fs provides the built-in file tools (fs__read, fs__list,
// fs__stat, fs__search, fs__write, fs__edit, fs__delete). Every call opens
// the caller's workspace directory as an os.Root and does all of its file
// access through it, so no path — through "..", an absolute name or a
// symbolic link, even one swapped in while the call runs — can reach a file
// outside the workspace. Paths are also checked up front so that a model
// gets a clear error that says what a valid path looks like.
package fs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// Resource is the resource part of the file tools' names.
const Resource = "fs"

// MaxPathBytes is the longest path the tools accept.
const MaxPathBytes = 4096

// The defaults of Options.
const (
	DefaultMaxReadBytes     = 1 << 20
	DefaultMaxSearchBytes   = 32 << 20
	DefaultMaxWriteBytes    = 4 << 20
	DefaultMaxListEntries   = 1000
	DefaultMaxSearchMatches = 200
	DefaultMaxScanEntries   = 100000
)

// Options configure the file tools.
type Options struct {
	// Workspace is the directory the tools are confined to; each call uses
	// the sub-directory of its context.instanceKey. Required.
	Workspace *workspace.Workspace
	// MaxReadBytes bounds what one fs__read returns (default 1 MiB). The
	// tool's output limit usually bounds it more tightly.
	MaxReadBytes int64
	// MaxSearchBytes bounds the file content one fs__search reads (default
	// 32 MiB).
	MaxSearchBytes int64
	// MaxWriteBytes bounds the content of one fs__write and the size of a
	// file fs__edit will change (default 4 MiB).
	MaxWriteBytes int64
	// MaxRequestBytes is the service's limit on a request's body, which
	// fs__write's description gives when it is less than MaxWriteBytes: no
	// content larger than it arrives in one call. 0: not said.
	MaxRequestBytes int64
	// MaxListEntries bounds the entries one fs__list returns (default 1000).
	MaxListEntries int
	// MaxSearchMatches bounds the matches one fs__search returns (default 200).
	MaxSearchMatches int
	// MaxScanEntries bounds the directory entries one fs__list or fs__search
	// looks at while walking (default 100000), so that a huge tree cannot
	// keep a call busy.
	MaxScanEntries int
	// Timeout is the tools' timeout; zero leaves the registry default.
	Timeout time.Duration
	// MaxOutputBytes is the tools' output limit; zero leaves the registry
	// default. Reads, listings and searches size what they return to it.
	MaxOutputBytes int
}

func (o Options) withDefaults() Options {
	if o.MaxReadBytes <= 0 {
		o.MaxReadBytes = DefaultMaxReadBytes
	}
	if o.MaxSearchBytes <= 0 {
		o.MaxSearchBytes = DefaultMaxSearchBytes
	}
	if o.MaxWriteBytes <= 0 {
		o.MaxWriteBytes = DefaultMaxWriteBytes
	}
	if o.MaxListEntries <= 0 {
		o.MaxListEntries = DefaultMaxListEntries
	}
	if o.MaxSearchMatches <= 0 {
		o.MaxSearchMatches = DefaultMaxSearchMatches
	}
	if o.MaxScanEntries <= 0 {
		o.MaxScanEntries = DefaultMaxScanEntries
	}
	return o
}

// Tools returns the file tools. It panics if o.Workspace is nil, which is
// a wiring mistake.
func Tools(o Options) []*registry.Tool {
	if o.Workspace == nil {
		panic("fs.Tools: Options.Workspace is required")
	}
	t := &tools{o: o.withDefaults()}
	return []*registry.Tool{
		t.readTool(), t.listTool(), t.statTool(), t.searchTool(),
		t.writeTool(), t.editTool(), t.deleteTool(),
	}
}

// tools holds what every handler shares.
type tools struct {
	o     Options
	files fileLocks
}

func (t *tools) define(export, description string, tier registry.Tier, schema string, ann *registry.Annotations, h registry.Func) *registry.Tool {
	return &registry.Tool{
		Definition: registry.Definition{
			Name:           registry.JoinName(Resource, export),
			Description:    description,
			Parameters:     json.RawMessage(schema),
			OutputSchema:   json.RawMessage(outputSchemas[export]),
			Tier:           tier,
			Timeout:        t.o.Timeout,
			MaxOutputBytes: t.o.MaxOutputBytes,
			Annotations:    ann,
			Tags:           []string{"files"},
			Type:           "builtin",
		},
		Handler:   h,
		Normalize: normalizePath,
	}
}

// normalizePath gives the path argument the spelling the tools use, so a
// policy rule on "notes/" also sees "./notes//todo.md" as "notes/todo.md".
// A final "/" stays, since it says the path names a directory.
func normalizePath(args map[string]any) bool {
	p, ok := args["path"].(string)
	if !ok || p == "" || isClean(p) {
		return false
	}
	clean, err := cleanPath("path", p, false)
	if err != nil {
		return false
	}
	if tail := p[strings.LastIndexByte(p, '/')+1:]; (tail == "" || tail == ".") && strings.Contains(p, "/") && clean != "." {
		clean += "/"
	}
	if clean == p {
		return false
	}
	args["path"] = clean
	return true
}

func readOnly() *registry.Annotations {
	yes, no := true, false
	return &registry.Annotations{ReadOnlyHint: &yes, IdempotentHint: &yes, OpenWorldHint: &no}
}

func changing(destructive, idempotent bool) *registry.Annotations {
	no := false
	return &registry.Annotations{ReadOnlyHint: &no, DestructiveHint: &destructive, IdempotentHint: &idempotent, OpenWorldHint: &no}
}

// pathSchema is the JSON Schema of a path property.
func pathSchema(description string) string {
	return fmt.Sprintf(`{"type": "string", "maxLength": %d, "description": %q}`, MaxPathBytes, description)
}

// pathRules is what the tools tell a model about paths.
const pathRules = `Paths are relative to the workspace root and use forward slashes, for example "src/main.go" or "." for the root; absolute paths, ".." components, backslashes and NUL bytes are not allowed.`

// namesDir reports whether path p, as the caller wrote it, ends in "/" or
// "/.": it names a directory.
func namesDir(p string) bool {
	tail := p[max(0, strings.LastIndexByte(p, '/')):]
	return tail == "/" || tail == "/."
}

// mustBeDir refuses, as the file system does, a path written as a
// directory ("app/.env/") that leads to something else. Policy rules see
// the path so spelled (normalizePath keeps the final "/"), so a file
// reached through it would pass a rule written for the file.
func mustBeDir(root *os.Root, p, rel string) error {
	if rel == "." || !namesDir(p) {
		return nil
	}
	fi, err := root.Stat(rel)
	if err != nil || fi.IsDir() {
		return nil // the tool says what is wrong with a path that cannot be used
	}
	kind := "a file"
	if !fi.Mode().IsRegular() {
		kind = fileKind(fi.Mode())
	}
	return registry.ToolError(
		fmt.Sprintf("path %s ends in \"/\", so it names a directory, but %s is %s", quoteShort(p), quoteShort(rel), kind),
		fmt.Sprintf("Give the path without the final \"/\" to use %s.", quoteShort(rel)))
}

// fileOnly is mustBeDir for the tools that open files (fs__read,
// fs__edit): a path written as a directory is refused without opening it,
// whatever it leads to, so a file swapped in for the directory after the
// check is not read either.
func fileOnly(root *os.Root, p, rel string) error {
	if err := mustBeDir(root, p, rel); err != nil || rel == "." || !namesDir(p) {
		return err
	}
	return registry.ToolError(fmt.Sprintf("%s is a directory, not a file", quoteShort(rel)), "Use fs__list to see what it contains.")
}

// openDir opens the caller's workspace directory, making it; close the Dir
// when done, never its Root, which other calls share.
func (t *tools) openDir(req *registry.Request) (*workspace.Dir, error) {
	return t.dirWith(req, t.o.Workspace.Open)
}

// peekDir is openDir for the tools that only read, or change only what
// exists (fs__edit, fs__delete): where the directory does not exist yet,
// they see an empty one and make none.
func (t *tools) peekDir(req *registry.Request) (*workspace.Dir, error) {
	return t.dirWith(req, t.o.Workspace.Peek)
}

func (t *tools) dirWith(req *registry.Request, open func(workspace.Owner, string) (*workspace.Dir, error)) (*workspace.Dir, error) {
	var owner workspace.Owner
	if req.Caller != nil {
		owner = workspace.OwnerOf(req.Caller.ID, req.Caller.Workspace)
	}
	dir, err := open(owner, req.Context.InstanceKey)
	if err := noRoom(err, "so the directory of this instanceKey was not made"); err != nil {
		return nil, err
	}
	if errors.Is(err, workspace.ErrLink) {
		return nil, registry.ToolError("the workspace of this instanceKey cannot be opened: "+err.Error(),
			"Use another instanceKey; a symbolic link where a workspace directory belongs is never followed.")
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open the workspace: %w", err)
	}
	return dir, nil
}

// noRoom turns the workspace's refusal to use the space it keeps free
// into the tool's error, saying what became of the call (outcome); nil
// for any other error.
func noRoom(err error, outcome string) error {
	var nr *workspace.NoRoomError
	if !errors.As(err, &nr) {
		return nil
	}
	return registry.ToolError(nr.Error()+", "+outcome,
		"Delete files that are no longer needed, or ask the operator for more space.")
}

// cleanPath checks a path argument and returns it in canonical form ("."
// for the root). Empty is the root only when emptyIsRoot.
func cleanPath(arg, p string, emptyIsRoot bool) (string, error) {
	bad := func(why string) error {
		return &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("%s %s: %s", arg, quoteShort(p), why),
			Suggestion: pathRules}
	}
	switch {
	case p == "" && emptyIsRoot:
		return ".", nil
	case p == "":
		return "", bad("is empty; give the path of a file inside the workspace")
	case len(p) > MaxPathBytes:
		return "", bad(fmt.Sprintf("is %d bytes long; the limit is %d", len(p), MaxPathBytes))
	case strings.IndexByte(p, 0) >= 0:
		return "", bad("contains a NUL byte")
	case strings.Contains(p, `\`):
		return "", bad(`contains a backslash; use "/" to separate directories`)
	case strings.HasPrefix(p, "/"):
		return "", bad("is absolute; paths are relative to the workspace root")
	}
	parts := strings.Split(p, "/")
	kept := parts[:0]
	for _, part := range parts {
		switch part {
		case "..":
			return "", bad(`has a ".." component; paths cannot leave the workspace`)
		case "", ".":
			continue
		}
		kept = append(kept, part)
	}
	if len(kept) == 0 {
		return ".", nil
	}
	return strings.Join(kept, "/"), nil
}

// isClean reports, without allocating, that cleanPath would return p as
// it is: "." or names without empty, "." or ".." components.
func isClean(p string) bool {
	if p == "." {
		return true
	}
	for {
		seg, rest, more := strings.Cut(p, "/")
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		if !more {
			return true
		}
		p = rest
	}
}

// quoteShort quotes s for a message, cutting it when it is long.
func quoteShort(s string) string {
	const max = 120
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// fileError turns an error from os.Root into one a model can act on. The
// message names only the workspace-relative path, never a host path.
func fileError(rel string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var inner error = err
	var pe *iofs.PathError
	if errors.As(err, &pe) {
		inner = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		inner = le.Err
	}
	q := quoteShort(rel)
	switch {
	case strings.Contains(inner.Error(), "path escapes from parent"):
		return registry.ToolError(
			fmt.Sprintf("%s leads outside the workspace (through a symbolic link), so it cannot be used", q),
			"Only files inside the workspace can be used. Use fs__list to find them.")
	case errors.Is(inner, iofs.ErrNotExist):
		return registry.ToolError(
			fmt.Sprintf("%s does not exist", q),
			"Paths are relative to the workspace root. Use fs__list to see which files exist.")
	case errors.Is(inner, syscall.ENOTEMPTY):
		// Before ErrExist, which it also is: "already exists" would send
		// the model after the wrong fix.
		return registry.ToolError(
			fmt.Sprintf("%s is a directory that is not empty", q),
			"Something may have put files in it meanwhile: use fs__list to see what it holds, and fs__delete with recursive: true to delete it with everything in it.")
	case errors.Is(inner, iofs.ErrExist):
		return registry.ToolError(
			fmt.Sprintf("%s already exists", q),
			`Use mode "overwrite" to replace it or "append" to add to it, or choose another path.`)
	case errors.Is(inner, iofs.ErrPermission):
		return registry.ToolError(fmt.Sprintf("permission denied for %s", q), "Choose a file the service may access.")
	case errors.Is(inner, syscall.ENOTDIR):
		return registry.ToolError(
			fmt.Sprintf("a component of %s is a file, not a directory", q),
			"Check the path with fs__stat or fs__list.")
	case errors.Is(inner, syscall.EISDIR):
		return registry.ToolError(fmt.Sprintf("%s is a directory", q), "Use fs__list for directories.")
	case errors.Is(inner, syscall.ELOOP):
		return registry.ToolError(fmt.Sprintf("%s has too many levels of symbolic links", q), "Use a path without symbolic link loops.")
	case errors.Is(inner, syscall.ENAMETOOLONG):
		return registry.ToolError(fmt.Sprintf("%s has a name that is too long", q), "Use shorter file names.")
	case errors.Is(inner, syscall.ENOSPC):
		return registry.ToolError("the workspace is out of space", "Delete files you no longer need, or write less.")
	}
	return registry.ToolError(fmt.Sprintf("%s: %v", q, inner), "")
}

// typeName names the type of a file mode.
func typeName(m iofs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&iofs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// outputBudget is how many bytes of JSON a tool may produce for its
// variable part (content, entries, matches), leaving room for the rest of
// the output object. It is unbounded (-1) when the request has no limit.
func outputBudget(req *registry.Request, fixed int) int {
	if req.MaxOutputBytes <= 0 {
		return -1
	}
	return max(req.MaxOutputBytes-fixed-256, 64)
}

// jsonLen is the length of v encoded as JSON.
func jsonLen(v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(b)
}
