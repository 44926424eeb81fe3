//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive, non-blocking lock on f, so a second process
// cannot open the same store: InterruptRunning relies on being the only
// process that runs calls recorded in the file.
func lockFile(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("%s is locked by another process; the embedded store serves one process (use PostgreSQL for several replicas)", f.Name())
	}
	return err
}
