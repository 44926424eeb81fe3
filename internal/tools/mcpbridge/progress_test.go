package mcpbridge

import "testing"

// TestUnaskedProgress: which lines are dropped unread.
func TestUnaskedProgress(t *testing.T) {
	for line, want := range map[string]bool{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":5}}` + "\n": true,
		`{"method": "notifications/progress", "jsonrpc": "2.0", "params": {}}` + "\n":                          true,
		`{"jsonrpc":"2.0","id":3,"method":"notifications/progress","params":{}}` + "\n":                        false, // a request, answered by the SDK
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"notifications/progress"}}` + "\n": false,
		`{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"\"notifications/progress\""}]}}`:  false,
		`not json "notifications/progress"` + "\n":                                                             false,
	} {
		if got := unasked([]byte(line)); got != want {
			t.Errorf("%s: %v, want %v", line, got, want)
		}
	}
}
