package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestSpillsLeaveRoomOnASmallVolume: on a 5 MiB data volume, kept outputs
// stop while call records still have room. The reserve counted only the
// volume's free space, which the chunks waiting in the WAL and the WAL
// itself then took: outputs of 1.2 MB filled the volume (on 6 MiB, five of
// them), and calls were refused (503, out of disk space).
func TestSpillsLeaveRoomOnASmallVolume(t *testing.T) {
	data := filepath.Join(smallVolume(t, "5m"), "data")
	p := startBinary(t, "TOOLSVC_DATA_DIR="+data)
	kept, part := 0, -1
	for i := range 6 {
		a := p.send("POST", "/calls", fmt.Sprintf(`{"toolCallId":"big%d","toolName":"json__query","arguments":{"program":"\"x\" * 1200000","input":null}}`, i))
		if a.status != 200 || a.res.Status != "ok" {
			t.Fatalf("call %d: %d %s", i, a.status, a.body)
		}
		if !strings.Contains(string(a.res.Output), "the full output was not kept") {
			kept++
		}
		if part < 0 && strings.Contains(string(a.res.Output), "(the service's disk has no room for more)") {
			part = i
		}
	}
	if kept == 6 {
		t.Fatalf("7 MB of outputs were all kept on a 5 MiB volume")
	}
	// The output the volume stopped keeps what was written of it, and it
	// reads on: dropping it whole threw away up to a megabyte that was on
	// disk already.
	if part < 0 {
		t.Fatalf("no output says that the disk stopped it after a part was kept")
	}
	r := p.send("POST", "/calls", fmt.Sprintf(`{"toolName":"result__read","arguments":{"toolCallId":"big%d","offset":600000,"limit":10}}`, part))
	if r.status != 200 || r.res.Status != "ok" || !strings.Contains(string(r.res.Output), "xxxxxxxxxx") {
		t.Errorf("reading on the part kept of big%d: %d %s", part, r.status, r.body)
	}
	big := strings.Repeat("y", 8000)
	for i := range 60 {
		a := p.send("POST", "/calls", fmt.Sprintf(`{"toolCallId":"rec%d","toolName":"fs__write","arguments":{"path":"f%d.txt","content":%q}}`, i, i, big))
		if a.status != 200 || a.res.Status != "ok" || a.pending {
			t.Fatalf("recorded call %d after %d outputs were kept: %d %s", i, kept, a.status, a.body)
		}
	}
	if r := p.send("GET", "/readyz", ""); r.status != 200 {
		t.Errorf("/readyz after the outputs and the calls: %d %s", r.status, r.body)
	}
}
