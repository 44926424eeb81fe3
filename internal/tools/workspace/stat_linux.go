//go:build linux

package workspace

import (
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// statAt reports whether rel, beneath the directory dir, is the directory
// (dev, ino) when looked up the way Open walks: never through a symbolic
// link (in any component) and never outside dir. It needs openat2(2)
// (Linux 5.6); where that is missing or refused it reports false, and
// every Open walks.
func statAt(dir *os.File, rel string, dev, ino uint64) bool {
	rc, err := dir.SyscallConn()
	if err != nil {
		return false
	}
	var (
		st  unix.Stat_t
		ok  bool
		how = unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
		}
	)
	if err := rc.Control(func(dfd uintptr) {
		fd, err := unix.Openat2(int(dfd), rel, &how)
		if err != nil {
			return
		}
		ok = unix.Fstat(fd, &st) == nil
		_ = unix.Close(fd)
	}); err != nil || !ok {
		return false
	}
	return uint64(st.Dev) == dev && st.Ino == ino
}

// fileID returns the device and inode of fi.
func fileID(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino
	}
	return 0, 0
}
