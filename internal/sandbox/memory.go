package sandbox

import "regexp"

// outOfMemory matches what the Go runtime throws when the kernel refuses
// it memory or address space (RLIMIT_DATA, RLIMIT_AS) or a thread: "out
// of memory" in its variants ("pageAlloc: out of memory", "out of memory
// (stackalloc)", …), "cannot allocate memory", "cannot map pages in arena
// address space", "failed to reserve page summary memory", "memory
// reservation exceeds address space limit", "failed to create new OS
// thread"; and, in a binary built with cgo, whose threads get their
// stacks from mmap under the same RLIMIT_DATA, "runtime/cgo:
// pthread_create failed". Only at the start of a line, as the runtime
// writes them: a program's own words further on do not count.
var outOfMemory = regexp.MustCompile(`(?m)^((fatal error: |runtime: ).*(out of memory|cannot allocate memory|address space|page summary memory|new OS thread)|runtime/cgo: pthread_create failed)`)

// OutOfMemory reports whether stderr, what a Go process confined under a
// memory ceiling (the shell interpreter, a tool worker) wrote before it
// died, says that the ceiling refused it memory.
func OutOfMemory(stderr string) bool { return outOfMemory.MatchString(stderr) }

// threadFailure matches what the Go runtime throws when it cannot start
// a thread: the kernel refused the thread's stack (RLIMIT_DATA or
// RLIMIT_AS) or the thread itself (RLIMIT_NPROC), which pthread_create
// reports alike.
var threadFailure = regexp.MustCompile(`(?m)^((fatal error: |runtime: ).*new OS thread|runtime/cgo: pthread_create failed)`)

// ThreadFailure reports whether stderr, what a Go process confined under
// a memory ceiling wrote before it died, says that it could not start a
// thread (which OutOfMemory counts too).
func ThreadFailure(stderr string) bool { return threadFailure.MatchString(stderr) }
