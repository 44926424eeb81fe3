//go:build !linux

package worker

import (
	"errors"
	"syscall"
)

func applyCeiling(int64) error {
	return errors.New("worker: the memory ceiling needs Linux (RLIMIT_DATA and RLIMIT_AS)")
}

// preferOOMKill does nothing: oom_score_adj is Linux's.
func preferOOMKill() {}

// procAttr puts a worker in a process group of its own, so that a signal
// meant for the service's group does not kill it mid-call.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
