package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// An output is sent as the executor would write it: <, > and & are not
// escaped a second time in the response frame. Before, a
// text of 5,000 "<" came back as 30,000 bytes of \u003c and was cut by
// the output limit that "a"×5000 passed.
func TestAnswerDoesNotEscapeTheOutputAgain(t *testing.T) {
	text := strings.Repeat("<", 5000) + "&>"
	tools := map[string]registry.Handler{
		"text": registry.Func(func(context.Context, *registry.Request) (any, error) { return map[string]string{"result": text}, nil }),
	}
	req, _ := json.Marshal(request{Tool: "text", Arguments: json.RawMessage(`{}`)})
	msg := answer(tools, req)
	var res response
	if err := json.Unmarshal(msg, &res); err != nil {
		t.Fatal(err)
	}
	if want := `{"result":"` + text + `"}`; string(res.Output) != want || len(msg) > len(want)+100 || bytes.Contains(msg, []byte(`\u003c`)) {
		t.Errorf("a %d-byte output came back in a %d-byte frame: %.80s", len(want), len(msg), msg)
	}
}

// An error message of many megabytes is cut in the worker, keeping its
// beginning and end: before, the frame exceeded what a confined tool may
// return, and the call failed with "the output is 20000155 bytes … Ask
// for fewer results", which was not the matter.
func TestAnswerClipsAHugeErrorMessage(t *testing.T) {
	huge := "start " + strings.Repeat("x", 20_000_000) + " end"
	tools := map[string]registry.Handler{
		"fail":  registry.Func(func(context.Context, *registry.Request) (any, error) { return nil, registry.ToolError(huge, "fix it") }),
		"crash": registry.Func(func(context.Context, *registry.Request) (any, error) { panic(huge) }),
	}
	for name := range tools {
		req, _ := json.Marshal(request{Tool: name, Arguments: json.RawMessage(`{}`)})
		msg := answer(tools, req)
		var res response
		if err := json.Unmarshal(msg, &res); err != nil {
			t.Fatal(err)
		}
		got := res.Failure
		if res.Error != nil {
			got = res.Error.Message
		}
		m := regexp.MustCompile(`^(.*) … \[(\d+) characters omitted\] … (.*)$`).FindStringSubmatch(got)
		if len(msg) > 2*maxMessage || m == nil || !strings.Contains(m[1], "start xxx") || !strings.HasSuffix(m[3], "xxx end") ||
			len(m[1])+atoi(m[2])+len(m[3]) != strings.Index(got, "start")+len(huge) {
			t.Errorf("%s: a %d-byte frame, message %.60q…%.60q", name, len(msg), got, got[max(0, len(got)-60):])
		}
	}
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
