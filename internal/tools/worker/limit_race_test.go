//go:build race

package worker

// testLimit is the memory ceiling the tests give workers. The race
// detector's shadow memory counts against RLIMIT_DATA, so a race-built
// worker needs more to start at all; every bomb still overruns it.
const testLimit = 1 << 30

const checkPeak = false
