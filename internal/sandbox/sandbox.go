// Package sandbox runs one external program safely: argv only (never a
// shell), killed with everything it started when its call ends, with a
// scrubbed environment, bounded capture of stdout and stderr, and, where
// the kernel allows, confinement by Landlock and resource limits.
//
// Each call (but a program in mode off) starts two processes, both as
// "<binary> __sandbox-exec <config> -- argv...": the reaper (the
// launcher, Options.Launcher, or else the toolsvc binary itself), which
// stays the parent of the call's processes as their child subreaper and
// kills whatever is left of them when the call ends, also in sessions of
// their own; and under it the child (the launcher too, or the toolsvc
// binary for an entry), which restricts itself (rlimits, Landlock) and
// then replaces itself with the program. The main program must therefore
// call RunChild when its first argument is ChildCommand, before doing
// anything else.
package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Mode says how much kernel confinement a sandbox insists on.
type Mode string

// The sandbox modes.
const (
	// ModeRequired refuses to run programs unless Landlock is available;
	// every layer is applied strictly for the kernel's Landlock ABI.
	ModeRequired Mode = "required"
	// ModeBestEffort applies whatever the kernel supports (possibly
	// nothing but resource limits) and says so in Status.
	ModeBestEffort Mode = "best-effort"
	// ModeOff runs programs in their own process group with a scrubbed
	// environment, but with no Landlock, no resource limits and no
	// privilege drop.
	ModeOff Mode = "off"
)

// ParseMode returns the mode named s; "" is ModeRequired, and "require"
// is accepted for it.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "", "require":
		return ModeRequired, nil
	case ModeRequired, ModeBestEffort, ModeOff:
		return m, nil
	}
	return "", fmt.Errorf("sandbox: unknown mode %q (want required, best-effort or off)", s)
}

// DefaultPath is the only PATH programs see and the only place program
// names are looked up.
const DefaultPath = "/usr/local/bin:/usr/bin:/bin"

// DefaultKillGrace is how long a program and what it started have
// between SIGTERM and SIGKILL when its context ends.
const DefaultKillGrace = 500 * time.Millisecond

// reapLimit bounds how long the reaper goes on killing (after the grace
// period, if any) before it gives up and exits; a process stuck in the
// kernel (uninterruptible sleep) is the only reason to get there.
const reapLimit = time.Second

// Limits are resource limits (setrlimit) applied to each program; zero
// leaves a limit as inherited.
type Limits struct {
	// CPUSeconds is RLIMIT_CPU: processor time, in seconds.
	CPUSeconds uint64
	// AddressSpaceBytes is RLIMIT_AS: virtual memory.
	AddressSpaceBytes uint64
	// FileSizeBytes is RLIMIT_FSIZE: the largest file a program may write.
	FileSizeBytes uint64
	// DataBytes is RLIMIT_DATA: the data segment and private writable
	// mappings, which is where a Go heap lives (RLIMIT_AS would also
	// count the Go runtime's address-space reservations).
	DataBytes uint64
	// Processes is RLIMIT_NPROC. The kernel counts every process of the
	// real user, not only the program's, and ignores it for root.
	Processes uint64
}

// Options configure a Sandbox.
type Options struct {
	// Mode is required, best-effort (the zero value) or off.
	Mode Mode
	// SelfExe is the path of the toolsvc binary, re-executed to confine
	// each program (usually os.Executable()). Required unless Mode is off.
	SelfExe string
	// Launcher, when set, is the small toolsvc-sandbox binary, started in
	// place of SelfExe as each call's reaper and to confine each program
	// (entries still need SelfExe): it skips the service's package
	// initialisation, most of the cost of a start.
	Launcher string
	// ReadOnlyDirs are extra files or directories programs may read
	// (besides the system directories needed to run programs).
	ReadOnlyDirs []string
	// Limits are the resource limits of each program.
	Limits Limits
	// KillGrace is the time between SIGTERM and SIGKILL; 0 is
	// DefaultKillGrace.
	KillGrace time.Duration
	// Logger receives one line when the sandbox is created; nil discards.
	Logger *slog.Logger
	// Probe asks the kernel what it offers; nil is the package's Probe.
	// Tests inject one to see a kernel without Landlock.
	Probe func() ProbeResult
}

// ErrUnavailable means the sandbox cannot run programs as its mode
// requires (mode required on a kernel without Landlock).
var ErrUnavailable = errors.New("sandbox unavailable")

// Sandbox runs programs under one configuration. It is safe for
// concurrent use.
type Sandbox struct {
	mode     Mode
	selfExe  string
	launcher string
	readOnly []string
	limits   Limits
	grace    time.Duration
	status   Status
	// launcherExec is what executing the launcher needs: itself and its
	// loader.
	launcherExec []string
}

// New returns a sandbox; in every mode but off it fails without SelfExe.
// In ModeRequired on a kernel without Landlock the sandbox is returned
// but unusable: Usable and Run fail with ErrUnavailable, and Status says
// why, so the program can leave out the tools that need it.
func New(o Options) (*Sandbox, error) {
	mode, err := ParseMode(string(o.Mode))
	if err != nil {
		return nil, err
	}
	s := &Sandbox{mode: mode, limits: o.Limits, grace: cmp.Or(o.KillGrace, DefaultKillGrace)}
	for _, d := range o.ReadOnlyDirs {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("sandbox: read-only path %q: %w", d, err)
		}
		s.readOnly = append(s.readOnly, abs)
	}
	// Mode off still runs entries (the shell interpreter) through SelfExe.
	if mode != ModeOff || o.SelfExe != "" {
		if o.SelfExe == "" {
			return nil, errors.New("sandbox: SelfExe (the path of the toolsvc binary) is required unless the mode is off")
		}
		abs, err := filepath.Abs(o.SelfExe)
		if err != nil {
			return nil, fmt.Errorf("sandbox: SelfExe: %w", err)
		}
		if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("sandbox: SelfExe %q is not a regular file", o.SelfExe)
		}
		s.selfExe = abs
		s.launcher = abs
		if o.Launcher != "" {
			l, err := filepath.Abs(o.Launcher)
			if err != nil || !executable(l) {
				return nil, fmt.Errorf("sandbox: launcher %q is not an executable file", o.Launcher)
			}
			s.launcher = l
		}
		// An entry starts its programs through the launcher.
		s.launcherExec = execSet(s.launcher, nil)
	}
	probe := o.Probe
	if probe == nil {
		probe = Probe
	}
	s.status = s.computeStatus(probe())
	if mode == ModeRequired && s.status.LandlockABI < 1 {
		s.status.Unavailable = fmt.Sprintf("mode required but %s: programs are not run; use a kernel with Landlock enabled (in a container, also a seccomp profile that allows the landlock_create_ruleset, landlock_add_rule and landlock_restrict_self system calls: \"function not implemented\" may be the profile, not the kernel), or opt in to running them unconfined with mode best-effort", s.status.Reason)
	}
	if o.Logger != nil {
		o.Logger.Info("sandbox", s.status.LogAttrs()...)
	}
	return s, nil
}

// Usable returns nil when the sandbox can run programs, and otherwise an
// error wrapping ErrUnavailable that says why.
func (s *Sandbox) Usable() error {
	if s.status.Unavailable != "" {
		return fmt.Errorf("%w: %s", ErrUnavailable, s.status.Unavailable)
	}
	return nil
}

// Mode returns the sandbox's mode.
func (s *Sandbox) Mode() Mode { return s.mode }

// Limits returns the resource limits of each program (none in mode off).
func (s *Sandbox) Limits() Limits {
	if s.mode == ModeOff {
		return Limits{}
	}
	return s.limits
}

// ProbeResult is what the kernel offers.
type ProbeResult struct {
	// LandlockABI is the kernel's Landlock ABI version; 0 when Landlock is
	// unavailable.
	LandlockABI int
	// Err says why Landlock is unavailable.
	Err error
}

// Status reports which confinement layers the sandbox applies to each
// program, for start-up logs and readiness details.
type Status struct {
	Mode Mode `json:"mode"`
	// LandlockABI is the Landlock ABI version the kernel supports (0: none).
	LandlockABI int `json:"landlockAbi"`
	// Landlock reports whether programs run in a Landlock domain.
	Landlock bool `json:"landlock"`
	// FSRules: programs may read only system directories, execute only
	// the program itself, and write only their workspace.
	FSRules bool `json:"fsRules"`
	// NetRules: programs may not connect or bind TCP sockets (ABI 4+).
	NetRules bool `json:"netRules"`
	// UDPRules: programs may not use UDP (ABI 10+).
	UDPRules bool `json:"udpRules"`
	// Scoped: programs may not signal processes or reach abstract UNIX
	// sockets outside their domain (ABI 6+).
	Scoped bool `json:"scoped"`
	// NoPrivileges: programs run with no_new_privs and no capabilities
	// (also when the service runs as root).
	NoPrivileges bool `json:"noPrivileges"`
	// Rlimits lists the resource limits applied.
	Rlimits []string `json:"rlimits"`
	// Reason explains layers that are missing.
	Reason string `json:"reason,omitempty"`
	// Unavailable, when set, says why the sandbox runs no programs at all
	// (so the tools that need it are not served).
	Unavailable string `json:"unavailable,omitempty"`
}

// LogAttrs returns the status as log attributes.
func (st Status) LogAttrs() []any {
	return []any{
		slog.String("mode", string(st.Mode)), slog.Int("landlockAbi", st.LandlockABI),
		slog.Bool("landlock", st.Landlock), slog.Bool("fsRules", st.FSRules),
		slog.Bool("netRules", st.NetRules), slog.Bool("udpRules", st.UDPRules), slog.Bool("scoped", st.Scoped),
		slog.Bool("noPrivileges", st.NoPrivileges), slog.String("rlimits", strings.Join(st.Rlimits, ",")),
		slog.String("reason", st.Reason), slog.String("unavailable", st.Unavailable),
	}
}

// Status returns the layers the sandbox applies.
func (s *Sandbox) Status() Status {
	st := s.status
	st.Rlimits = slices.Clone(st.Rlimits)
	return st
}

func (s *Sandbox) computeStatus(p ProbeResult) Status {
	st := Status{Mode: s.mode, LandlockABI: p.LandlockABI}
	if s.mode == ModeOff {
		st.Reason = "sandbox mode is off: process group and scrubbed environment only"
		return st
	}
	st.Rlimits = s.limits.names()
	st.NoPrivileges = runtime.GOOS == "linux"
	if p.LandlockABI < 1 {
		st.Reason = "Landlock unavailable"
		if p.Err != nil {
			st.Reason += ": " + p.Err.Error()
		}
		return st
	}
	st.Landlock, st.FSRules = true, true
	st.NetRules = p.LandlockABI >= 4
	st.Scoped = p.LandlockABI >= 6
	st.UDPRules = p.LandlockABI >= 10
	var missing []string
	if !st.NetRules {
		missing = append(missing, "TCP (needs ABI 4)")
	}
	if !st.Scoped {
		missing = append(missing, "signal/abstract-socket scoping (needs ABI 6)")
	}
	if !st.UDPRules {
		missing = append(missing, "UDP (needs ABI 10)")
	}
	if len(missing) > 0 {
		st.Reason = "not restricted by this kernel's Landlock: " + strings.Join(missing, ", ")
	}
	return st
}

func (l Limits) names() []string {
	names := []string{"core=0"}
	if l.CPUSeconds > 0 {
		names = append(names, fmt.Sprintf("cpu=%ds", l.CPUSeconds))
	}
	if l.AddressSpaceBytes > 0 {
		names = append(names, fmt.Sprintf("as=%d", l.AddressSpaceBytes))
	}
	if l.DataBytes > 0 {
		names = append(names, fmt.Sprintf("data=%d", l.DataBytes))
	}
	if l.FileSizeBytes > 0 {
		names = append(names, fmt.Sprintf("fsize=%d", l.FileSizeBytes))
	}
	if l.Processes > 0 {
		names = append(names, fmt.Sprintf("nproc=%d", l.Processes))
	}
	return names
}

// Spec is one program to run.
type Spec struct {
	// Args is argv. Args[0] is looked up in DefaultPath unless it is an
	// absolute path.
	Args []string
	// Workspace is the name of the directory the program may write (and
	// HOME and TMPDIR). Required.
	Workspace string
	// WorkDir, when set, is the workspace directory already opened (see
	// workspace.Dir.File): the program's writable tree and its working
	// directory are taken from this descriptor and Workspace is never
	// resolved again, so a symbolic link swapped in for the path cannot
	// redirect the program. Without it (mode off, tests) the path is used.
	WorkDir *os.File
	// Dir is the working directory, an operator-chosen absolute path; ""
	// is the workspace.
	Dir string
	// Env holds extra NAME=value pairs, already allowlisted by the caller.
	// PATH, HOME, LANG and TMPDIR are fixed, and names the dynamic loader
	// or C library would use to load code (LD_*, GCONV_PATH, ...) are
	// refused.
	Env []string
	// Stdin is the program's input; nil is empty input.
	Stdin io.Reader
	// Stdout and Stderr receive the program's output when set; when nil,
	// the output is captured in Result, bounded by MaxOutputBytes.
	Stdout, Stderr io.Writer
	// MaxOutputBytes bounds each captured stream; 0 is 64 KiB.
	MaxOutputBytes int
	// AllowExec lists further files or directories the program may
	// execute (the program itself always may), such as the interpreter
	// of a script (see ExecDeps).
	AllowExec []string
	// ReadOnly lists further files or directories this program may read,
	// besides the sandbox's ReadOnlyDirs and the system directories.
	ReadOnly []string
	// Entry, when set, runs the named Entry of the toolsvc binary in the
	// confined child instead of a program; Args are its arguments. It
	// needs SelfExe, also in mode off (where only DataBytes is applied).
	// The entry's own memory is bounded relative to what it holds when
	// it starts (see DataBytes), and the programs it starts get the
	// limits of a program through the launcher (see Programs), which it
	// may execute.
	Entry string
	// DataBytes, when not 0, is RLIMIT_DATA for this run, in place of the
	// sandbox's. An entry's process may grow by DataBytes beyond what it
	// holds when it starts (RLIMIT_DATA and RLIMIT_AS), and its programs
	// get DataBytes as RLIMIT_DATA.
	DataBytes uint64
}

// Result is what a program did.
type Result struct {
	// ExitCode is the exit status, or 128+signal when a signal ended it.
	ExitCode int
	Stdout   []byte
	Stderr   []byte
	// StdoutTruncated and StderrTruncated report captured streams cut at
	// MaxOutputBytes; the Dropped counts are the bytes not kept.
	StdoutTruncated, StderrTruncated bool
	StdoutDropped, StderrDropped     int64
	Duration                         time.Duration
	// Report is what an entry sent with Report, if anything.
	Report []byte
}

// ErrNotFound means the program is not in DefaultPath.
var ErrNotFound = errors.New("program not found")

// ErrSetup means the sandbox could not confine or start the program; the
// program did not run.
var ErrSetup = errors.New("sandbox set-up failed")

// LookPath finds name in DefaultPath (an absolute name is checked as is).
// It returns the absolute path of a regular, executable file.
func LookPath(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: empty program name", ErrNotFound)
	}
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			return "", fmt.Errorf("%w: %q is a relative path; give a program name or an absolute path", ErrNotFound, name)
		}
		if executable(name) {
			return filepath.Clean(name), nil
		}
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNotFound, name)
	}
	for _, dir := range filepath.SplitList(DefaultPath) {
		p := filepath.Join(dir, name)
		if executable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %q is not installed in %s", ErrNotFound, name, DefaultPath)
}

// execSet is what the program may execute: itself, the dynamic loader
// named in its ELF header (the kernel opens it for execution too), and
// what the caller allows.
func execSet(path string, extra []string) []string {
	set := []string{path}
	if f, err := elf.Open(path); err == nil {
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
			if err == nil {
				if interp := string(bytes.TrimRight(b, "\x00")); filepath.IsAbs(interp) {
					set = append(set, interp)
				}
			}
		}
	}
	return append(set, extra...)
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// CheckEnvName reports whether a program may be given the variable name:
// the fixed names and those that make the dynamic loader or the C library
// load code or files of the caller's choosing are refused.
func CheckEnvName(name string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") {
		return fmt.Errorf("invalid environment variable name %q", name)
	}
	if slices.Contains([]string{"PATH", "HOME", "LANG", "TMPDIR"}, name) {
		return fmt.Errorf("environment variable %s is fixed by the sandbox", name)
	}
	// glibc's list of variables it ignores in secure (setuid) mode, plus
	// the shell start-up hooks.
	unsafe := []string{"GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
		"MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR",
		"BASH_ENV", "ENV", "GLIBC_TUNABLES", "IFS", "CDPATH"}
	if strings.HasPrefix(name, "LD_") || slices.Contains(unsafe, name) {
		return fmt.Errorf("environment variable %s is refused: it can make programs load code or files of the caller's choosing", name)
	}
	return nil
}

func (s *Sandbox) environ(sp *Spec) ([]string, error) {
	env := []string{"PATH=" + DefaultPath, "HOME=" + sp.Workspace, "LANG=C.UTF-8", "TMPDIR=" + sp.Workspace}
	for _, kv := range sp.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("environment entry %q is not NAME=value", kv)
		}
		if err := CheckEnvName(name); err != nil {
			return nil, err
		}
		env = append(env, kv)
	}
	return env, nil
}

// Run runs one program and waits for it. When ctx ends first, the
// program and every process it started get SIGTERM, then SIGKILL after
// the grace period, and Run returns the partial result with an error that
// wraps ctx.Err(). When the program exits, anything it left running is
// killed, and so is everything when the service dies. A non-zero exit is
// not an error.
//
// Every process a call starts is a descendant of the call's reaper, which
// does the killing (see runReaper), so a process that leaves the
// program's process group or session is found all the same. In mode off
// a program (not an entry) is started directly instead, and only its
// process group is killed.
func (s *Sandbox) Run(ctx context.Context, sp Spec) (Result, error) {
	var res Result
	if err := s.Usable(); err != nil {
		return res, err
	}
	if len(sp.Args) == 0 {
		return res, fmt.Errorf("%w: no program given", ErrSetup)
	}
	if sp.Workspace == "" || !filepath.IsAbs(sp.Workspace) {
		return res, fmt.Errorf("%w: the workspace must be an absolute directory, got %q", ErrSetup, sp.Workspace)
	}
	for _, p := range sp.ReadOnly {
		if !filepath.IsAbs(p) {
			return res, fmt.Errorf("%w: readable path %q is not absolute", ErrSetup, p)
		}
	}
	var path string
	if sp.Entry == "" {
		var err error
		if path, err = LookPath(sp.Args[0]); err != nil {
			return res, err
		}
	} else if s.selfExe == "" {
		return res, fmt.Errorf("%w: entry %s needs the toolsvc binary (SelfExe)", ErrSetup, sp.Entry)
	}
	env, err := s.environ(&sp)
	if err != nil {
		return res, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	dir := cmp.Or(sp.Dir, sp.Workspace)
	limit := sp.MaxOutputBytes
	if limit <= 0 {
		limit = 64 << 10
	}

	var cmd *exec.Cmd
	var setupR *os.File
	reaper := false
	if s.mode == ModeOff && sp.Entry == "" {
		cmd = exec.CommandContext(ctx, path)
		cmd.Args = sp.Args
	} else {
		cfg := childConfig{
			Path:      path,
			Landlock:  s.status.Landlock,
			ABI:       s.status.LandlockABI,
			Strict:    s.mode == ModeRequired,
			ReadOnly:  slices.Concat(s.readOnly, sp.ReadOnly),
			ReadWrite: []string{sp.Workspace},
			Exec:      execSet(path, sp.AllowExec),
			Limits:    s.limits,
			Dir:       sp.Dir,
			Entry:     sp.Entry,
		}
		if sp.Entry != "" {
			cfg.Exec = slices.Concat(sp.AllowExec, s.launcherExec)
			cfg.Launcher = s.launcher
			// Each thread of a cgo build that calls malloc would reserve
			// a 64 MiB arena of glibc's, which RLIMIT_AS counts: a dozen
			// threads waiting for programs would use up the entry's
			// ceiling. The programs get an environment of their own.
			env = append(env, "MALLOC_ARENA_MAX=1")
		}
		if sp.DataBytes > 0 {
			cfg.Limits.DataBytes = sp.DataBytes
		}
		if s.mode == ModeOff {
			cfg.Landlock, cfg.Strict, cfg.NoPrivDrop = false, false, true
			cfg.Limits = Limits{DataBytes: sp.DataBytes}
		}
		if sp.WorkDir != nil {
			// The child changes into the descriptor and grants its
			// rights to "." from there.
			cfg.WorkFD, cfg.ReadWrite = workFD, nil
		}
		// The launcher is the reaper; the child it starts is the
		// launcher too, or toolsvc for an entry.
		cfg.Reaper, cfg.Child, cfg.Grace = true, s.launcher, s.grace
		if sp.Entry != "" {
			cfg.Child = s.selfExe
		}
		enc, err := cfg.encode()
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		cmd = exec.CommandContext(ctx, s.launcher, append([]string{ChildCommand, enc, "--"}, sp.Args...)...)
		reaper = true
		r, w, err := os.Pipe()
		if err != nil {
			return res, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		defer r.Close()
		defer w.Close()
		setupR = r
		cmd.ExtraFiles = []*os.File{w} // fd 3 in the child
		if sp.WorkDir != nil {
			cmd.ExtraFiles = append(cmd.ExtraFiles, sp.WorkDir) // fd 4
			// The child changes directory itself; PWD names where.
			cmd.Env = append(env, "PWD="+cmp.Or(sp.Dir, sp.Workspace))
			env, dir = cmd.Env, ""
		}
	}
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdin = sp.Stdin
	var outCap, errCap *Capture
	cmd.Stdout, cmd.Stderr = sp.Stdout, sp.Stderr
	if cmd.Stdout == nil {
		outCap = NewCapture(limit)
		cmd.Stdout = outCap
	}
	if cmd.Stderr == nil {
		errCap = NewCapture(limit)
		cmd.Stderr = errCap
	}
	cmd.SysProcAttr = procAttr(reaper)
	g := &group{grace: s.grace, reaper: reaper}
	cmd.Cancel = func() error { return g.cancel(cmd.Process.Pid) }
	// Backstop: if the group ignores SIGKILL's effects on its pipes (a
	// process that escaped the group still holds them), stop waiting;
	// and if the reaper has not ended by then, kill it.
	cmd.WaitDelay = 2*s.grace + time.Second
	if reaper {
		cmd.WaitDelay += reapLimit
	}

	// The parent-death signal is sent when the thread that started the
	// process ends (go.dev/issue/27505), and Go ends a thread when a
	// goroutine locked to it exits: keep this one until the process is
	// reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		if ctx.Err() != nil {
			return res, fmt.Errorf("%s not started: %w", sp.Args[0], ctx.Err())
		}
		return res, fmt.Errorf("%w: start %s: %v", ErrSetup, sp.Args[0], err)
	}
	var setupErr error
	if setupR != nil {
		cmd.ExtraFiles[0].Close() // the child holds its own copy
		// The child writes here only when it fails; a successful exec
		// closes its copy (close-on-exec), so this reads EOF.
		msg, _ := io.ReadAll(io.LimitReader(setupR, maxReportBytes))
		if rep, ok := bytes.CutPrefix(msg, []byte(reportPrefix)); ok && sp.Entry != "" {
			res.Report = rep
		} else if len(msg) > 0 {
			setupErr = fmt.Errorf("%w: %s", ErrSetup, bytes.TrimSpace(msg[:min(len(msg), 4096)]))
		}
	}
	werr := waitAndKillGroup(cmd, g)
	res.Duration = time.Since(start)
	if outCap != nil {
		res.Stdout, res.StdoutTruncated, res.StdoutDropped = outCap.Bytes(), outCap.Truncated(), outCap.Dropped()
	}
	if errCap != nil {
		res.Stderr, res.StderrTruncated, res.StderrDropped = errCap.Bytes(), errCap.Truncated(), errCap.Dropped()
	}
	if ps := cmd.ProcessState; ps != nil {
		res.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.ExitCode = 128 + int(ws.Signal())
		}
	}
	switch {
	case setupErr != nil:
		return res, setupErr
	case ctx.Err() != nil && g.canceled():
		return res, fmt.Errorf("%s stopped: %w", sp.Args[0], ctx.Err())
	case werr != nil && !errors.As(werr, new(*exec.ExitError)) && !errors.Is(werr, exec.ErrWaitDelay):
		return res, fmt.Errorf("%s: %w", sp.Args[0], werr)
	}
	return res, nil
}

// group signals one process group, never after its leader was reaped.
// With reaper, the group is the call's reaper alone, which stops the
// program and all it started itself, grace period included.
type group struct {
	grace  time.Duration
	reaper bool

	mu        sync.Mutex
	done      bool
	cancelled bool
	timer     *time.Timer
}

func (g *group) cancel(pgid int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done || g.cancelled {
		return nil
	}
	g.cancelled = true
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	if g.reaper {
		return nil // cmd.WaitDelay kills a reaper that does not end
	}
	g.timer = time.AfterFunc(g.grace, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.done {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
	})
	return nil
}

// finish marks the leader as gone and, with kill, kills whatever is left
// of the group: the leader has exited but is not reaped yet, so pgid
// still names this group.
func (g *group) finish(pgid int, kill bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if kill {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	g.done = true
	if g.timer != nil {
		g.timer.Stop()
	}
}

func (g *group) canceled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cancelled
}
