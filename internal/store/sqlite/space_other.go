//go:build !unix

package sqlite

// VolumeSpace cannot ask the volume here: spills are bounded by
// TOOLSVC_SPILL_TOTAL_BYTES only.
func VolumeSpace(string) (free, size int64, ok bool) { return 0, 0, false }
