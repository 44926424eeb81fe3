package sandbox

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Programs starts the programs of an entry (see Entry) under the
// sandbox's per-program resource limits.
//
// An entry's own process cannot pass them on by inheritance: its address
// space and data limits are set relative to what the Go runtime already
// holds when the entry starts (hundreds of MiB of reservations, more with
// cgo or -race), not to the absolute per-program values, which would
// leave the entry no room to run. So each program is started through the
// launcher, which lowers the limits to the per-program ones and executes
// the program in its own place, keeping the entry's Landlock domain,
// privileges and process group.
type Programs struct {
	launcher string
	limits   Limits
}

// Start starts cmd, whose Path is the absolute path of a program and Args
// its argv, through the launcher; cmd.Process is the program itself once
// Start returns, to be waited for with cmd.Wait. cmd.ExtraFiles must be
// empty. When the launcher cannot execute the program, Start waits for
// it and returns an error wrapping ErrSetup. A nil Programs (or one
// without a launcher) starts cmd as it is, under the limits of the
// calling process.
func (p *Programs) Start(cmd *exec.Cmd) error {
	if p == nil || p.launcher == "" {
		return cmd.Start()
	}
	if !filepath.IsAbs(cmd.Path) {
		return fmt.Errorf("%w: program %q is not an absolute path", ErrSetup, cmd.Path)
	}
	if len(cmd.ExtraFiles) > 0 {
		return fmt.Errorf("%w: a program started through the launcher cannot be given extra files", ErrSetup)
	}
	cfg := childConfig{Path: cmd.Path, Limits: p.limits, NoPrivDrop: true}
	// The launcher, a Go program too, starts under the entry's limits,
	// which leave room for its runtime but not for a glibc arena per
	// thread; the program does not get the variable unless it was given.
	env := cmd.Environ()
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "MALLOC_ARENA_MAX=") }) {
		cmd.Env = append(env, "MALLOC_ARENA_MAX=1")
		cfg.UnsetEnv = "MALLOC_ARENA_MAX"
	}
	enc, err := cfg.encode()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSetup, err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrSetup, err)
	}
	defer r.Close()
	argv := cmd.Args
	if len(argv) == 0 {
		argv = []string{cmd.Path}
	}
	cmd.Path = p.launcher
	cmd.Args = append([]string{p.launcher, ChildCommand, enc, "--"}, argv...)
	cmd.ExtraFiles = []*os.File{w} // the set-up pipe, fd 3
	err = cmd.Start()
	w.Close() // the launcher holds its own copy, closed when the program is executed
	if err != nil {
		return err
	}
	msg, _ := io.ReadAll(io.LimitReader(r, 4096))
	if len(msg) > 0 {
		_ = cmd.Wait()
		return fmt.Errorf("%w: %s", ErrSetup, bytes.TrimSpace(msg))
	}
	return nil
}
