package jsonq

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

func call(t *testing.T, args string, timeout time.Duration) *registry.Result {
	t.Helper()
	tools := Tools()
	tools[0].Timeout = timeout
	reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 1 << 20, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := registry.NewExecutor(registry.Options{Registry: reg}).Execute(context.Background(), registry.Anonymous(),
		&registry.Call{ToolName: "json__query", Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestQuery(t *testing.T) {
	cases := []struct{ args, want string }{
		{`{"program":".a.b","input":{"a":{"b":[1,2]}}}`, `{"count":1,"results":[[1,2]]}`},
		{`{"program":".[] | select(.n > 1) | .name","input":[{"name":"a","n":1},{"name":"b","n":2},{"name":"c","n":3}]}`, `{"count":2,"results":["b","c"]}`},
		{`{"program":".x","inputText":"{\"x\": 12345678901234567890}"}`, `{"count":1,"results":[12345678901234567890]}`},
		{`{"program":"$ENV | length"}`, `{"count":1,"results":[0]}`},
		{`{"program":"range(5)","maxResults":2}`, `{"count":2,"results":[0,1],"stopped":"stopped after maxResults=2"}`},
		{`{"program":"empty","input":1}`, `{"count":0,"results":[]}`},
	}
	for _, c := range cases {
		res := call(t, c.args, 0)
		if res.Status != registry.StatusOK || string(res.Output) != c.want {
			t.Errorf("%s\n got %s %+v\nwant %s", c.args, res.Output, res.Error, c.want)
		}
	}
}

func TestQueryErrors(t *testing.T) {
	cases := []struct {
		args string
		code registry.Code
		want string
	}{
		{`{"program":".a[","input":{}}`, registry.CodeInvalidArguments, "not valid jq"},
		{`{"program":".","inputText":"{nope"}`, registry.CodeInvalidArguments, "not valid JSON"},
		{`{"program":".","input":1,"inputText":"1"}`, registry.CodeInvalidArguments, "not both"},
		{`{"program":".a + 1","input":{"a":"x"}}`, registry.CodeTool, "cannot add"},
	}
	for _, c := range cases {
		res := call(t, c.args, 0)
		if res.Code() != c.code || !strings.Contains(res.Error.Message, c.want) {
			t.Errorf("%s: got %+v, want %s containing %q", c.args, res.Error, c.code, c.want)
		}
	}
	res := call(t, `{"program":"last(range(1e15))"}`, 200*time.Millisecond)
	if res.Code() != registry.CodeTimeout {
		t.Errorf("runaway program: %+v", res.Error)
	}
}
