package registry

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestArgumentsThatAreNotAnObject: what the model sent instead of an
// object is named as what it is, so that it can send the object.
func TestArgumentsThatAreNotAnObject(t *testing.T) {
	e := newExec(t, Options{}, tool("t__echo", ReadOnly, echo))
	for _, c := range []struct{ args, msg string }{
		{`"\"{\\\"path\\\":\\\"x\\\"}\""`, "got a string holding a string: the arguments were encoded as JSON twice"},
		{`"\"éééééééééééééééééééééééééééééééééééééééééé\""`, "encoded as JSON twice"},
		{`"éééééééééééééééééééééééééééééééééééééééééé"`, `got "éééééééééééééééééééé…", which is not JSON`},
		{`"[1]"`, "got an array"},
		{`"12"`, "got a number"},
	} {
		res := mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(c.args)})
		if res.Code() != CodeInvalidArguments || !strings.Contains(res.Error.Message, c.msg) {
			t.Errorf("arguments %s: %+v, want %q", c.args, res.Error, c.msg)
		}
	}
	// A string holding null is what a bare null is: no arguments.
	for _, args := range []string{`null`, `"null"`, `" null "`} {
		res := mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(args)})
		if res.Code() != CodeInvalidArguments || !strings.Contains(res.Error.Message, "missing required property 'path'") {
			t.Errorf("arguments %s: %+v, want the schema's complaint about {}", args, res.Error)
		}
	}
}
