package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// TestConcurrentEditsAreNotLost: edits of one file by concurrent calls
// each see the others' changes; none is lost while answering ok.
func TestConcurrentEditsAreNotLost(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	// Large enough that reading and writing it back takes a while.
	var b strings.Builder
	for _, k := range []string{"A", "B", "C", "D"} {
		fmt.Fprintf(&b, "%s0\n", k)
	}
	b.WriteString(strings.Repeat("x", 1<<20))
	mustWrite(t, filepath.Join(e.dir(""), "race.txt"), b.String())
	const steps = 25
	var wg sync.WaitGroup
	for _, k := range []string{"A", "B", "C", "D"} {
		wg.Go(func() {
			for i := 1; i <= steps; i++ {
				res := e.call("", "fs__edit", map[string]any{"path": "race.txt", "oldText": fmt.Sprintf("%s%d\n", k, i-1), "newText": fmt.Sprintf("%s%d\n", k, i)})
				if res.Status != registry.StatusOK {
					t.Errorf("%s%d: %+v", k, i, res.Error)
					return
				}
			}
		})
	}
	wg.Wait()
	got, err := os.ReadFile(filepath.Join(e.dir(""), "race.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"A", "B", "C", "D"} {
		if !strings.Contains(string(got[:64]), fmt.Sprintf("%s%d\n", k, steps)) {
			t.Errorf("the file begins %q: an edit of %s was lost", got[:20], k)
		}
	}
}

// TestEditsOfReplicasSharingAVolumeAreNotLost: replicas that share a
// workspace volume lock one another out of a file as calls of one replica
// do. Each replica here is its own workspace and tools, so their
// in-process locks know nothing of each other, as in two processes: only
// the file's flock keeps an edit from writing back over another's.
func TestEditsOfReplicasSharingAVolumeAreNotLost(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	ws, err := workspace.New(e.base, workspace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(registry.Defaults{Timeout: 30 * time.Second, MaxOutputBytes: 1 << 20, ErrorMessageLimit: 1000}, Tools(Options{Workspace: ws})...)
	if err != nil {
		t.Fatal(err)
	}
	other := *e
	other.exec = registry.NewExecutor(registry.Options{Registry: reg})
	replicas := []*env{e, &other}

	var b strings.Builder
	const lines = 60
	for i := range lines {
		fmt.Fprintf(&b, "tok%d\n", i)
	}
	b.WriteString(strings.Repeat("x", 256<<10)) // reading and writing back takes a while
	mustWrite(t, filepath.Join(e.dir(""), "shared.txt"), b.String())
	var wg sync.WaitGroup
	for i := range lines {
		wg.Go(func() {
			res := replicas[i%2].call("", "fs__edit", map[string]any{"path": "shared.txt", "oldText": fmt.Sprintf("tok%d\n", i), "newText": fmt.Sprintf("DONE%d\n", i)})
			if res.Status != registry.StatusOK {
				t.Errorf("edit %d: %+v", i, res.Error)
			}
		})
	}
	wg.Wait()
	got, err := os.ReadFile(filepath.Join(e.dir(""), "shared.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(got), "DONE"); n != lines {
		t.Errorf("%d of %d edits that answered ok are in the file", n, lines)
	}
}
