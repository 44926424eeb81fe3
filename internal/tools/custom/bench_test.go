package custom

import (
	"context"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// BenchmarkExecCall measures one exec tool call end to end (the program is
// this test binary), with and without the kernel sandbox's re-exec.
func BenchmarkExecCall(b *testing.B) {
	for _, mode := range []sandbox.Mode{sandbox.ModeOff, sandbox.ModeBestEffort} {
		b.Run(string(mode), func(b *testing.B) {
			f := newFixture(b, mode)
			e := f.executor(helperTool(b, "bench", "text", ""))
			call := &registry.Call{ToolName: "bench__run"}
			for b.Loop() {
				res, err := e.Execute(context.Background(), registry.Anonymous(), call)
				if err != nil || res.Status != registry.StatusOK {
					b.Fatal(err, res.Error)
				}
			}
		})
	}
}
