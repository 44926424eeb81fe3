//go:build unix

package sqlite

import "golang.org/x/sys/unix"

// VolumeSpace returns the bytes free to unprivileged users, and the size,
// of the volume that holds dir.
func VolumeSpace(dir string) (free, size int64, ok bool) {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0, 0, false
	}
	bsize := uint64(st.Bsize)
	return int64(min(uint64(st.Bavail)*bsize, 1<<62)), int64(min(uint64(st.Blocks)*bsize, 1<<62)), true
}
