package store

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestStoredResultIsAnsweredAsFirst: a result read back from the store is
// the one first answered, HTML characters included: json.Marshal stored
// "<b>&" as "\u003cb\u003e\u0026", which GET /calls/{id} and an approved
// call over MCP then showed the model.
func TestStoredResultIsAnsweredAsFirst(t *testing.T) {
	res := &registry.Result{ToolCallID: "c<1>", ToolName: "t__x", Status: registry.StatusOK, Output: json.RawMessage(`{"html":"<b>&</b>"}`)}
	b, err := EncodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`{"html":"<b>&</b>"}`)) || !bytes.Contains(b, []byte(`"c<1>"`)) || bytes.HasSuffix(b, []byte("\n")) {
		t.Errorf("stored as %s", b)
	}
	back, err := DecodeResult(b)
	if err != nil || string(back.Output) != string(res.Output) {
		t.Errorf("read back %s, %v", back.Output, err)
	}
}
