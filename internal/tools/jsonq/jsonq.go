// Package jsonq provides json__query, a read-only tool that runs jq
// programs (gojq) over JSON the model supplies.
package jsonq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/itchyny/gojq"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Tools returns the jq tool.
func Tools() []*registry.Tool {
	t, f := true, false
	return []*registry.Tool{{
		Definition: registry.Definition{
			Name: "json__query",
			Description: "Run a jq program over a JSON value and return every result it produces, " +
				"e.g. program `.items[] | select(.price > 10) | .name`. Pass the data as `input` (any JSON value) " +
				"or as `inputText` (a string holding JSON). Standard jq syntax; no file, network or environment access. " +
				"Integers keep every digit, but a result may hold no number beyond a 64-bit float's range (about 1.8e308): " +
				"turn such a number into text with tostring. " +
				"Returns {\"results\": [...], \"count\": n}.",
			Tier:       registry.ReadOnly,
			Tags:       []string{"json", "data"},
			Parameters: json.RawMessage(schema),
			OutputSchema: json.RawMessage(`{"type": "object", "required": ["results", "count"],
  "properties": {"results": {"type": "array", "description": "Every value the program produced, in order."},
    "count": {"type": "integer"}, "stopped": {"type": "string", "description": "Why the results stop early (maxResults)."}}}`),
			Annotations: &registry.Annotations{Title: "Query JSON with jq", ReadOnlyHint: &t, IdempotentHint: &t, OpenWorldHint: &f},
		},
		Handler: registry.Func(run),
	}}
}

const schema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["program"],
  "properties": {
    "program": {"type": "string", "minLength": 1, "maxLength": 10000, "description": "The jq program, e.g. \".a.b\" or \"[.[] | .id]\"."},
    "input": {"description": "The JSON value to query (any JSON). Give this or inputText."},
    "inputText": {"type": "string", "maxLength": 1048576, "description": "The JSON to query, as text. Give this or input."},
    "maxResults": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "Stop after this many results (default 1000)."}
  }
}`

type args struct {
	Program    string          `json:"program"`
	Input      json.RawMessage `json:"input"`
	InputText  *string         `json:"inputText"`
	MaxResults int             `json:"maxResults"`
}

func run(ctx context.Context, req *registry.Request) (any, error) {
	var a args
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	if a.MaxResults == 0 {
		a.MaxResults = 1000
	}
	raw := []byte(a.Input)
	switch {
	case a.InputText != nil && len(a.Input) > 0:
		return nil, invalid("give either input or inputText, not both", "")
	case a.InputText != nil:
		raw = []byte(*a.InputText)
	case len(a.Input) == 0:
		raw = []byte("null")
	}
	input, err := decode(raw)
	if err != nil {
		return nil, invalid("inputText is not valid JSON: "+err.Error(), "Pass the data as `input` (a JSON value) instead of text.")
	}
	if a.InputText != nil {
		// The bar the service sets for input, which it checks itself.
		if err := registry.Interoperable(raw); err != nil {
			return nil, invalid("inputText is not interoperable JSON (RFC 7493): "+err.Error(),
				`Give each member name once per object, keep numbers within a 64-bit float's range (quote larger ones as strings) and escape only whole surrogate pairs (\ud83d\ude00, not a lone \ud800).`)
		}
	}
	query, err := gojq.Parse(a.Program)
	if err != nil {
		return nil, invalid("program is not valid jq: "+err.Error(), "Check quoting and brackets; jq field access looks like .name or .[\"odd key\"].")
	}
	code, err := gojq.Compile(query, gojq.WithEnvironLoader(func() []string { return nil }))
	if err != nil {
		return nil, invalid("program does not compile: "+err.Error(), "")
	}
	results := []any{}
	iter := code.RunWithContext(ctx, input)
	for {
		v, ok := iter.Next()
		if !ok {
			break
		}
		if err, isErr := v.(error); isErr {
			var halt *gojq.HaltError
			if errors.As(err, &halt) && halt.Value() == nil {
				break
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, registry.ToolError("jq: "+err.Error(), hint(err))
		}
		if err := readable(v, len(results)+1); err != nil {
			return nil, err
		}
		results = append(results, v)
		if len(results) == a.MaxResults {
			return map[string]any{"results": results, "count": len(results), "stopped": fmt.Sprintf("stopped after maxResults=%d", a.MaxResults)}, nil
		}
	}
	return map[string]any{"results": results, "count": len(results)}, nil
}

// readable refuses result n, v, when it holds a number JSON readers do
// not take: an integer beyond what a 64-bit float holds (gojq computes
// with integers of any size: 10^20 * 10^20 twenty times has 421 digits),
// which Go's json.Unmarshal fails on, failing the whole response, and
// JavaScript reads as Infinity; or a float that is infinite or NaN,
// which JSON cannot write. This is the bar the service sets for numbers
// in arguments (registry.Interoperable): an integer beyond 2^53 within
// the float's range is written with every digit, as jq 1.7 writes one
// it has not computed with.
func readable(v any, n int) error {
	what, why, path := unreadableNumber(v)
	if what == "" {
		return nil
	}
	at, fix := "", "tostring"
	if len(path) > 0 {
		at = " at " + jqPath(path)
		fix = jqPath(path) + " |= tostring"
	}
	return registry.ToolError(fmt.Sprintf("result %d holds %s%s, %s", n, what, at, why),
		fmt.Sprintf("Keep it as text: end the program with `| %s`; or compute a smaller number. "+
			"A float that is infinite or NaN can be tested with isinfinite and isnan.", fix))
}

// unreadableNumber finds a number in v that readable refuses and says
// what it is and why, with its path (innermost step first). Of several, it
// finds the first in an array and the one under the least key in an
// object, so the error does not depend on a map's order.
func unreadableNumber(v any) (what, why string, path []any) {
	const beyond = "beyond what JSON readers take"
	switch x := v.(type) {
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return fmt.Sprintf("the number %v", x), "which JSON cannot write", nil
		}
	case *big.Int:
		// Float64 rounds as strconv.ParseFloat does: to ±Inf from
		// 2^1024 - 2^970 on.
		if f, _ := new(big.Float).SetInt(x).Float64(); math.IsInf(f, 0) {
			return fmt.Sprintf("an integer of %d digits", len(strings.TrimPrefix(x.Text(10), "-"))), beyond, nil
		}
	case json.Number:
		// Numbers of the input are within range; fromjson makes others.
		if _, err := strconv.ParseFloat(x.String(), 64); err != nil {
			return "the number " + registry.Clip(x.String(), 40), beyond, nil
		}
	case []any:
		for i, e := range x {
			if what, why, path := unreadableNumber(e); what != "" {
				return what, why, append(path, i)
			}
		}
	case map[string]any:
		var key string
		for k, e := range x {
			if w, y, p := unreadableNumber(e); w != "" && (what == "" || k < key) {
				what, why, path, key = w, y, p, k
			}
		}
		if what != "" {
			return what, why, append(path, key)
		}
	}
	return "", "", nil
}

// jqPath writes path (innermost step first) as a jq path expression.
func jqPath(path []any) string {
	var b strings.Builder
	for i := len(path) - 1; i >= 0; i-- {
		switch step := path[i].(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", step)
		case string:
			if identifier(step) {
				b.WriteString("." + step)
			} else {
				q, _ := json.Marshal(step)
				fmt.Fprintf(&b, ".[%s]", q)
			}
		}
	}
	s := b.String()
	if strings.HasPrefix(s, "[") {
		s = "." + s
	}
	return s
}

// identifier reports whether jq takes .s for the key s.
func identifier(s string) bool {
	for i, r := range s {
		if r != '_' && (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return s != ""
}

// hint says what to do about a jq program's runtime error.
func hint(err error) string {
	var raised gojq.ValueError
	msg := err.Error()
	switch {
	case errors.As(err, &raised):
		return "The program raised this error itself (error/1): catch it with `try … catch …`, or change the input or condition that raises it."
	case strings.Contains(msg, "regular expression"):
		return "test, match, capture, scan, splits, sub and gsub take Go RE2 regular expressions: no look-around or back-references, " +
			`and inside a jq string a backslash is written twice ("\\d+"); the flags are g, i and m.`
	case strings.Contains(msg, "too large"):
		return "The program builds a value larger than jq allows: repeat a string fewer times, or index within the array's length."
	case strings.HasPrefix(msg, "cannot divide"), strings.HasPrefix(msg, "cannot modulo"):
		return "Guard against a zero divisor, e.g. `if $d == 0 then null else $n / $d end`."
	}
	return "Guard optional fields with `?` or `// default`, and check the types the program expects (`type` shows them)."
}

// decode reads JSON keeping numbers exact (gojq accepts json.Number).
func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, syntaxError(b, err)
	}
	end := int(dec.InputOffset())
	if rest := bytes.TrimLeft(b[end:], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("%s: text after the JSON value: %s", position(b, len(b)-len(rest)), registry.Clip(string(rest), 20))
	}
	return v, nil
}

// syntaxError says where the text b goes wrong: the line and column (in
// characters, from 1), and the whole character there (see
// registry.SyntaxErrorAt).
func syntaxError(b []byte, err error) error {
	var se *json.SyntaxError
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: the text ends before the JSON value does", position(b, len(b)))
	}
	if !errors.As(err, &se) {
		return err
	}
	at, msg := registry.SyntaxErrorAt(b, se)
	return fmt.Errorf("%s: %s", position(b, at), msg)
}

// position names the line and column of byte offset at in b.
func position(b []byte, at int) string {
	line := bytes.Count(b[:at], []byte{'\n'}) + 1
	col := utf8.RuneCount(b[bytes.LastIndexByte(b[:at], '\n')+1:at]) + 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

func invalid(msg, suggestion string) *registry.Error {
	return &registry.Error{Code: registry.CodeInvalidArguments, Message: msg, Suggestion: suggestion}
}
