//go:build !linux

package workspace

import (
	"io/fs"
	"os"
)

// statAt never vouches for a cached directory where it cannot look one up
// without following links: every Open walks.
func statAt(*os.File, string, uint64, uint64) bool { return false }

func fileID(fs.FileInfo) (dev, ino uint64) { return 0, 0 }

// freeSpace cannot tell here: no reserve is kept.
func freeSpace(*os.File) (bytes, inodes, size int64, ok bool) { return 0, 0, 0, false }
