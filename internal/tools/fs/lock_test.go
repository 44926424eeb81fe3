package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
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
