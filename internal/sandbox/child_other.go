//go:build !linux

package sandbox

import (
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"
)

// Probe asks the kernel which Landlock ABI it supports; Landlock exists
// only on Linux.
func Probe() ProbeResult {
	return ProbeResult{Err: errors.New("Landlock needs Linux")}
}

func reportSetup(err error) error { return err }

func confine(*childConfig) error {
	return errors.New("sandbox child: kernel confinement needs Linux; use mode off")
}

func runReaper(*childConfig, []string) error {
	return errors.New("sandbox child: kernel confinement needs Linux; use mode off")
}

// procAttr puts the process in a group of its own; only Linux has
// parent-death signals.
func procAttr(bool) *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func execProgram(*childConfig, []string) error {
	return errors.New("sandbox child: kernel confinement needs Linux; use mode off")
}

// Report is unsupported without Linux.
func Report([]byte) error { return errors.New("sandbox: reports need Linux") }

// waitAndKillGroup waits for the program. Without waitid(WNOWAIT) the
// group cannot be killed safely after the leader exits, so leftovers are
// only killed on cancellation.
func waitAndKillGroup(cmd *exec.Cmd, g *group) error {
	err := cmd.Wait()
	g.finish(cmd.Process.Pid, false)
	return err
}

// Reaped leaves cmd as it is: without Linux there is no reaper, and only
// the program's process group can be stopped.
func Reaped(*exec.Cmd, string, time.Duration) (*Reaper, error) { return &Reaper{}, nil }

// Reaper is what Reaped gives: without Linux, nothing to wait for or
// release.
type Reaper struct{}

// Started reports nothing: the program was started directly.
func (*Reaper) Started(context.Context) error { return nil }

// Close does nothing.
func (*Reaper) Close() error { return nil }
