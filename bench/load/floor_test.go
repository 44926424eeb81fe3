package main

import (
	"os"
	"sync/atomic"
	"testing"
	"time"
)

// TestCPUTimeCountsThisProcess reads this process's own CPU time, spins
// for more than the kernel's tick, and reads it again.
func TestCPUTimeCountsThisProcess(t *testing.T) {
	before, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var sink atomic.Uint64
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		spin(1000, &sink)
	}
	after, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time %v then %v after 100ms of spinning", before, after)
	}
	if _, err := cpuTime(-1); err == nil {
		t.Error("cpuTime of no process: no error")
	}
}

// TestCalibrateScales: some work is some rounds, twice the work is no
// fewer (the two calibrations are timed apart, so the ratio is left to
// noise), and no work is none.
func TestCalibrateScales(t *testing.T) {
	if n := calibrate(0); n != 0 {
		t.Errorf("calibrate(0) = %d rounds", n)
	}
	one, two := calibrate(100*time.Microsecond), calibrate(200*time.Microsecond)
	if one <= 0 || two < one {
		t.Errorf("calibrate: %d rounds for 100µs, %d for 200µs", one, two)
	}
}
