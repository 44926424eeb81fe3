package registry

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestBindIntegralNumbers: numbers JSON Schema counts as integers (2.0,
// 1e2) bind to integer fields; what does not fit is said in JSON's words.
func TestBindIntegralNumbers(t *testing.T) {
	type args struct {
		Limit  int             `json:"limit"`
		Offset int64           `json:"offset"`
		Items  []uint8         `json:"items"`
		Ratio  float64         `json:"ratio"`
		Nested struct{ N int } `json:"nested"`
	}
	var a args
	r := &Request{Arguments: json.RawMessage(`{"limit":2.0,"offset":1e2,"items":[1E1,0.0],"ratio":0.5,"nested":{"N":3.000}}`)}
	if err := r.Bind(&a); err != nil {
		t.Fatal(err)
	}
	if a.Limit != 2 || a.Offset != 100 || len(a.Items) != 2 || a.Items[0] != 10 || a.Ratio != 0.5 || a.Nested.N != 3 {
		t.Errorf("bound %+v", a)
	}
	for _, c := range []struct{ args, want string }{
		{`{"limit":2.5}`, "limit must be an integer, not number 2.5"},
		{`{"limit":1e300}`, "limit must be an integer, not number"},
		{`{"limit":1e1000000}`, "limit must be an integer, not number"},
		{`{"limit":"2"}`, "limit must be an integer, not string"},
		{`{"items":{}}`, "items must be an array, not object"},
	} {
		err := (&Request{Arguments: json.RawMessage(c.args)}).Bind(&a)
		e, ok := err.(*Error)
		if !ok || e.Code != CodeInvalidArguments || !strings.Contains(e.Message, c.want) || strings.Contains(e.Message, "Go ") {
			t.Errorf("%s: %v, want %q", c.args, err, c.want)
		}
	}
}
