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

// freeSpace returns the bytes free to unprivileged users and the inodes
// free on dir's file system; inodes is -1 when it does not count them.
func freeSpace(dir *os.File) (bytes, inodes, size int64, ok bool) {
	rc, err := dir.SyscallConn()
	if err != nil {
		return 0, 0, 0, false
	}
	var st unix.Statfs_t
	if err := rc.Control(func(fd uintptr) {
		ok = unix.Fstatfs(int(fd), &st) == nil
	}); err != nil || !ok {
		return 0, 0, 0, false
	}
	inodes = -1
	if st.Files > 0 {
		inodes = int64(min(st.Ffree, 1<<62))
	}
	return int64(min(st.Bavail*uint64(st.Bsize), 1<<62)), inodes, int64(min(st.Blocks*uint64(st.Bsize), 1<<62)), true
}
