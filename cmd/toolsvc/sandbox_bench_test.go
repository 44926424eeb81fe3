package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// BenchmarkSandboxStart measures the per-call cost of starting a program
// through the sandbox, which re-executes this binary (with every
// package's initialisation) to confine itself before it executes the
// program ("reexec"), or starts the small toolsvc-sandbox launcher
// ("launcher"); "direct" (mode off, a plain fork and exec) is the
// baseline.
func BenchmarkSandboxStart(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	launcher := filepath.Join(filepath.Dir(buildBinary(b)), "toolsvc-sandbox")
	for _, c := range []struct {
		name     string
		mode     sandbox.Mode
		launcher string
	}{{"direct", sandbox.ModeOff, ""}, {"reexec", sandbox.ModeBestEffort, ""}, {"launcher", sandbox.ModeBestEffort, launcher}} {
		b.Run(c.name, func(b *testing.B) {
			sb, err := sandbox.New(sandbox.Options{Mode: c.mode, SelfExe: exe, Launcher: c.launcher})
			if err != nil {
				b.Fatal(err)
			}
			ws := b.TempDir()
			for b.Loop() {
				res, err := sb.Run(context.Background(), sandbox.Spec{Args: []string{"true"}, Workspace: ws})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("%v %+v", err, res)
				}
			}
		})
	}
}
