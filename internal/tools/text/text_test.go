package text

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

func run1(t *testing.T, args string) *registry.Result {
	t.Helper()
	reg, err := registry.New(registry.Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 1 << 20, ErrorMessageLimit: 1000}, Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := registry.NewExecutor(registry.Options{Registry: reg}).Execute(context.Background(), registry.Anonymous(),
		&registry.Call{ToolName: "text__transform", Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestTransform(t *testing.T) {
	cases := []struct{ args, want string }{
		{`{"operation":"upper","text":"héllo"}`, `{"result":"HÉLLO"}`},
		{`{"operation":"lower","text":"ÀB"}`, `{"result":"àb"}`},
		{`{"operation":"title","text":"hello big-world"}`, `{"result":"Hello Big-World"}`},
		{`{"operation":"trim","text":"  x \n"}`, `{"result":"x"}`},
		{`{"operation":"replace","text":"a-b-c","find":"-","replacement":"+"}`, `{"replacements":2,"result":"a+b+c"}`},
		{`{"operation":"regex_replace","text":"2024-01-31","pattern":"(\\d+)-(\\d+)-(\\d+)","replacement":"$3/$2/$1"}`, `{"result":"31/01/2024"}`},
		{`{"operation":"regex_find","text":"a1 b22","pattern":"([a-z])(\\d+)"}`, `{"result":[{"match":"a1","index":0,"groups":["a","1"]},{"match":"b22","index":3,"groups":["b","22"]}]}`},
		{`{"operation":"split","text":"a,b,c","separator":",","limit":3}`, `{"result":["a","b","c"]}`},
		{`{"operation":"join","parts":["a","b"],"separator":"/"}`, `{"result":"a/b"}`},
		{`{"operation":"base64_encode","text":"hi?"}`, `{"result":"aGk/"}`},
		{`{"operation":"base64_decode","text":"aGk_"}`, `{"result":"hi?"}`},
		{`{"operation":"base64_decode","text":"/w=="}`, `{"encoding":"hex","note":"the decoded bytes are not UTF-8 text, so they are shown as hex","result":"ff"}`},
		{`{"operation":"hash","text":"abc"}`, `{"result":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}`},
		{`{"operation":"hash","text":"abc","algorithm":"md5"}`, `{"result":"900150983cd24fb0d6963f7d28e17f72"}`},
		{`{"operation":"count","text":"héllo world\nbye"}`, `{"result":{"bytes":16,"characters":15,"lines":2,"words":3}}`},
	}
	for _, c := range cases {
		res := run1(t, c.args)
		if res.Status != registry.StatusOK || string(res.Output) != c.want {
			t.Errorf("%s\n got %s %+v\nwant %s", c.args, res.Output, res.Error, c.want)
		}
	}
}

func TestTransformErrors(t *testing.T) {
	cases := []struct{ args, want string }{
		{`{"operation":"upper"}`, `missing required property 'text'`},
		{`{"operation":"replace","text":"x"}`, `missing required property 'find'`},
		{`{"operation":"regex_find","text":"x","pattern":"(?<=a)b"}`, "not a valid RE2"},
		{`{"operation":"base64_decode","text":"!!!"}`, "not valid base64"},
		{`{"operation":"join"}`, `missing required property 'parts'`},
		{`{"operation":"reverse","text":"x"}`, "expected one of"},
	}
	for _, c := range cases {
		res := run1(t, c.args)
		if res.Code() != registry.CodeInvalidArguments || !strings.Contains(res.Error.Message, c.want) {
			t.Errorf("%s: got %+v, want E_INVALID_ARGUMENTS containing %q", c.args, res.Error, c.want)
		}
	}
}

// A replace whose result would be too large is refused before anything is
// allocated: "a"×500,000 by "b"×100,000 would be 50 GB.
func TestReplaceResultBound(t *testing.T) {
	args, _ := json.Marshal(map[string]any{"operation": "replace", "text": strings.Repeat("a", 500000), "find": "a", "replacement": strings.Repeat("b", 100000)})
	_, err := run(context.Background(), &registry.Request{Arguments: args})
	var e *registry.Error
	if !errors.As(err, &e) || e.Code != registry.CodeTool || !strings.Contains(e.Message, "the result would be 50000000000 bytes") {
		t.Fatalf("got %v", err)
	}
	// Just within the bound it runs.
	args, _ = json.Marshal(map[string]any{"operation": "replace", "text": strings.Repeat("a", 16), "find": "a", "replacement": strings.Repeat("b", MaxResultBytes/16)})
	out, err := run(context.Background(), &registry.Request{Arguments: args})
	if err != nil || len(out.(map[string]any)["result"].(string)) != MaxResultBytes {
		t.Fatalf("at the bound: %v", err)
	}
}
