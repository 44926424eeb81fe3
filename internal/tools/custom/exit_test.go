package custom

import (
	"strings"
	"testing"
)

// An exit status over 128 names the signal as the shell does, and says
// that the program may have exited with it itself.
func TestExitError(t *testing.T) {
	for code, want := range map[int]string{
		1:   "the program exited with status 1 and wrote nothing to stderr",
		137: "the program ended with status 137: killed by SIGKILL (killed), or it exited with that status itself and wrote nothing",
		143: "the program ended with status 143: killed by SIGTERM (terminated), or it exited with that status itself: bye",
	} {
		stderr := ""
		if code == 143 {
			stderr = "bye\n"
		}
		if got := exitError(code, stderr, "").Error(); !strings.HasPrefix(got, "E_TOOL: "+want) {
			t.Errorf("%d: %q, want %q", code, got, want)
		}
	}
}
