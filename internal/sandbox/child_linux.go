//go:build linux

package sandbox

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

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

// Report sends b to the parent from an entry (see Entry); the parent
// returns it in Result.Report. It may be called once, at the end.
func Report(b []byte) error {
	if len(b) > maxReportBytes-len(reportPrefix) {
		return fmt.Errorf("sandbox: report of %d bytes is too large", len(b))
	}
	_, err := unix.Write(setupFD, append([]byte(reportPrefix), b...))
	return err
}

// confine applies the configuration to this process: the OOM killer's
// preference, privileges, working directory, Landlock, resource limits.
func confine(cfg *childConfig) error {
	// Before Landlock, which does not let this process reach /proc.
	preferOOMKill()
	// Capabilities, the bounding set and no_new_privs are per thread; the
	// program inherits them from the thread that executes it, so all of
	// this and the exec happen on one thread. Never unlocked: this
	// process either becomes the program or exits.
	runtime.LockOSThread()
	var held memory
	if cfg.Entry != "" {
		// Before Landlock, which does not let this process read /proc.
		var err error
		if held, err = memoryInUse(); err != nil {
			return err
		}
	}
	if !cfg.NoPrivDrop {
		if err := dropPrivileges(); err != nil {
			return err
		}
	}
	// The program must not inherit the set-up pipe: a successful exec
	// closes it, which tells the parent that set-up worked.
	// An entry keeps it open to report its result (see Report), and
	// the programs it runs do not inherit it either.
	var st unix.Stat_t
	if unix.Fstat(setupFD, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
		unix.CloseOnExec(setupFD)
	}
	if cfg.WorkFD != 0 {
		// The workspace by descriptor, never by name: "." below is this
		// very directory, whatever its path now points to.
		if err := unix.Fchdir(cfg.WorkFD); err != nil {
			return fmt.Errorf("fchdir workspace: %w", err)
		}
		_ = unix.Close(cfg.WorkFD)
		cfg.ReadWrite = append(cfg.ReadWrite, ".")
	}
	if cfg.Landlock {
		if err := restrict(cfg); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	}
	if cfg.Dir != "" {
		if err := unix.Chdir(cfg.Dir); err != nil {
			return fmt.Errorf("chdir %s: %w", cfg.Dir, err)
		}
	}
	if cfg.Entry != "" {
		// An entry is Go code that runs under the limits itself, its
		// memory bounded relative to what it holds already.
		var err error
		cfg.programs, err = applyEntryLimits(cfg.Limits, held)
		return err
	}
	// A program gets its limits in execProgram, at the last moment.
	return nil
}

// preferOOMKill sets the process's oom_score_adj to the most, 1000, which
// the program and everything it starts inherit: where memory runs out (a
// container's cgroup holding the service, its workers and the calls'
// programs) the kernel's OOM killer kills a call's process, and the call
// fails, before the service. Raising one's own score needs no privilege.
// The reaper keeps the service's score: killed, it could not stop what
// the program started. Best effort: without /proc the kernel chooses as
// it would.
func preferOOMKill() {
	if fd, err := unix.Open("/proc/self/oom_score_adj", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		_, _ = unix.Write(fd, []byte("1000"))
		_ = unix.Close(fd)
	}
}

// execProgram replaces this confined process with the program.
//
// The resource limits are applied only once everything execve needs is
// built, and nothing allocates between them and the call: a low
// address-space limit is usually below what this Go process already
// has mapped (far below it in a race-enabled build), so the runtime's
// next request for memory would be fatal before the program ever ran.
func execProgram(cfg *childConfig, argv []string) error {
	path, err := unix.BytePtrFromString(cfg.Path)
	if err != nil {
		return fmt.Errorf("exec %s: %w", cfg.Path, err)
	}
	argvp, err := syscall.SlicePtrFromStrings(argv)
	if err != nil {
		return fmt.Errorf("exec %s: %w", cfg.Path, err)
	}
	env := os.Environ()
	if cfg.UnsetEnv != "" {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, cfg.UnsetEnv+"=") })
	}
	envp, err := syscall.SlicePtrFromStrings(env)
	if err != nil {
		return fmt.Errorf("exec %s: %w", cfg.Path, err)
	}
	if err := applyLimits(cfg.Limits); err != nil {
		return err
	}
	_, _, errno := unix.RawSyscall(unix.SYS_EXECVE,
		uintptr(unsafe.Pointer(path)), uintptr(unsafe.Pointer(&argvp[0])), uintptr(unsafe.Pointer(&envp[0])))
	return fmt.Errorf("exec %s: %w", cfg.Path, errno)
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

// Rights granted on paths. Making symbolic links is granted nowhere (it
// is handled, so denied): no program, whatever it is (cp -P, tar, ln),
// can plant a link for a later call to follow. Directory rights are cut down to the file
// rights when a path is a file.
const (
	fileRights  = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
	readRights  = ll.AccessFSReadFile | ll.AccessFSReadDir
	execRights  = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir
	writeRights = ll.AccessFSReadFile | ll.AccessFSReadDir | ll.AccessFSWriteFile | ll.AccessFSTruncate |
		ll.AccessFSRemoveDir | ll.AccessFSRemoveFile | ll.AccessFSMakeDir | ll.AccessFSMakeReg |
		ll.AccessFSMakeFifo | ll.AccessFSMakeSock
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

// setLimit sets a resource limit, never above the hard limit in force.
func setLimit(name string, res int, cur, hard uint64) error {
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

// applyLimits applies a program's limits, as they are.
func applyLimits(l Limits) error {
	if err := applyTimeAndFileLimits(l); err != nil {
		return err
	}
	if l.DataBytes > 0 {
		if err := setLimit("data", unix.RLIMIT_DATA, l.DataBytes, l.DataBytes); err != nil {
			return err
		}
	}
	if l.AddressSpaceBytes > 0 {
		return setLimit("as", unix.RLIMIT_AS, l.AddressSpaceBytes, l.AddressSpaceBytes)
	}
	return nil
}

// applyEntryLimits applies the limits of an entry's own process, a Go
// program that already holds what its runtime reserved (more than a
// program's whole address-space limit may allow: about 1.3 GB without
// cgo, more with it, far more with -race), and returns the limits of the
// programs it starts (see Programs). CPU time, file size and processes
// are a program's. Its memory may grow by l.DataBytes beyond what it
// holds, as a tool worker's does: RLIMIT_DATA (private writable memory)
// and RLIMIT_AS (every mapping, which also catches heap the runtime
// commits over its own reservations, uncharged to RLIMIT_DATA) are each
// set to what is in use plus l.DataBytes; without DataBytes, the address
// space may grow by l.AddressSpaceBytes. The hard limits stay at least
// the programs' limits: l's, or where l leaves one, the one this process
// had before.
func applyEntryLimits(l Limits, held memory) (Limits, error) {
	programs := l
	var as, data unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &as); err != nil {
		return programs, fmt.Errorf("getrlimit as: %w", err)
	}
	if err := unix.Getrlimit(unix.RLIMIT_DATA, &data); err != nil {
		return programs, fmt.Errorf("getrlimit data: %w", err)
	}
	programs.AddressSpaceBytes = cmp.Or(l.AddressSpaceBytes, as.Cur)
	programs.DataBytes = cmp.Or(l.DataBytes, data.Cur)
	if err := applyTimeAndFileLimits(l); err != nil {
		return programs, err
	}
	if l.DataBytes > 0 {
		lim := held.data + l.DataBytes
		if err := setLimit("data", unix.RLIMIT_DATA, lim, max(lim, programs.DataBytes)); err != nil {
			return programs, err
		}
	}
	if grow := cmp.Or(l.DataBytes, l.AddressSpaceBytes); grow > 0 {
		lim := held.size + grow
		if err := setLimit("as", unix.RLIMIT_AS, lim, max(lim, programs.AddressSpaceBytes)); err != nil {
			return programs, err
		}
	}
	return programs, nil
}

// applyTimeAndFileLimits applies the limits but memory: no core files,
// CPU time, file size, processes.
func applyTimeAndFileLimits(l Limits) error {
	if err := setLimit("core", unix.RLIMIT_CORE, 0, 0); err != nil {
		return err
	}
	if l.CPUSeconds > 0 {
		// SIGXCPU at the soft limit, SIGKILL a second later.
		if err := setLimit("cpu", unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds+1); err != nil {
			return err
		}
	}
	if l.FileSizeBytes > 0 {
		if err := setLimit("fsize", unix.RLIMIT_FSIZE, l.FileSizeBytes, l.FileSizeBytes); err != nil {
			return err
		}
	}
	if l.Processes > 0 {
		return setLimit("nproc", unix.RLIMIT_NPROC, l.Processes, l.Processes)
	}
	return nil
}

// memory is what a process holds, in bytes.
type memory struct {
	// size is its virtual memory (what RLIMIT_AS counts), data its
	// private writable memory and stack (what RLIMIT_DATA counts, or
	// close to it).
	size, data uint64
}

// memoryInUse reads this process's memory from the first and sixth
// fields of /proc/self/statm, in pages.
func memoryInUse() (memory, error) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return memory{}, fmt.Errorf("reading the memory in use: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 6 {
		return memory{}, fmt.Errorf("/proc/self/statm has %d fields, want at least 6", len(f))
	}
	var pages [2]uint64
	for i, field := range []string{f[0], f[5]} {
		if pages[i], err = strconv.ParseUint(field, 10, 64); err != nil {
			return memory{}, fmt.Errorf("/proc/self/statm: %w", err)
		}
	}
	page := uint64(os.Getpagesize())
	return memory{size: pages[0] * page, data: pages[1] * page}, nil
}

// procAttr puts the process in a group of its own and has the kernel
// signal it when the service dies: the reaper with SIGTERM, so that it
// stops the program and everything the program started; a program
// started directly (mode off) with SIGKILL.
func procAttr(reaper bool) *syscall.SysProcAttr {
	sig := syscall.SIGKILL
	if reaper {
		sig = syscall.SIGTERM
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sig}
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
