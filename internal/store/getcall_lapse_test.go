package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/store/postgres"
	"github.com/toolsvc/toolsvc/internal/store/sqlite"
	"github.com/toolsvc/toolsvc/internal/store/storetest"
)

// lapse is a call whose lease lapses: owner begins it, and lapse moves a
// clock past the lease and returns the store that reads the call then
// (the owner itself, or another replica).
type lapse struct {
	owner registry.Store
	lapse func() registry.Store
}

// TestGetCallOfLapsedLease: a running record whose lease has lapsed reads,
// without a wait, as the E_INTERRUPTED record a waiter or the retention
// sweep makes of it, and that answer is final: the owner, were it alive
// after all, records nothing over it. Before, GetCall went on reading it
// as running until the sweep ended it, up to a minute later.
func TestGetCallOfLapsedLease(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		// One process: its own record lapses once it no longer runs the
		// call (ReleaseCall); the clock jumps past the lease.
		var skew atomic.Int64
		s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "toolsvc.db"), sqlite.Options{
			Lease: time.Minute, Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		// A call this process still runs (or holds the result of) is not
		// ended however late it is: the store keeps its own leases.
		held := lapsedCall("held")
		if _, created, err := s.BeginCall(t.Context(), held); err != nil || !created {
			t.Fatal(created, err)
		}
		testGetCallOfLapsedLease(t, lapse{owner: s, lapse: func() registry.Store {
			skew.Store(int64(10 * time.Minute))
			return s
		}})
		if rec, err := s.GetCall(t.Context(), held.CallerID, held.ToolCallID); err != nil || rec.State != registry.CallRunning {
			t.Fatalf("a call the process still runs, read past its lease: %v %s; want running", err, describe(rec))
		}
	})
	t.Run("postgres", func(t *testing.T) {
		url := os.Getenv("TOOLSVC_TEST_POSTGRES_URL")
		if url == "" {
			t.Skip("TOOLSVC_TEST_POSTGRES_URL is not set; set it (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to run the PostgreSQL store tests")
		}
		schema := storetest.PostgresSchema(t, url)
		open := func(now func() time.Time) registry.Store {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			s, err := postgres.Open(ctx, postgres.Options{URL: url, Schema: schema, Lease: time.Minute, Now: now, MaxConns: 4})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		// Replicas: the owner, and one whose clock is past the lease, as
		// every replica's is once the owner has died.
		owner := open(nil)
		late := open(func() time.Time { return time.Now().Add(10 * time.Minute) })
		testGetCallOfLapsedLease(t, lapse{owner: owner, lapse: func() registry.Store { return late }})
	})
}

func testGetCallOfLapsedLease(t *testing.T, l lapse) {
	ctx := t.Context()
	// x is read; y is ended by the sweep, to compare. Their arguments are
	// over what a done record keeps.
	x, y := lapsedCall("read"), lapsedCall("swept")
	for _, c := range []*registry.CallRecord{x, y} {
		if _, created, err := l.owner.BeginCall(ctx, c); err != nil || !created {
			t.Fatal(created, err)
		}
		// Its result will never come through the owner: nothing renews
		// the lease.
		l.owner.ReleaseCall(c.CallerID, c.ToolCallID)
	}
	if rec, err := l.owner.GetCall(ctx, x.CallerID, x.ToolCallID); err != nil || rec.State != registry.CallRunning {
		t.Fatalf("within its lease: %v %s; want running", err, describe(rec))
	}

	r := l.lapse()
	got, err := r.GetCall(ctx, x.CallerID, x.ToolCallID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != registry.CallDone || !reflect.DeepEqual(got.Result, registry.InterruptedResult(x.ToolCallID, x.ToolName)) {
		t.Fatalf("GetCall past the lease: %s; want done with %+v", describe(got), registry.InterruptedResult(x.ToolCallID, x.ToolName))
	}

	// Final: the owner, alive after all (a process stopped and resumed,
	// a partition healed), finds the call ended and records nothing.
	rec, stored, err := l.owner.FinishCall(ctx, x.CallerID, x.ToolCallID, &registry.Result{ToolCallID: x.ToolCallID,
		ToolName: x.ToolName, Status: registry.StatusOK, Output: json.RawMessage(`"late"`)}, nil)
	if err != nil || stored || rec == nil || rec.Result.Code() != registry.CodeInterrupted {
		t.Fatalf("the owner finishing after a reader was told E_INTERRUPTED: stored=%v err=%v; want the interruption to stand", stored, err)
	}
	for _, s := range []registry.Store{l.owner, r} {
		if rec, err := s.GetCall(ctx, x.CallerID, x.ToolCallID); err != nil || rec.Result.Code() != registry.CodeInterrupted {
			t.Fatalf("read again: %v %s; want E_INTERRUPTED", err, describe(rec))
		}
	}

	// The record read is the one the sweep makes, but for its key.
	if _, err := r.InterruptRunning(ctx); err != nil {
		t.Fatal(err)
	}
	swept, err := r.GetCall(ctx, y.CallerID, y.ToolCallID)
	if err != nil {
		t.Fatal(err)
	}
	got, err = r.GetCall(ctx, x.CallerID, x.ToolCallID)
	if err != nil {
		t.Fatal(err)
	}
	want := *swept
	want.ToolCallID, want.ArgumentsDigest = x.ToolCallID, x.ArgumentsDigest
	want.Result = registry.InterruptedResult(x.ToolCallID, x.ToolName)
	want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
	if !reflect.DeepEqual(got, &want) {
		t.Errorf("GetCall past the lease read\n%s\nthe sweep leaves\n%s", describe(got), describe(&want))
	}
}

// describe is rec with its arguments' length in their place.
func describe(rec *registry.CallRecord) string {
	if rec == nil {
		return "no record"
	}
	c := *rec
	n := len(c.Arguments)
	c.Arguments = nil
	return fmt.Sprintf("%+v result=%+v arguments=%d bytes", c, c.Result, n)
}

func lapsedCall(id string) *registry.CallRecord {
	args := `{"content":"` + strings.Repeat("x", registry.KeptArgumentsBytes) + `"}`
	return &registry.CallRecord{CallerID: "alice", ToolCallID: id, ToolName: "fs__write",
		ArgumentsDigest: "d-" + id, Arguments: json.RawMessage(args), State: registry.CallRunning}
}
