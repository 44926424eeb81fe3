package mcpbridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/logtest"
)

// TestFlappingServerBacksOff: a server that is lost soon after each
// connection (here it exits on a call; a hostile one exits once it has
// listed its tools) was reconnected after MinBackoff every time, since a
// connection that succeeded reset the backoff: it was started again twice
// a second for as long as it was configured. The wait before each
// reconnection doubles until a session lasts MaxBackoff.
func TestFlappingServerBacksOff(t *testing.T) {
	var logs logtest.Buffer
	f := newFixture(t, func(o *Options) {
		o.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		o.MaxBackoff = time.Minute // no session of this test lasts that long
	})
	s := f.server(stdioDoc(t, "flappy", ""))
	set := f.m.Ensure(context.Background(), []*Server{s})
	e := f.executor(set)
	type lostLine struct {
		Msg     string `json:"msg"`
		RetryIn string `json:"retryIn"`
	}
	losses := func() []string {
		var out []string
		for _, line := range strings.Split(logs.String(), "\n") {
			var l lostLine
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "mcp: connection lost; reconnecting" {
				out = append(out, l.RetryIn)
			}
		}
		return out
	}
	for i := range 4 {
		eventually(t, "connection", func() bool { return f.m.Status()["flappy"].State == "connected" })
		_ = execute(t, e, context.Background(), "flappy__crash", `{}`)
		eventually(t, "the loss to be logged", func() bool { return len(losses()) == i+1 })
	}
	want := []string{"20ms", "40ms", "80ms", "160ms"}
	if got := losses(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("waits before reconnecting = %v; want %v (doubling from MinBackoff)", got, want)
	}
}
