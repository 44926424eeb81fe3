package sandbox_test

import (
	"testing"

	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// TestOutOfMemory: each way the Go runtime says it was refused memory,
// address space or a thread counts as the memory ceiling; other crashes
// do not.
func TestOutOfMemory(t *testing.T) {
	for _, s := range []string{
		"fatal error: runtime: out of memory\n",
		"runtime: out of memory: cannot allocate 4194304-byte block (268435456 in use)\nfatal error: out of memory\n",
		"fatal error: out of memory (stackalloc)\n",
		"fatal error: pageAlloc: out of memory\n",
		"fatal error: runtime: cannot allocate memory\n",
		"runtime: mmap(0xc000400000, 67108864) returned 12\nfatal error: runtime: cannot map pages in arena address space\n",
		"fatal error: failed to reserve page summary memory\n",
		"fatal error: memory reservation exceeds address space limit\n",
		"runtime: failed to create new OS thread (have 5 already; errno=11)\nfatal error: newosproc\n",
		"hello\nfatal error: out of memory allocating heap arena metadata\n",
		"runtime/cgo: pthread_create failed: Resource temporarily unavailable\nSIGABRT: abort\n",
	} {
		if !sandbox.OutOfMemory(s) {
			t.Errorf("not taken for the memory ceiling: %q", s)
		}
	}
	for _, s := range []string{
		"panic: runtime error: index out of range [3] with length 3\n",
		"fatal error: concurrent map writes\n",
		"echo says: out of memory\n", // a program's own words, not the runtime's
		"echo runtime/cgo: pthread_create failed\n",
	} {
		if sandbox.OutOfMemory(s) {
			t.Errorf("taken for the memory ceiling: %q", s)
		}
	}
}
