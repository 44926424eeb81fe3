//go:build !race

package worker

// testLimit is the memory ceiling the tests give workers.
const testLimit = 128 << 20

// checkPeak says the worker's peak RSS is held to the ceiling; the race
// detector's shadow memory, resident beside the heap, makes it
// meaningless in a race build.
const checkPeak = true
