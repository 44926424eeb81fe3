package jsonq

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// TestResultsJSONReadersTake: gojq computes with integers of any size,
// and a result with one beyond a 64-bit float's range came back as that
// number (421 digits for the first program), on which Go's
// json.Unmarshal fails, failing the whole response. Such a result is now
// a tool error that names the number's place and says to use tostring;
// what tostring makes comes back. Infinite and NaN floats, which JSON
// cannot write, are refused alike.
func TestResultsJSONReadersTake(t *testing.T) {
	for _, c := range []struct{ program, input, message, suggestion string }{
		{`reduce range(20) as $x (100000000000000000000; . * 100000000000000000000)`, `null`,
			"result 1 holds an integer of 421 digits, beyond what JSON readers take", "`| tostring`"},
		{`-(reduce range(20) as $x (100000000000000000000; . * 100000000000000000000))`, `null`,
			"result 1 holds an integer of 421 digits", "`| tostring`"},
		{`1, {a: [1, {"b c": ("1" + "0" * 300 | tonumber | . * .)}]}`, `null`,
			`result 2 holds an integer of 601 digits at .a[1].["b c"], beyond`, "`| .a[1].[\"b c\"] |= tostring`"},
		{`[1, 2, ("1" + "0" * 400 | tonumber)]`, `null`, "result 1 holds an integer of 401 digits at .[2]", "`| .[2] |= tostring`"},
		{`{z: infinite, y: 1, x: nan}`, `null`, "result 1 holds the number NaN at .x, which JSON cannot write", "isinfinite and isnan"},
		{`.a * 1e300`, `{"a": 1e300}`, "result 1 holds the number +Inf, which JSON cannot write", "isinfinite"},
		{`reduce range(1024) as $x (1; . * 2)`, `null`, "result 1 holds an integer of 309 digits", "tostring"},
		{`"1e999" | fromjson`, `null`, "result 1 holds the number 1e999, beyond", "tostring"},
	} {
		args, _ := json.Marshal(map[string]any{"program": c.program, "input": json.RawMessage(c.input)})
		res := call(t, string(args), 0)
		if res.Code() != registry.CodeTool || !strings.Contains(res.Error.Message, c.message) || !strings.Contains(res.Error.Suggestion, c.suggestion) {
			t.Errorf("%s:\n got %s %+v\nwant %q, suggestion with %q", c.program, registry.Clip(string(res.Output), 100), res.Error, c.message, c.suggestion)
		}
	}
	// What the suggestion says to do, and numbers readers take: beyond
	// 2^53 within a float's range, an integer keeps every digit, as in
	// arguments.
	huge := "1" + strings.Repeat("0", 420)
	for _, c := range []struct{ program, want string }{
		{`reduce range(20) as $x (100000000000000000000; . * 100000000000000000000) | tostring`, `["` + huge + `"]`},
		{`{a: [1, ("1" + "0" * 300 | tonumber | . * .)]} | .a[1] |= tostring`, `[{"a":[1,"1` + strings.Repeat("0", 600) + `"]}]`},
		{`100000000000000000000 * 100000000000000000000`, `[10000000000000000000000000000000000000000]`},
		{`18446744073709551617`, `[18446744073709551617]`},
		{`reduce range(1023) as $x (1; . * 2)`, `[` + pow2(1023) + `]`},
		{`reduce range(1024) as $x (1; . * 2) | tostring | length`, `[309]`},
		{`"12345678901234567890123" | fromjson`, `[12345678901234567890123]`},
		{`1.5e300 * 1e8`, `[1.5e+308]`},
	} {
		args, _ := json.Marshal(map[string]any{"program": c.program})
		res := call(t, string(args), 0)
		var out struct {
			Results json.RawMessage `json:"results"`
		}
		_ = json.Unmarshal(res.Output, &out)
		if res.Status != registry.StatusOK || string(out.Results) != c.want {
			t.Errorf("%s:\n got %.200s %+v\nwant %.200s", c.program, res.Output, res.Error, c.want)
		}
		if err := registry.Interoperable(res.Output); err != nil {
			t.Errorf("%s: output is not I-JSON: %v", c.program, err)
		}
	}
}

// pow2 writes 2^n in decimal.
func pow2(n int) string {
	digits := []byte{1}
	for range n {
		carry := byte(0)
		for i := range digits {
			d := digits[i]*2 + carry
			digits[i], carry = d%10, d/10
		}
		if carry > 0 {
			digits = append(digits, carry)
		}
	}
	var b strings.Builder
	for i := len(digits) - 1; i >= 0; i-- {
		b.WriteByte('0' + digits[i])
	}
	return b.String()
}
