//go:build linux

package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// limitsEntry prints its own soft RLIMIT_AS and RLIMIT_DATA, then starts
// args[0] programs at once, each the shell command args[1] under args[2]
// (sh and its loader), and prints what the first one printed.
func limitsEntry(programs *Programs, args []string) int {
	var as, data unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_AS, &as)
	_ = unix.Getrlimit(unix.RLIMIT_DATA, &data)
	fmt.Printf("entry as=%d data=%d\n", as.Cur, data.Cur)
	var n int
	fmt.Sscan(args[0], &n)
	outs := make([]strings.Builder, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cmd := exec.Command(args[2], "-c", args[1])
			cmd.Stdout, cmd.Stderr = &outs[i], os.Stderr
			cmd.Env = []string{"PATH=" + DefaultPath}
			if errs[i] = programs.Start(cmd); errs[i] == nil {
				errs[i] = cmd.Wait()
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			fmt.Println("program:", err)
			return 1
		}
	}
	fmt.Print(outs[0].String())
	return 0
}

// TestEntryMemoryIsRelativeAndProgramsGetTheirLimits: an entry (the shell
// interpreter) is a Go process that holds more address space at rest
// than a program may have in all, and waits for each program it runs on
// a thread of its own. Its memory is bounded relative to what it holds,
// so it can run many programs at once under a small per-program limit,
// and each program still gets the per-program limits.
func TestEntryMemoryIsRelativeAndProgramsGetTheirLimits(t *testing.T) {
	sh, err := LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	sleep, err := LookPath("sleep")
	if err != nil {
		t.Skip("no sleep")
	}
	allow := []string{sh, sleep}
	for _, p := range []string{sh, sleep} {
		deps, err := ExecDeps(p)
		if err != nil {
			t.Fatal(err)
		}
		allow = append(allow, deps...)
	}
	// A program may have 256 MiB of address space, less than the entry
	// holds at rest; the entry may grow by 384 MiB, enough for a thread
	// waiting on each of 24 programs (8 MiB of stack each with cgo).
	const as, data = 256 << 20, 384 << 20
	for _, mode := range []Mode{ModeBestEffort, ModeOff} {
		t.Run(string(mode), func(t *testing.T) {
			s := newSandbox(t, mode, Limits{AddressSpaceBytes: as})
			res, err := s.Run(context.Background(), Spec{
				Entry: "limits", Args: []string{"24", "sleep 0.3; ulimit -v; ulimit -d", sh}, Workspace: t.TempDir(),
				AllowExec: allow, DataBytes: data,
			})
			if err != nil {
				t.Fatal(err)
			}
			var entryAS, entryData uint64
			var progAS, progData string
			_, scanErr := fmt.Sscanf(string(res.Stdout), "entry as=%d data=%d\n%s\n%s\n", &entryAS, &entryData, &progAS, &progData)
			if res.ExitCode != 0 || scanErr != nil {
				t.Fatalf("exit %d (%v): stdout %q stderr %q", res.ExitCode, scanErr, res.Stdout, res.Stderr)
			}
			// The entry may grow by DataBytes beyond what it held.
			if entryAS <= as || entryData <= data {
				t.Errorf("the entry runs under as=%d data=%d, not above what it held at start", entryAS, entryData)
			}
			wantAS := fmt.Sprint(as >> 10)
			if mode == ModeOff {
				wantAS = "unlimited"
			}
			if progAS != wantAS || progData != fmt.Sprint(data>>10) {
				t.Errorf("a program runs under ulimit -v %s -d %s (KiB), want %s and %d", progAS, progData, wantAS, data>>10)
			}
		})
	}
}
