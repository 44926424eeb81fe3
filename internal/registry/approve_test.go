package registry

import (
	"encoding/json"
	"testing"
)

// TestApprovalBinds: a call binds to the approval request filed for it
// whatever its key order and spacing; another tool, other arguments or
// arguments nested past the bound do not.
func TestApprovalBinds(t *testing.T) {
	_, v, derr := decodeArguments(json.RawMessage(`{"path":"notes/a.txt","content":"x","n":1.50}`), 0, nil)
	if derr != nil {
		t.Fatal(derr)
	}
	a := &Approval{ToolName: "fs__write", ArgumentsDigest: ArgumentsDigest(v)}
	cases := []struct {
		tool, args string
		want       bool
	}{
		{"fs__write", `{"path":"notes/a.txt","content":"x","n":1.50}`, true},
		{"fs__write", ` { "n":1.50, "content" : "x", "path":"notes/a.txt" } `, true},
		{"fs__write", `"{\"content\":\"x\",\"n\":1.50,\"path\":\"notes/a.txt\"}"`, true},
		{"fs__read", `{"path":"notes/a.txt","content":"x","n":1.50}`, false},
		{"fs__write", `{"path":"notes/b.txt","content":"x","n":1.50}`, false},
		{"fs__write", `{"path":"notes/a.txt","content":"x"}`, false},
		{"fs__write", `[1]`, false},
		{"fs__write", `{"path":"notes/a.txt","content":"x","n":1.50,"deep":[[[[[1]]]]]}`, false},
	}
	for _, tc := range cases {
		if got := a.Binds(tc.tool, json.RawMessage(tc.args), 4); got != tc.want {
			t.Errorf("Binds(%s, %s) = %v, want %v", tc.tool, tc.args, got, tc.want)
		}
	}
	if (*Approval)(nil).Binds("fs__write", nil, 0) {
		t.Error("a nil approval binds")
	}
}
