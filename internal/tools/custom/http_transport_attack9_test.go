package custom

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// TestReplacedHTTPToolsCloseTheirConnections: every build of an HTTP tool
// has a transport of its own, and a reload builds them all again. Before,
// the replaced tools' transports kept their idle connections (two
// goroutines and a descriptor each) for the 90 s IdleConnTimeout: 924
// reloads in 10 s under 8 callers took the service from 23 goroutines to
// 1,248 and from 20 descriptors to 641. Once nothing holds the replaced
// tools, their connections are closed.
func TestReplacedHTTPToolsCloseTheirConnections(t *testing.T) {
	var open atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `"pong"`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f := newFixture(t, sandbox.ModeOff)
	doc := "apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: remote}\nspec:\n  tier: read_only\n  http: {url: " + srv.URL + "}\n  exports:\n    - {name: ping, description: Ping.}\n"

	// Three generations of the tool, as three reloads build them, each
	// called and then dropped.
	for range 3 {
		func() {
			e := f.executor(doc)
			if res := call(t, e, t.Context(), &registry.Call{ToolName: "remote__ping"}); string(res.Output) != `"pong"` {
				t.Fatalf("call: %s %+v", res.Output, res.Error)
			}
		}()
	}
	if n := open.Load(); n < 1 {
		t.Fatalf("%d connections open after the calls; the test cannot tell", n)
	}
	deadline := time.Now().Add(30 * time.Second) // far below IdleConnTimeout's 90 s
	for open.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections of replaced tools still open", open.Load())
		}
		runtime.GC() // the tools are unreachable; collecting them closes their connections
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHTTPToolKeepsItsConnectionWhileServed: the connection of a tool
// still in use stays open for its next call.
func TestHTTPToolKeepsItsConnectionWhileServed(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `"pong"`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	f := newFixture(t, sandbox.ModeOff)
	e := f.executor("apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: remote}\nspec:\n  tier: read_only\n  http: {url: " + srv.URL + "}\n  exports:\n    - {name: ping, description: Ping.}\n")
	for range 3 {
		if res := call(t, e, t.Context(), &registry.Call{ToolName: "remote__ping"}); string(res.Output) != `"pong"` {
			t.Fatalf("call: %s %+v", res.Output, res.Error)
		}
		runtime.GC()
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 3 calls of a tool still served; want 1, kept between calls", n)
	}
}
