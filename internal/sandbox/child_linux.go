//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// setupFD is the child's end of the set-up pipe (the parent's ExtraFiles[0]).
const setupFD = 3

// Probe asks the kernel which Landlock ABI it supports.
func Probe() ProbeResult {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return ProbeResult{Err: err}
	}
	return ProbeResult{LandlockABI: v}
}

// reportSetup writes a set-up failure to the parent, if the set-up pipe is
// there, and returns err.
func reportSetup(err error) error {
	if err == nil {
		return nil
	}
	var st unix.Stat_t
	if unix.Fstat(setupFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
		_, _ = unix.Write(setupFD, []byte(err.Error()))
	}
	return err
}

func runChild(cfg *childConfig, argv []string) error {
	// Capabilities, the bounding set and no_new_privs are per thread; the
	// program inherits them from the thread that executes it, so all of
	// this and the exec happen on one thread. Never unlocked: this
	// process either becomes the program or exits.
	runtime.LockOSThread()
	if err := dropPrivileges(); err != nil {
		return err
	}
	// The program must not inherit the set-up pipe: a successful exec
	// closes it, which tells the parent that set-up worked.
	var st unix.Stat_t
	if unix.Fstat(setupFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
		unix.CloseOnExec(setupFD)
	}
	if cfg.Landlock {
		if err := restrict(cfg); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	// Limits last: a low address-space limit must not starve this Go
	// process before it has executed the program.
	if err := applyLimits(cfg.Limits); err != nil {
		return err
	}
	err := unix.Exec(cfg.Path, argv, os.Environ())
	return fmt.Errorf("exec %s: %w", cfg.Path, err)
}

// dropPrivileges sets no_new_privs (no setuid or file capabilities on
// exec) and drops every capability, from the bounding set too, so that a
// program started by root is root without privileges.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	_ = unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) // EINVAL before Linux 4.3
	for c := uintptr(0); c < 64; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the last capability this kernel knows
		}
		if errors.Is(err, unix.EPERM) {
			break // no CAP_SETPCAP: an unprivileged user, nothing to drop
		}
		if err != nil {
			return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// Rights granted on paths. Directory rights are cut down to the file
// rights when a path is a file.
const (
	fileRights  = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	readRights  = ll.AccessFSReadFile | ll.AccessFSReadDir
	execRights  = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	writeRights = ll.AccessFSReadFile | ll.AccessFSReadDir | ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg |
		ll.AccessFSMakeSym | ll.AccessFSMakeFifo | ll.AccessFSMakeSock
	deviceRights = ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSTruncate
)

// systemReadPaths are what a dynamically linked program needs to start and
// behave normally (libraries, loader cache, locales, time zones). Broad
// /etc is deliberately absent, and so are the user and group databases:
// programs show numeric owners rather than read /etc/passwd.
func systemReadPaths() []string {
	return []string{
		"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
		"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
		"/etc/localtime", "/etc/timezone",
		"/etc/magic", "/etc/mime.types",
		"/dev/zero", "/dev/urandom", "/dev/random",
	}
}

// configs returns go-landlock's preset for each ABI version.
func configs() []landlock.Config {
	return []landlock.Config{{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
		landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}
}

func restrict(cfg *childConfig) error {
	presets := configs()
	var c landlock.Config
	if cfg.Strict {
		if cfg.ABI < 1 {
			return errors.New("Landlock is unavailable")
		}
		// Exactly what this kernel can enforce, and fail otherwise.
		c = presets[min(cfg.ABI, len(presets)-1)]
	} else {
		c = presets[len(presets)-1].BestEffort()
	}
	handled := c.HandledAccessFS
	var rules []landlock.Rule
	add := func(path string, rights landlock.AccessFSSet) error {
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			rights &= fileRights
		}
		rights &= handled // e.g. no truncate right before ABI 3
		if rights != 0 {
			rules = append(rules, landlock.PathAccess(rights, path))
		}
		return nil
	}
	for _, p := range append(systemReadPaths(), cfg.ReadOnly...) {
		if err := add(p, readRights); err != nil {
			return err
		}
	}
	if err := add("/dev/null", deviceRights); err != nil {
		return err
	}
	if err := add("/dev/full", deviceRights); err != nil {
		return err
	}
	rw := landlock.AccessFSSet(writeRights)
	if cfg.ABI >= 2 {
		rw |= ll.AccessFSRefer // moving files between workspace directories
	}
	for _, p := range cfg.ReadWrite {
		if err := add(p, rw); err != nil {
			return err
		}
	}
	for _, p := range cfg.Exec {
		if err := add(p, execRights); err != nil {
			return err
		}
	}
	// No network rules: with ABI 4+ every TCP bind and connect is denied
	// (UDP too with ABI 10+). Scoped signals and abstract sockets (ABI 6+)
	// come with the preset.
	return c.Restrict(rules...)
}

func applyLimits(l Limits) error {
	set := func(name string, res int, cur, hard uint64) error {
		var old unix.Rlimit
		if err := unix.Getrlimit(res, &old); err != nil {
			return fmt.Errorf("getrlimit %s: %w", name, err)
		}
		lim := unix.Rlimit{Cur: min(cur, old.Max), Max: min(hard, old.Max)}
		if err := unix.Setrlimit(res, &lim); err != nil {
			return fmt.Errorf("setrlimit %s: %w", name, err)
		}
		return nil
	}
	if err := set("core", unix.RLIMIT_CORE, 0, 0); err != nil {
		return err
	}
	if l.CPUSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL a second later.
		if err := set("cpu", unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds+1); err != nil {
			return err
		}
	}
	if l.FileSizeBytes > 0 {
		if err := set("fsize", unix.RLIMIT_FSIZE, l.FileSizeBytes, l.FileSizeBytes); err != nil {
			return err
		}
	}
	if l.Processes > 0 {
		if err := set("nproc", unix.RLIMIT_NPROC, l.Processes, l.Processes); err != nil {
			return err
		}
	}
	if l.AddressSpaceBytes > 0 {
		if err := set("as", unix.RLIMIT_AS, l.AddressSpaceBytes, l.AddressSpaceBytes); err != nil {
			return err
		}
	}
	return nil
}

// waitAndKillGroup waits for the group leader to exit without reaping it,
// kills the rest of its group (the zombie leader keeps the group id from
// being reused), and then reaps it.
func waitAndKillGroup(cmd *exec.Cmd, g *group) error {
	pid := cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	g.finish(pid, true)
	return cmd.Wait()
}
