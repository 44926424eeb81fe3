package httpfetch

import (
	"context"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestOutOfFileDescriptorsIsTheServices: a dial that fails because the
// service has no file descriptor left (EMFILE, ENFILE: 91 of 200 calls at
// once under ulimit -n 256) did not reach the site, and the answer says
// so: "request failed: ... too many open files" with "the server may be
// down" sent the model after a site that was never asked.
func TestOutOfFileDescriptorsIsTheServices(t *testing.T) {
	f := newFetcher(Options{})
	u, _ := url.Parse("http://example.test/")
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		err := &url.Error{Op: "Get", URL: u.String(), Err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)}}
		e := registry.AsError(f.requestError(context.Background(), context.Background(), u, err, time.Second, false))
		if !strings.Contains(e.Message, "the site was not reached") || !strings.Contains(e.Suggestion, "the service's limit, not the site's") {
			t.Errorf("%v: %s / %s", errno, e.Message, e.Suggestion)
		}
	}
}
