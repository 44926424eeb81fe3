//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary play toolsvc's part: re-executed with
// ChildCommand it is the sandbox child (with the entries "daemon" and
// "limits"), with
// "kill-helper" the service of TestServiceKilled, and with "dial-helper"
// a program that tries to open a TCP connection (exit 0: connected, 3:
// not).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case ChildCommand:
			err := RunChild(os.Args[2:], Entries{"daemon": daemonEntry, "limits": limitsEntry})
			fmt.Fprintln(os.Stderr, "sandbox child:", err)
			os.Exit(125)
		case "kill-helper":
			err := killHelper(os.Args[2:])
			fmt.Fprintln(os.Stderr, "kill-helper:", err)
			os.Exit(1)
		case "caps-helper":
			// Reports this process's privileges: effective and permitted
			// capabilities, the size of the bounding set, no_new_privs.
			hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
			var data [2]unix.CapUserData
			if err := unix.Capget(&hdr, &data[0]); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			bounding := 0
			for c := uintptr(0); c < 64; c++ {
				v, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, c, 0, 0, 0)
				if err != nil {
					break
				}
				bounding += v
			}
			nnp, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0)
			fmt.Printf("eff=%x prm=%x bnd=%d nnp=%d\n", data[0].Effective|data[1].Effective, data[0].Permitted|data[1].Permitted, bounding, nnp)
			os.Exit(0)
		case "dial-helper":
			c, err := net.DialTimeout("tcp", os.Args[2], 5*time.Second)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(3)
			}
			c.Close()
			fmt.Println("connected")
			os.Exit(0)
		}
	}
	os.Exit(m.Run())
}

func selfExe(t testing.TB) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func newSandbox(t testing.TB, mode Mode, lim Limits) *Sandbox {
	t.Helper()
	s, err := New(Options{Mode: mode, SelfExe: selfExe(t), Limits: lim, KillGrace: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// needLandlock skips when the kernel has no Landlock; the machine these
// tests are written for has ABI 7.
func needLandlock(t *testing.T) {
	t.Helper()
	if p := Probe(); p.LandlockABI < 1 {
		t.Skipf("kernel has no Landlock: %v", p.Err)
	}
}

func TestRunEchoAndExitCodes(t *testing.T) {
	for _, mode := range []Mode{ModeOff, ModeBestEffort} {
		t.Run(string(mode), func(t *testing.T) {
			s := newSandbox(t, mode, Limits{})
			ws := t.TempDir()
			res, err := s.Run(context.Background(), Spec{Args: []string{"echo", "hello", "world"}, Workspace: ws})
			if err != nil {
				t.Fatal(err)
			}
			if string(res.Stdout) != "hello world\n" || res.ExitCode != 0 || res.StdoutTruncated {
				t.Fatalf("got %+v", res)
			}
			res, err = s.Run(context.Background(), Spec{Args: []string{"ls", "does-not-exist"}, Workspace: ws})
			if err != nil {
				t.Fatalf("a failing program is not an error: %v", err)
			}
			if res.ExitCode != 2 || !strings.Contains(string(res.Stderr), "does-not-exist") {
				t.Fatalf("got exit %d stderr %q", res.ExitCode, res.Stderr)
			}
			res, err = s.Run(context.Background(), Spec{Args: []string{"cat"}, Stdin: strings.NewReader("from stdin"), Workspace: ws})
			if err != nil || string(res.Stdout) != "from stdin" {
				t.Fatalf("stdin: %q %v", res.Stdout, err)
			}
		})
	}
}

func TestNotFoundAndRelativePaths(t *testing.T) {
	s := newSandbox(t, ModeOff, Limits{})
	for _, name := range []string{"no-such-program-xyz", "./ls", "bin/ls"} {
		_, err := s.Run(context.Background(), Spec{Args: []string{name}, Workspace: t.TempDir()})
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: want ErrNotFound, got %v", name, err)
		}
	}
}

func TestEnvironmentIsScrubbed(t *testing.T) {
	t.Setenv("TOOLSVC_SECRET_FOR_TEST", "leak")
	s := newSandbox(t, ModeBestEffort, Limits{})
	ws := t.TempDir()
	res, err := s.Run(context.Background(), Spec{Args: []string{"env"}, Workspace: ws, Env: []string{"GREETING=hi"}})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
	want := []string{"PATH=" + DefaultPath, "HOME=" + ws, "LANG=C.UTF-8", "TMPDIR=" + ws, "GREETING=hi"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("environment:\n got %q\nwant %q", got, want)
	}
	for _, bad := range []string{"LD_PRELOAD=/x.so", "GCONV_PATH=.", "PATH=/tmp", "noequals"} {
		_, err := s.Run(context.Background(), Spec{Args: []string{"env"}, Workspace: ws, Env: []string{bad}})
		if !errors.Is(err, ErrSetup) {
			t.Errorf("%s: want ErrSetup, got %v", bad, err)
		}
	}
}

// procsWithArg lists the processes whose command line contains arg.
func procsWithArg(t *testing.T, arg string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if bytes.Contains(b, []byte(arg)) {
			found = append(found, e.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return found
}

func TestTimeoutKillsWholeGroup(t *testing.T) {
	cases := map[string]string{
		// A background child and a foreground one.
		"plain": "sleep 31.4159 & sleep 31.4159",
		// Everything ignores SIGTERM, so only the SIGKILL after the grace
		// period stops it.
		"ignores-term": `trap "" TERM; sleep 31.4159 & sleep 31.4159`,
	}
	for name, script := range cases {
		t.Run(name, func(t *testing.T) {
			s := newSandbox(t, ModeBestEffort, Limits{})
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := s.Run(ctx, Spec{Args: []string{"sh", "-c", script}, Workspace: t.TempDir(), AllowExec: []string{"/usr/bin/sleep", "/bin/sleep"}})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("want a deadline error, got %v", err)
			}
			if left := procsWithArg(t, "31.4159"); len(left) > 0 {
				t.Fatalf("processes left behind: %q", left)
			}
		})
	}
}

func TestLeftoversKilledAfterExit(t *testing.T) {
	s := newSandbox(t, ModeBestEffort, Limits{})
	res, err := s.Run(context.Background(), Spec{Args: []string{"sh", "-c", "sleep 32.718 & echo started"}, Workspace: t.TempDir(), AllowExec: []string{"/usr/bin/sleep", "/bin/sleep"}})
	if err != nil || string(res.Stdout) != "started\n" {
		t.Fatalf("%q %v", res.Stdout, err)
	}
	if left := procsWithArg(t, "32.718"); len(left) > 0 {
		t.Fatalf("processes left behind: %q", left)
	}
}

func TestFloodIsBoundedInMemory(t *testing.T) {
	s := newSandbox(t, ModeBestEffort, Limits{})
	const limit = 64 << 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// About 169 MB on stdout.
	res, err := s.Run(context.Background(), Spec{Args: []string{"seq", "1", "20000000"}, Workspace: t.TempDir(), MaxOutputBytes: limit})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(len(res.Stdout)) + res.StdoutDropped
	if !res.StdoutTruncated || len(res.Stdout) != limit || total < 150<<20 {
		t.Fatalf("truncated=%v kept=%d total=%d", res.StdoutTruncated, len(res.Stdout), total)
	}
	if !strings.HasPrefix(string(res.Stdout), "1\n2\n3\n") {
		t.Fatalf("kept output does not start at the beginning: %q", res.Stdout[:20])
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("program wrote %d bytes; kept %d; the Go heap allocated %d bytes in total during the run", total, len(res.Stdout), alloc)
	if alloc > 8<<20 {
		t.Fatalf("allocated %d bytes for a %d-byte limit: memory is not bounded by the limit", alloc, limit)
	}
}

func TestLandlockConfinesFiles(t *testing.T) {
	needLandlock(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "mine.txt"), []byte("my data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, mode := range []Mode{ModeRequired, ModeBestEffort} {
		t.Run(string(mode), func(t *testing.T) {
			s := newSandbox(t, mode, Limits{})
			st := s.Status()
			if !st.Landlock || !st.FSRules || st.LandlockABI < 1 {
				t.Fatalf("status: %+v", st)
			}
			run := func(args ...string) Result {
				t.Helper()
				res, err := s.Run(ctx, Spec{Args: args, Workspace: ws})
				if err != nil {
					t.Fatalf("%q: %v", args, err)
				}
				return res
			}
			if res := run("cat", "mine.txt"); res.ExitCode != 0 || string(res.Stdout) != "my data" {
				t.Fatalf("reading inside the workspace: %+v", res)
			}
			if res := run("cat", secret); res.ExitCode == 0 || bytes.Contains(res.Stdout, []byte("secret")) || !bytes.Contains(res.Stderr, []byte("Permission denied")) {
				t.Fatalf("read outside the workspace was allowed: exit %d %q %q", res.ExitCode, res.Stdout, res.Stderr)
			}
			for _, f := range []string{"/etc/hostname", "/etc/passwd", "/etc/group"} {
				if res := run("cat", f); res.ExitCode == 0 {
					t.Fatalf("%s is readable: %q", f, res.Stdout)
				}
			}
			if res := run("touch", "new.txt"); res.ExitCode != 0 {
				t.Fatalf("writing inside the workspace: %q", res.Stderr)
			}
			if _, err := os.Stat(filepath.Join(ws, "new.txt")); err != nil {
				t.Fatal(err)
			}
			escaped := filepath.Join(outside, "escaped-"+string(mode))
			if res := run("touch", escaped); res.ExitCode == 0 {
				t.Fatal("write outside the workspace was allowed")
			}
			if _, err := os.Stat(escaped); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("file outside the workspace was created: %v", err)
			}
			// Only the program itself may be executed: a shell cannot start
			// another program unless it is allowed explicitly.
			if res := run("sh", "-c", "ls"); res.ExitCode != 126 {
				t.Fatalf("sh executed ls: exit %d %q", res.ExitCode, res.Stderr)
			}
			res, err := s.Run(ctx, Spec{Args: []string{"sh", "-c", "ls mine.txt"}, Workspace: ws, AllowExec: []string{"/usr/bin/ls", "/bin/ls"}})
			if err != nil || res.ExitCode != 0 || string(res.Stdout) != "mine.txt\n" {
				t.Fatalf("AllowExec: %+v %v", res, err)
			}
		})
	}
}

func TestLandlockDeniesTCP(t *testing.T) {
	needLandlock(t)
	if Probe().LandlockABI < 4 {
		t.Skip("Landlock ABI < 4 cannot restrict TCP")
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	exe := selfExe(t)
	dial := Spec{Args: []string{exe, "dial-helper", ln.Addr().String()}, Workspace: t.TempDir()}

	// Control: without Landlock the helper connects, so the check below
	// is able to fail.
	res, err := newSandbox(t, ModeOff, Limits{}).Run(context.Background(), dial)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("control dial failed: %+v %v", res, err)
	}
	s := newSandbox(t, ModeRequired, Limits{})
	if !s.Status().NetRules {
		t.Fatalf("status: %+v", s.Status())
	}
	res, err = s.Run(context.Background(), dial)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || !bytes.Contains(res.Stderr, []byte("permission denied")) {
		t.Fatalf("TCP connect was allowed: exit %d stdout %q stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}

func TestPrivilegesDropped(t *testing.T) {
	exe := selfExe(t)
	spec := Spec{Args: []string{exe, "caps-helper"}, Workspace: t.TempDir()}
	if os.Geteuid() == 0 {
		// Control: as root, without the sandbox, the helper sees privileges.
		res, err := newSandbox(t, ModeOff, Limits{}).Run(context.Background(), spec)
		if err != nil || res.ExitCode != 0 || strings.HasPrefix(string(res.Stdout), "eff=0 prm=0 bnd=0") {
			t.Fatalf("control: %q %q %v", res.Stdout, res.Stderr, err)
		}
	}
	s := newSandbox(t, ModeBestEffort, Limits{})
	if !s.Status().NoPrivileges {
		t.Fatalf("status: %+v", s.Status())
	}
	res, err := s.Run(context.Background(), spec)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%q %q %v", res.Stdout, res.Stderr, err)
	}
	if got := string(res.Stdout); got != "eff=0 prm=0 bnd=0 nnp=1\n" {
		t.Fatalf("privileges inside the sandbox: %q", got)
	}
}

func TestResourceLimits(t *testing.T) {
	// The address-space limit is there to show that programs still start
	// under a low one: 64 MiB is below what the Go child that executes
	// them has mapped (far below it when built with -race), so the child
	// must not ask for memory once the limit is set.
	// The CPU limit has a sandbox of its own: one second of CPU also
	// counts the child's own start, which a loaded machine running
	// race-built children can use up before dd runs.
	s := newSandbox(t, ModeBestEffort, Limits{FileSizeBytes: 4096, AddressSpaceBytes: 64 << 20})
	ws := t.TempDir()
	res, err := s.Run(context.Background(), Spec{Args: []string{"dd", "if=/dev/zero", "of=big", "bs=1024", "count=64"}, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(ws, "big"))
	if err != nil {
		t.Fatalf("dd wrote nothing (exit %d, stderr %q): %v", res.ExitCode, res.Stderr, err)
	}
	if res.ExitCode == 0 || fi.Size() > 4096 {
		t.Fatalf("file size limit not applied: exit %d size %d", res.ExitCode, fi.Size())
	}
	if res, err := s.Run(context.Background(), Spec{Args: []string{"sort", "-n"}, Stdin: strings.NewReader("3\n1\n2\n"), Workspace: ws}); err != nil || string(res.Stdout) != "1\n2\n3\n" {
		t.Fatalf("sort under an address-space limit: %q %q %v", res.Stdout, res.Stderr, err)
	}
	// A busy loop is stopped by the CPU limit (SIGXCPU or SIGKILL), not by
	// the generous context deadline.
	cpu := newSandbox(t, ModeBestEffort, Limits{CPUSeconds: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err = cpu.Run(ctx, Spec{Args: []string{"sh", "-c", "while :; do :; done"}, Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 128+24 && res.ExitCode != 128+9 {
		t.Fatalf("CPU limit not applied: exit %d", res.ExitCode)
	}
}

func TestSetupFailureIsReported(t *testing.T) {
	needLandlock(t)
	s := newSandbox(t, ModeBestEffort, Limits{})
	ws := t.TempDir()
	// The child cannot build a rule for a path with a NUL byte; it must
	// say so on the set-up pipe and the program must not run.
	res, err := s.Run(context.Background(), Spec{Args: []string{"touch", "ran"}, Workspace: ws, AllowExec: []string{"bad\x00path"}})
	if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), "landlock") {
		t.Fatalf("want a landlock set-up error, got %v (%+v)", err, res)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the program ran although set-up failed")
	}
	if err := RunChild([]string{"!!", "--", "x"}, nil); err == nil {
		t.Fatal("a bad configuration was accepted")
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeRequired, "require": ModeRequired, "required": ModeRequired, "Best-Effort": ModeBestEffort, "off": ModeOff} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseMode("strict"); err == nil {
		t.Error("unknown mode accepted")
	}
	if _, err := New(Options{Mode: ModeRequired}); err == nil {
		t.Error("required mode without SelfExe accepted")
	}
}

func TestCapture(t *testing.T) {
	c := NewCapture(5)
	for _, s := range []string{"ab", "cd", "é", "xyz"} {
		if n, err := c.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatal(n, err)
		}
	}
	// "abcd" + the first byte of "é" fit; the partial rune is trimmed.
	if got := c.String(); got != "abcd" || !c.Truncated() || c.Dropped() != 4 || c.Total() != 9 {
		t.Fatalf("got %q truncated=%v dropped=%d total=%d", got, c.Truncated(), c.Dropped(), c.Total())
	}
	if cap(c.head) > 5 {
		t.Fatalf("buffer grew past the limit: cap %d", cap(c.head))
	}
}

// BenchmarkFlood measures what capturing a flood costs the service: about
// 17 MB of output per run, 64 KiB kept.
func BenchmarkFlood(b *testing.B) {
	s := newSandbox(b, ModeBestEffort, Limits{})
	ws := b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		res, err := s.Run(context.Background(), Spec{Args: []string{"seq", "1", "2500000"}, Workspace: ws, MaxOutputBytes: 64 << 10})
		if err != nil || !res.StdoutTruncated {
			b.Fatal(err, res.StdoutTruncated)
		}
		b.SetBytes(int64(len(res.Stdout)) + res.StdoutDropped)
	}
}

func TestRequiredWithoutLandlockIsUnusable(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	none := func() ProbeResult { return ProbeResult{Err: errors.New("forced")} }
	s, err := New(Options{Mode: ModeRequired, SelfExe: exe, Probe: none})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Usable(); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "best-effort") {
		t.Errorf("Usable: %v", err)
	}
	if _, err := s.Run(context.Background(), Spec{Args: []string{"true"}, Workspace: t.TempDir()}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Run: %v, want ErrUnavailable", err)
	}
	if s.Status().Unavailable == "" {
		t.Error("Status does not say why")
	}
	// In a container, ENOSYS is as likely the seccomp profile as the kernel.
	if u := s.Status().Unavailable; !strings.Contains(u, "seccomp profile that allows the landlock_create_ruleset") {
		t.Errorf("Unavailable does not name the container's seccomp profile: %s", u)
	}
	b, err := New(Options{Mode: ModeBestEffort, SelfExe: exe, Probe: none})
	if err != nil || b.Usable() != nil {
		t.Errorf("best-effort without Landlock: %v %v", err, b.Usable())
	}
}

// TestWorkDirIsTheDescriptor: with WorkDir, the program works in the
// opened directory even when its path has since been turned into a link
// elsewhere, and may not make symbolic links.
func TestWorkDirIsTheDescriptor(t *testing.T) {
	s := newSandbox(t, ModeBestEffort, Limits{})
	base, outside := t.TempDir(), t.TempDir()
	ws := filepath.Join(base, "ws")
	if err := os.Mkdir(ws, 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Rename(ws, ws+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, ws); err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background(), Spec{Args: []string{"touch", "made-here"}, Workspace: ws, WorkDir: f})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%v %+v %s", err, res, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(ws+".moved", "made-here")); err != nil {
		t.Errorf("the program did not work in the opened directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "made-here")); err == nil {
		t.Error("the program followed the path to the link's target")
	}
	if Probe().LandlockABI < 1 {
		return
	}
	res, err = s.Run(context.Background(), Spec{Args: []string{"cp", "-P", "/proc/self/root", "link"}, Workspace: ws, WorkDir: f})
	if err != nil || res.ExitCode == 0 {
		t.Errorf("making a symbolic link: %v %+v", err, res)
	}
	if _, err := os.Lstat(filepath.Join(ws+".moved", "link")); err == nil {
		t.Error("a sandboxed program made a symbolic link")
	}
}
