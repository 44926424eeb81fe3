package config

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// MaxFileBytes bounds every file the configuration is read from or names
// (resource files, value files, token and key files); a larger one is
// refused, not read.
const MaxFileBytes = 16 << 20

// ReadFile reads a file of the configuration: a regular file of at most
// MaxFileBytes. Anything else is refused, naming the path and what it is:
// a named pipe would block the read, and with it toolsvc validate or a
// reload, until something writes to it, and a device such as /dev/zero
// never ends.
func ReadFile(path string) ([]byte, error) {
	// O_NONBLOCK, or opening a named pipe waits for a writer; O_NOCTTY, or
	// opening a terminal may make it the process's own.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a regular file: name a regular file", path, fileType(fi.Mode()))
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d MiB, the most toolsvc reads of a configuration file", path, MaxFileBytes>>20)
	}
	return b, nil
}

// fileType names the type of file m is, for an error.
func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return fmt.Sprintf("a special file (mode %s)", m.Type())
}
