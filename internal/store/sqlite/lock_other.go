//go:build !unix

package sqlite

import "os"

// lockFile does nothing where flock is missing; run one process per store
// file there.
func lockFile(*os.File) error { return nil }
