//go:build race

package main

// raceEnabled: the race detector's shadow memory puts a race-built
// interpreter or worker (this test binary, re-executed) within a few
// threads of the default memory ceiling, so in-process instances raise it.
const raceEnabled = true
