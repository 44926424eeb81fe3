//go:build race

package shell

// raceEnabled: the race detector's shadow memory needs more than the
// default memory ceiling of the interpreter's process.
const raceEnabled = true
