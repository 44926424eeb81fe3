package registry

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCutMarkerHintIsJSON: the read-on hint in a marker is the arguments
// of result__read, which a model sends back as they are; Go's %q would
// write characters outside the Basic Multilingual Plane's printable ones
// as \U escapes, which JSON does not have.
func TestCutMarkerHintIsJSON(t *testing.T) {
	for _, id := range []string{"call_1", "x\U000e0041", "q\"uote\\", "ctl\x01", "\U000F0000", "<&>"} {
		m := CutMarker(10, 20, id, "stderr", 7, &SpillInfo{StoredBytes: 20, TotalBytes: 20})
		_, hint, ok := strings.Cut(m, "read on with "+ReadOnTool+" ")
		if !ok {
			t.Fatalf("%q: no hint in %q", id, m)
		}
		hint = strings.TrimSuffix(hint, "]")
		var args struct {
			ToolCallID string `json:"toolCallId"`
			Stream     string `json:"stream"`
			Offset     int64  `json:"offset"`
		}
		if err := json.Unmarshal([]byte(hint), &args); err != nil {
			t.Fatalf("%q: hint %s is not JSON: %v", id, hint, err)
		}
		if args.ToolCallID != id || args.Stream != "stderr" || args.Offset != 7 {
			t.Errorf("%q: hint %s reads as %+v", id, hint, args)
		}
	}
}
