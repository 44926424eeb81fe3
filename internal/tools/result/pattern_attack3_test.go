package result_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/tools/result"
)

// longLines is a Reader whose kept output is one line of 'a's as long as
// the read asks for, and which never ends; it ignores its context, as a
// store that answers quickly does.
type longLines struct{}

func (longLines) ReadOutput(_ context.Context, _ *registry.Caller, _ []string, id, stream string, offset int64, limit int) (*registry.SpillInfo, []byte, error) {
	return &registry.SpillInfo{ToolName: "t__big", TotalBytes: 1 << 30, StoredBytes: 1 << 30}, []byte(strings.Repeat("a", limit)), nil
}

func readTool(t *testing.T) *registry.Tool {
	t.Helper()
	tools, binder := result.Tools(result.Options{})
	binder.Bind(longLines{})
	return tools[0]
}

// A pattern that compiles to a large program is refused: RE2's time grows
// with bytes × instructions and one match cannot be stopped, so a
// 900-character pattern of 152,003 instructions over one 256 KiB window
// kept a core of the service busy for about 18 minutes, long after the
// call's timeout had answered.
func TestReadOnRefusesAPatternTooLargeToMatchInBoundedTime(t *testing.T) {
	tool := readTool(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the refusal comes before any work
	args, _ := json.Marshal(map[string]any{"toolCallId": "c1", "pattern": strings.Repeat(`(?:a*){1000}`, 3) + "b"})
	_, err := tool.Handler.Run(ctx, &registry.Request{Name: result.Name, Arguments: args})
	var re *registry.Error
	if !errors.As(err, &re) || re.Code != registry.CodeInvalidArguments || !strings.Contains(re.Message, "6003 instructions; the limit is 4096") || re.Suggestion == "" {
		t.Fatalf("a 6003-instruction pattern: %v", err)
	}
}

// A pattern within the limit is matched in pieces, and the context is
// checked between them: a call whose context has ended stops within a
// piece instead of matching a whole 256 KiB line (about 25 s of CPU for
// this pattern).
func TestReadOnFilterStopsWhenItsContextEnds(t *testing.T) {
	tool := readTool(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	args, _ := json.Marshal(map[string]any{"toolCallId": "c1", "pattern": `(?:a*){1000}(?:a*){1000}b`})
	out, err := tool.Handler.Run(ctx, &registry.Request{Name: result.Name, Arguments: args})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled filter answered %v, %v; want context.Canceled", out, err)
	}
}
