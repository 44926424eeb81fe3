//go:build linux

package sandbox

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// ownOOMScoreAdj returns this process's oom_score_adj, skipping the test
// where it cannot be read or is already the most (then a child's 1000
// says nothing).
func ownOOMScoreAdj(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Skipf("no /proc/self/oom_score_adj: %v", err)
	}
	own := strings.TrimSpace(string(b))
	if own == "1000" {
		t.Skip("this process's oom_score_adj is 1000 already")
	}
	return own
}

// TestSandboxedProcessesAreTheOOMKillersFirstChoice: in a container whose
// memory runs out (1 GiB, four tool workers of 512 MiB, the shell's
// programs), nothing stopped the kernel from killing toolsvc itself when
// its heap was the largest. A call's confined process and what it starts
// have oom_score_adj 1000 now, so any of them goes first; the reaper keeps
// the service's score (killed, it could not stop what the program started),
// and so does the service.
func TestSandboxedProcessesAreTheOOMKillersFirstChoice(t *testing.T) {
	own := ownOOMScoreAdj(t)
	sh, err := LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// Shell built-ins only: no program but sh is executed. $PPID is the
	// reaper.
	const script = `read self < /proc/self/oom_score_adj; read parent < /proc/$PPID/oom_score_adj; echo "$self $parent"`
	allow, err := ExecDeps(sh)
	if err != nil {
		t.Fatal(err)
	}
	allow = append(allow, sh)
	cases := []struct {
		name string
		mode Mode
		spec Spec
		want string
	}{
		// The program, executed by the confined child, under its reaper.
		{"program", ModeBestEffort, Spec{Args: []string{"sh", "-c", script}, ReadOnly: []string{"/proc"}}, "1000 " + own},
		// The shell's way: an entry, confined, starts each program
		// through the launcher; the entry's output is its own limits,
		// then what the program printed ("1000 1000": its parent is the
		// entry).
		{"entry and its programs", ModeOff, Spec{Entry: "limits", Args: []string{"1", script, sh}, AllowExec: allow}, "1000 1000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.spec.Workspace = t.TempDir()
			res, err := newSandbox(t, c.mode, Limits{}).Run(context.Background(), c.spec)
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("exit %d, %v: stdout %q stderr %q", res.ExitCode, err, res.Stdout, res.Stderr)
			}
			lines := strings.Split(strings.TrimSpace(string(res.Stdout)), "\n")
			if got := lines[len(lines)-1]; got != c.want {
				t.Errorf("oom_score_adj of the program and its parent: %q, want %q (stdout %q)", got, c.want, res.Stdout)
			}
		})
	}
	// A program started through the launcher raises its score itself,
	// whatever its parent's (here this process's).
	t.Run("launcher", func(t *testing.T) {
		cmd := exec.Command(sh, "-c", script)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := (&Programs{launcher: selfExe(t)}).Start(cmd); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err != nil || strings.TrimSpace(out.String()) != "1000 "+own {
			t.Errorf("oom_score_adj of the program and its parent: %q (%v), want %q", out.String(), err, "1000 "+own)
		}
	})
	if b, _ := os.ReadFile("/proc/self/oom_score_adj"); strings.TrimSpace(string(b)) != own {
		t.Errorf("the service's own oom_score_adj changed from %s to %s", own, b)
	}
}
