package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestSpillTotalTakenAsWritten: streams take from the total as they
// write, not the whole spill limit when they start. Before, every open
// stream held TOOLSVC_SPILL_MAX_BYTES of the total, so 30 streams of 20 KB
// open at once against a total of 4 spill limits kept 4 and refused 26,
// with the store holding 80 KB.
func TestSpillTotalTakenAsWritten(t *testing.T) {
	const streams, size = 30, 20000
	var wrote, closed sync.WaitGroup
	wrote.Add(streams)
	closed.Add(streams)
	infos := make(chan *registry.SpillInfo, streams)
	tool := &registry.Tool{
		Definition: registry.Definition{Name: "data__slow", Description: "Slow.", Tier: registry.ReadOnly, Parameters: object},
		Handler: registry.Func(func(ctx context.Context, r *registry.Request) (any, error) {
			defer closed.Done()
			sink := r.SpillStream(ctx, "body")
			_, _ = sink.Write(bytes.Repeat([]byte("b"), size))
			// Every stream is open, and has written, before any ends.
			wrote.Done()
			wrote.Wait()
			info, err := sink.Close()
			if err != nil {
				return nil, err
			}
			infos <- info
			return "ok", nil
		}),
	}
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, tool),
		Spill: registry.NewSpiller(registry.SpillOptions{Store: st, MaxBytes: 1 << 20, TotalBytes: 4 << 20})})
	var calls sync.WaitGroup
	for i := range streams {
		calls.Go(func() {
			res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolCallID: fmt.Sprintf("s%d", i), ToolName: "data__slow", Arguments: json.RawMessage(`{}`)})
			if err != nil || res.Status != registry.StatusOK {
				t.Errorf("call %d: %v %+v", i, err, res)
			}
		})
	}
	calls.Wait()
	close(infos)
	kept := 0
	for in := range infos {
		if in.StoredBytes == size {
			kept++
		}
	}
	if kept != streams {
		t.Errorf("%d of %d streams of %d bytes open at once were kept whole, against a total of 4 MiB; want all", kept, streams, size)
	}
	if n, err := st.SpillBytes(t.Context()); err != nil || n != streams*size {
		t.Errorf("the store holds %d bytes of spills (%v), want %d", n, err, streams*size)
	}
}

// TestSpillTotalReachedMidStream: a stream that reaches the total keeps
// what it wrote up to it, and its marker says the total, not the spill
// limit, stopped it; the refusals are logged, once for a burst of them.
func TestSpillTotalReachedMidStream(t *testing.T) {
	big := &registry.Tool{
		Definition: registry.Definition{Name: "data__big", Description: "Big.", Tier: registry.ReadOnly, Parameters: object, MaxOutputBytes: 1024},
		Handler: registry.Func(func(context.Context, *registry.Request) (any, error) {
			return strings.Repeat("x", 1<<20), nil
		}),
	}
	var log bytes.Buffer
	st := openSQLite(t)
	e := registry.NewExecutor(registry.Options{Registry: newRegistry(t, big),
		Spill: registry.NewSpiller(registry.SpillOptions{Store: st, MaxBytes: 1 << 20, TotalBytes: 600_000,
			Logger: slog.New(slog.NewTextHandler(&log, nil))})})
	markers := []string{
		"only the first 600000 bytes are kept (the kept outputs of all calls reached their total limit)]",
		"the full output was not kept]",
		"the full output was not kept]",
	}
	for i, want := range markers {
		res, err := e.Execute(t.Context(), registry.Anonymous(), &registry.Call{ToolName: "data__big", Arguments: json.RawMessage(`{}`)})
		if err != nil || !res.Truncated {
			t.Fatalf("call %d: %v %+v", i+1, err, res)
		}
		var text string
		_ = json.Unmarshal(res.Output, &text)
		if marker := text[strings.LastIndex(text, "[output truncated"):]; !strings.HasSuffix(marker, want) {
			t.Errorf("call %d: marker %q, want it to end %q", i+1, marker, want)
		}
	}
	if n := strings.Count(log.String(), "kept outputs reach TOOLSVC_SPILL_TOTAL_BYTES"); n != 1 {
		t.Errorf("%d log lines say the total refused spills, want 1 for three refusals within a minute:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "streamsRefused=1") {
		t.Errorf("the log line does not count the streams refused:\n%s", log.String())
	}
}
