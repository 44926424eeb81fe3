//go:build !linux

package worker

import "errors"

func applyCeiling(int64) error {
	return errors.New("worker: the memory ceiling needs Linux (RLIMIT_DATA and RLIMIT_AS)")
}
