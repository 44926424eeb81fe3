package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
)

// unreadable is refusing whose reads of call records fail too while
// readsDown is set, as on a locked or dropped calls table.
type unreadable struct {
	*refusing
	readsDown atomic.Bool
}

func (u *unreadable) GetCall(ctx context.Context, callerID, toolCallID string) (*registry.CallRecord, error) {
	if u.readsDown.Load() {
		return nil, errors.New("canceling statement due to lock timeout")
	}
	return u.refusing.GetCall(ctx, callerID, toolCallID)
}

// TestFailingCallReads: reads of call records (GetCall) that fail count
// towards Failing as writes do. A durable call with a toolCallId reads
// its record before it writes one, so on a locked calls table every such
// call failed at the read, and /readyz answered ready while each call
// answered 503. A record that is not there and a read whose caller left
// say nothing about the store; a read that passes ends a run of reads,
// but not one holding writes that failed.
func TestFailingCallReads(t *testing.T) {
	type step struct {
		op   string // "read", "readMissing", "readLeft", "write", "ping"
		down string // "", "reads", "writes", "both": what fails during op
		want string // "" (Failing nil) or a substring of its error
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"three reads fail", []step{
			{"read", "reads", ""}, {"read", "reads", ""}, {"read", "reads", "the last 3 reads of call records failed: canceling statement due to lock timeout"},
			{"read", "reads", "the last 4 reads"},
		}},
		{"a probe that passes leaves failed reads counted", []step{
			{"read", "reads", ""}, {"read", "reads", ""}, {"read", "reads", "last 3 reads"}, {"ping", "", "last 3 reads"},
		}},
		{"reads and writes fail", []step{
			{"read", "both", ""}, {"write", "both", ""}, {"read", "both", "the last 3 reads and writes of call records failed"},
		}},
		{"a missing record is an answer", []step{
			{"read", "reads", ""}, {"read", "reads", ""}, {"readMissing", "", ""}, {"read", "reads", ""},
		}},
		{"a read whose caller left says nothing", []step{
			{"read", "reads", ""}, {"read", "reads", ""}, {"readLeft", "reads", ""}, {"read", "reads", "last 3 reads"},
		}},
		{"a read that passes ends a run of reads", []step{
			{"read", "reads", ""}, {"read", "reads", ""}, {"read", "reads", "last 3"}, {"read", "", ""}, {"read", "reads", ""},
		}},
		{"a read that passes leaves failed writes counted", []step{
			{"write", "writes", ""}, {"write", "writes", ""}, {"write", "writes", "the last 3 writes"},
			{"read", "writes", "the last 3 writes"}, {"readMissing", "writes", "the last 3 writes"},
			{"write", "", ""},
		}},
		{"a write that passes ends a run of reads and writes", []step{
			{"read", "both", ""}, {"write", "both", ""}, {"read", "both", "last 3"}, {"write", "", ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			u := &unreadable{refusing: &refusing{Store: st}}
			s := store.WithDeadline(u, 5*time.Second)
			rec := &registry.CallRecord{CallerID: "alice", ToolCallID: "there", ToolName: "fs__write",
				ArgumentsDigest: "d", Arguments: json.RawMessage(`{}`), State: registry.CallRunning}
			if _, _, err := st.BeginCall(t.Context(), rec); err != nil {
				t.Fatal(err)
			}
			left, cancel := context.WithCancel(t.Context())
			cancel()
			for i, sp := range tt.steps {
				u.readsDown.Store(sp.down == "reads" || sp.down == "both")
				u.down.Store(sp.down == "writes" || sp.down == "both")
				switch sp.op {
				case "read":
					_, err = s.GetCall(t.Context(), "alice", "there")
				case "readMissing":
					_, err = s.GetCall(t.Context(), "alice", "missing")
					if !errors.Is(err, registry.ErrNotFound) {
						t.Fatalf("step %d: %v, want ErrNotFound", i, err)
					}
				case "readLeft":
					_, err = s.GetCall(left, "alice", "there")
				case "write":
					w := *rec
					w.ToolCallID = "w" + string(rune('a'+i))
					_, _, err = s.BeginCall(t.Context(), &w)
				case "ping":
					err = s.Ping(t.Context())
					if err != nil {
						t.Fatalf("step %d: probe: %v", i, err)
					}
				}
				got := store.Failing(s)
				switch {
				case sp.want == "" && got != nil:
					t.Fatalf("step %d (%s, %s down): Failing = %v, want nil", i, sp.op, sp.down, got)
				case sp.want != "" && (got == nil || !strings.Contains(got.Error(), sp.want)):
					t.Fatalf("step %d (%s, %s down): Failing = %v, want %q", i, sp.op, sp.down, got, sp.want)
				}
			}
		})
	}
}
