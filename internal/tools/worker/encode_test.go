package worker

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestUnencodableOutput: an output JSON cannot hold (an infinite number,
// nesting past what the encoder reads back) is the tool's error, said in
// the terms of the output, not of Go's encoder.
func TestUnencodableOutput(t *testing.T) {
	deep := json.RawMessage(strings.Repeat("[", 20000) + strings.Repeat("]", 20000))
	tools := map[string]registry.Handler{
		"inf":  registry.Func(func(context.Context, *registry.Request) (any, error) { return []float64{math.Inf(1)}, nil }),
		"nan":  registry.Func(func(context.Context, *registry.Request) (any, error) { return math.NaN(), nil }),
		"deep": registry.Func(func(context.Context, *registry.Request) (any, error) { return deep, nil }),
	}
	for name, want := range map[string]string{"inf": "cannot represent (+Inf)", "nan": "cannot represent (NaN)", "deep": "nests deeper"} {
		req, _ := json.Marshal(request{Tool: name, Arguments: json.RawMessage(`{}`)})
		var res response
		err := json.Unmarshal(answer(tools, req), &res)
		if err != nil || res.Error == nil || res.Error.Code != registry.CodeTool || !strings.Contains(res.Error.Message, want) || strings.Contains(res.Error.Message, "json:") {
			t.Errorf("%s: %v %+v", name, err, res)
		}
	}
}
