//go:build linux

package workspace

import (
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// statAt reports whether rel, beneath the directory dir, is the
// directory (dev, ino): one fstatat(2) that does not follow a link in
// rel's last component. A link above it may be followed, but only to the
// very directory the cache holds open (its inode cannot be reused while
// it is open), so a cached directory is never exchanged for another; a
// link at the directory itself, or one leading anywhere else, fails the
// comparison and Open walks, which refuses it.
func statAt(dir *os.File, rel string, dev, ino uint64) bool {
	rc, err := dir.SyscallConn()
	if err != nil {
		return false
	}
	var (
		st unix.Stat_t
		ok bool
	)
	if err := rc.Control(func(dfd uintptr) {
		ok = unix.Fstatat(int(dfd), rel, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
	}); err != nil || !ok {
		return false
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR && uint64(st.Dev) == dev && st.Ino == ino
}

// fileID returns the device and inode of fi.
func fileID(fi fs.FileInfo) (dev, ino uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), st.Ino
	}
	return 0, 0
}
