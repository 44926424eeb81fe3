// Command toolsvc-sandbox is the small launcher toolsvc runs for each
// call of shell__exec or an exec tool: as the call's reaper, which stays
// the parent of everything the call starts and kills what is left of it
// when the call ends, and as the child that confines itself and executes
// an exec tool's program. It is the same code as "toolsvc
// __sandbox-exec", without the initialisation of every package of the
// service, which costs most of a start (see BENCHMARKS.md). Install it
// next to the toolsvc binary; without it toolsvc re-executes itself.
package main

import (
	"fmt"
	"os"

	"github.com/toolsvc/toolsvc/internal/sandbox"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != sandbox.ChildCommand {
		fmt.Fprintln(os.Stderr, "toolsvc-sandbox is started by toolsvc to confine a program; it is not run by hand")
		os.Exit(2)
	}
	err := sandbox.RunChild(os.Args[2:], nil)
	fmt.Fprintln(os.Stderr, "toolsvc-sandbox:", err)
	os.Exit(125)
}
