package mcpbridge

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A server that stops answering while its connection stays open (here a
// stopped process) is noticed by the pings, whichever protocol revision
// the session speaks: the SDK pings only sessions that began with
// initialize, not those of the newer revision (server/discover).
func TestKeepAliveNoticesAHungServer(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.ConnectTimeout = 2 * time.Second })
	set := f.m.Ensure(context.Background(), []*Server{f.server(stdioDoc(t, "hung", ""))})
	if st := f.m.Status()["hung"]; st.State != "connected" {
		t.Fatalf("status: %+v", st)
	}
	res := execute(t, f.executor(set), context.Background(), "hung__meta", `{}`)
	var meta struct{ PID int }
	if err := json.Unmarshal(res.Output, &meta); err != nil || meta.PID == 0 {
		t.Fatalf("meta: %s %+v", res.Output, res.Error)
	}
	if err := syscall.Kill(meta.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(meta.PID, syscall.SIGCONT) })
	eventually(t, "the pings to notice the stopped server", func() bool {
		st := f.m.Status()["hung"]
		return st.State == "reconnecting" && strings.Contains(st.Error, "ping")
	})
}
