package data

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

type harness struct {
	t    *testing.T
	exec *registry.Executor
}

func newHarness(t *testing.T, o Options, maxOutput int) *harness {
	t.Helper()
	reg, err := registry.New(registry.Defaults{Timeout: 10 * time.Second, MaxOutputBytes: maxOutput, ErrorMessageLimit: 1000}, Tools(o)...)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, exec: registry.NewExecutor(registry.Options{Registry: reg})}
}

func (h *harness) call(args map[string]any) *registry.Result {
	h.t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		h.t.Fatal(err)
	}
	res, err := h.exec.Execute(context.Background(), registry.Anonymous(), &registry.Call{ToolName: "data__parse", Arguments: raw})
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// ok returns the output, with rows as raw JSON text for exact comparison.
func (h *harness) ok(args map[string]any) (Result, string) {
	h.t.Helper()
	res := h.call(args)
	if res.Status != registry.StatusOK || res.Truncated {
		h.t.Fatalf("%v: status %s truncated %v error %+v", args, res.Status, res.Truncated, res.Error)
	}
	var out struct {
		Result
		Rows json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		h.t.Fatal(err)
	}
	var r Result
	if err := json.Unmarshal(res.Output, &r); err != nil {
		h.t.Fatal(err)
	}
	return r, string(out.Rows)
}

func (h *harness) fail(args map[string]any) *registry.Error {
	h.t.Helper()
	res := h.call(args)
	if res.Status != registry.StatusError {
		h.t.Fatalf("%v: want an error, got %s", args, res.Output)
	}
	return res.Error
}

func TestParse(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	cases := []struct {
		name    string
		args    map[string]any
		rows    string
		columns []string
	}{
		{"csv with header", map[string]any{"format": "csv", "text": "name,age,city\nAda,36,London\nLinus,54,\"Portland, OR\"\n"},
			`[{"name":"Ada","age":"36","city":"London"},{"name":"Linus","age":"54","city":"Portland, OR"}]`, []string{"name", "age", "city"}},
		{"csv quotes and newlines", map[string]any{"format": "csv", "text": "q\r\n\"say \"\"hi\"\"\"\r\n\"two\nlines\"\r\n"},
			`[{"q":"say \"hi\""},{"q":"two\nlines"}]`, []string{"q"}},
		{"csv without header", map[string]any{"format": "csv", "header": false, "text": "a,b\n1,2,3\n"},
			`[["a","b"],["1","2","3"]]`, nil},
		{"csv delimiter", map[string]any{"format": "csv", "delimiter": ";", "text": "a;b\n1,5;2\n"},
			`[{"a":"1,5","b":"2"}]`, []string{"a", "b"}},
		{"csv byte order mark and blank lines", map[string]any{"format": "csv", "text": "\uFEFFid\n\n1\n\n2\n"},
			`[{"id":"1"},{"id":"2"}]`, []string{"id"}},
		{"csv header names", map[string]any{"format": "csv", "text": "x,,x,x_2\n1,2,3,4\n"},
			`[{"x":"1","column_2":"2","x_2":"3","x_2_2":"4"}]`, []string{"x", "column_2", "x_2", "x_2_2"}},
		{"tsv", map[string]any{"format": "tsv", "text": "a\tb c\n1\t2 \"inch\"\n"},
			`[{"a":"1","b c":"2 \"inch\""}]`, []string{"a", "b c"}},
		{"tsv without header", map[string]any{"format": "tsv", "header": false, "text": "1\t2\n"},
			`[["1","2"]]`, nil},
		{"jsonl", map[string]any{"format": "jsonl", "text": "{\"a\": 1, \"z\": 2.50}\n\n  \r\n[1, \"x\"]\r\n\"s\"\n12345678901234567890\n"},
			`[{"a":1,"z":2.50},[1,"x"],"s",12345678901234567890]`, nil},
		{"jsonl byte order mark", map[string]any{"format": "jsonl", "text": "\uFEFF{\"a\":1}\n{\"b\":2}\n"},
			`[{"a":1},{"b":2}]`, nil},
		{"yaml byte order mark", map[string]any{"format": "yaml", "text": "\uFEFFa: 1\n"},
			`[{"a":1}]`, nil},
		{"yaml one document", map[string]any{"format": "yaml", "text": "name: toolsvc\ntags: [a, b]\nnested:\n  n: 1\n"},
			`[{"name":"toolsvc","nested":{"n":1},"tags":["a","b"]}]`, nil},
		{"yaml several documents", map[string]any{"format": "yaml", "text": "---\na: 1\n---\n- x\n- y\n---\nplain\n"},
			`[{"a":1},["x","y"],"plain"]`, nil},
		{"yaml anchors, odd keys and floats", map[string]any{"format": "yaml", "text": "base: &b {k: v}\ncopy: *b\n1: one\ntrue: yes\ninf: .inf\n"},
			`[{"1":"one","base":{"k":"v"},"copy":{"k":"v"},"inf":".inf","true":"yes"}]`, nil},
		{"yaml from json", map[string]any{"format": "yaml", "text": `{"a": [1, 2, {"b": null}]}`},
			`[{"a":[1,2,{"b":null}]}]`, nil},
		{"yaml timestamps as RFC 3339", map[string]any{"format": "yaml", "text": "when: 2024-01-02\nat: 2024-01-02T03:04:05Z\n"},
			`[{"at":"2024-01-02T03:04:05Z","when":"2024-01-02T00:00:00Z"}]`, nil},
		{"yaml keys as the values they are", map[string]any{"format": "yaml", "text": "1: a\n2.50: b\n1e3: c\ntrue: d\nnull: e\n2001-12-14: f\n-.inf: g\n0x10: h\nk: {~: i, false: j}\n"},
			`[{"-.inf":"g","1":"a","1000":"c","16":"h","2.5":"b","2001-12-14T00:00:00Z":"f","k":{"false":"j","null":"i"},"null":"e","true":"d"}]`, nil},
		{"yaml anchored and merged keys", map[string]any{"format": "yaml", "text": "base: &b {&one 1: x, 2: y}\nm:\n  <<: *b\n  *one : z\n  3: w\n"},
			`[{"base":{"1":"x","2":"y"},"m":{"1":"z","2":"y","3":"w"}}]`, nil},
		{"empty csv", map[string]any{"format": "csv", "text": ""}, `[]`, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, rows := h.ok(c.args)
			if rows != c.rows {
				t.Errorf("rows\n got %s\nwant %s", rows, c.rows)
			}
			if r.RowCount != len(r.Rows) || r.Truncated || r.NextOffset != nil || r.Format != c.args["format"] {
				t.Errorf("result %+v", r)
			}
			if strings.Join(r.Columns, "|") != strings.Join(c.columns, "|") {
				t.Errorf("columns %q, want %q", r.Columns, c.columns)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	h := newHarness(t, Options{MaxInputBytes: 1000}, 1<<20)
	cases := []struct {
		name string
		args map[string]any
		code registry.Code
		want []string
	}{
		{"csv bare quote", map[string]any{"format": "csv", "text": "a,b\n1,x\"y\n"}, registry.CodeTool, []string{"csv: line 2, column 4", "double quotes"}},
		{"csv unterminated quote", map[string]any{"format": "csv", "text": "a\n\"open\n"}, registry.CodeTool, []string{"csv: line", "quote"}},
		{"csv ragged row", map[string]any{"format": "csv", "text": "a,b,c\n1,2,3\n4;5;6\n"}, registry.CodeTool, []string{"line 3: row has 1 fields but the header has 3", "delimiter"}},
		{"tsv ragged row", map[string]any{"format": "tsv", "text": "a\tb\n1\t2\t3\n"}, registry.CodeTool, []string{"tsv: line 2", "tabs"}},
		{"jsonl bad line", map[string]any{"format": "jsonl", "text": "{\"a\":1}\n\n{\"a\":}\n"}, registry.CodeTool, []string{"jsonl: line 3", "invalid JSON"}},
		{"jsonl value over two lines", map[string]any{"format": "jsonl", "text": "{\"a\":\n1}\n"}, registry.CodeTool, []string{"jsonl: line 1", "cannot span lines"}},
		{"jsonl two values on a line", map[string]any{"format": "jsonl", "text": "1 2\n"}, registry.CodeTool, []string{"jsonl: line 1"}},
		{"yaml syntax", map[string]any{"format": "yaml", "text": "a: 1\nb: [1,\n c: 2\n"}, registry.CodeTool, []string{"yaml document 1", "line "}},
		{"yaml duplicate key", map[string]any{"format": "yaml", "text": "x: 1\n---\ny: 1\ny: 2\n"}, registry.CodeTool, []string{"yaml document 2", "line 4", `"y" already defined`}},
		{"yaml complex key", map[string]any{"format": "yaml", "text": "? [a, b]\n: 1\n"}, registry.CodeTool, []string{"yaml document 1", "mapping key is a sequence or a mapping"}},
		{"yaml keys alike as JSON", map[string]any{"format": "yaml", "text": "1: a\n1.0: b\n0x1: c\n"}, registry.CodeTool,
			[]string{"yaml document 1", `line 2: mapping key "1" already defined at line 1`, "1 and 1.0"}},
		{"yaml equal keys", map[string]any{"format": "yaml", "text": "k: v\n---\n1: a\n0x1: b\n"}, registry.CodeTool,
			[]string{"yaml document 2", `line 4: mapping key "1" already defined at line 3`, "1 and 0x1"}},
		{"yaml null keys", map[string]any{"format": "yaml", "text": "x:\n  null: a\n  ~: b\n"}, registry.CodeTool,
			[]string{`line 3: mapping key "null" already defined at line 2`}},
		{"yaml timestamp and string key", map[string]any{"format": "yaml", "text": "2001-12-14: a\n\"2001-12-14T00:00:00Z\": b\n"}, registry.CodeTool,
			[]string{`line 2: mapping key "2001-12-14T00:00:00Z" already defined at line 1`}},
		{"yaml alias repeats a key", map[string]any{"format": "yaml", "text": "&k a: 1\n*k : 2\n"}, registry.CodeTool,
			[]string{`line 2: mapping key "a" already defined at line 1`, "a and *k"}},
		{"yaml merged key alike", map[string]any{"format": "yaml", "text": "b: &b {1: x}\nm:\n  <<: *b\n  1.0: y\n"}, registry.CodeTool,
			[]string{"yaml document 1", `mapping key "1" defined twice`, "merged in"}},
		{"yaml mapping as key", map[string]any{"format": "yaml", "text": "? {a: 1}\n: x\n"}, registry.CodeTool, []string{"mapping key is a sequence or a mapping"}},
		{"jsonl duplicate member", map[string]any{"format": "jsonl", "text": "{\"a\":1}\n{\"a\":1,\"a\":2}\n"}, registry.CodeTool,
			[]string{"jsonl: line 2: not interoperable JSON (RFC 7493)", `duplicate object member name "a"`, "once per object"}},
		{"jsonl number too large", map[string]any{"format": "jsonl", "text": "\n{\"a\": [1e400]}\n"}, registry.CodeTool,
			[]string{"jsonl: line 2: not interoperable JSON (RFC 7493)", "1e400", "64-bit float"}},
		{"jsonl duplicate before bad JSON", map[string]any{"format": "jsonl", "text": "1\n{\"b\":[{\"c\":1,\"c\":2}]}\n{\"a\":}\n"}, registry.CodeTool,
			[]string{"jsonl: line 2: not interoperable JSON (RFC 7493)", `duplicate object member name "c"`}},
		{"jsonl lone surrogate", map[string]any{"format": "jsonl", "text": `"\ud800"`}, registry.CodeTool,
			[]string{"jsonl: line 1: not interoperable JSON (RFC 7493)", "surrogate"}},
		{"input too large", map[string]any{"format": "csv", "text": strings.Repeat("é", 600)}, registry.CodeInvalidArguments, []string{"1200 bytes", "limit is 1000"}},
		{"delimiter for yaml", map[string]any{"format": "yaml", "text": "a: 1", "delimiter": ";"}, registry.CodeInvalidArguments, []string{"csv only"}},
		{"header for jsonl", map[string]any{"format": "jsonl", "text": "1", "header": true}, registry.CodeInvalidArguments, []string{"csv and tsv only"}},
		{"quote as delimiter", map[string]any{"format": "csv", "text": "a", "delimiter": `"`}, registry.CodeInvalidArguments, []string{"cannot separate"}},
		{"long delimiter", map[string]any{"format": "csv", "text": "a", "delimiter": ";;"}, registry.CodeInvalidArguments, []string{"delimiter"}},
		{"unknown format", map[string]any{"format": "xml", "text": "<a/>"}, registry.CodeInvalidArguments, []string{"format"}},
		{"extra argument", map[string]any{"format": "csv", "text": "a", "sheet": 1}, registry.CodeInvalidArguments, []string{"sheet"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := h.fail(c.args)
			all := err.Message + " | " + err.Suggestion
			if err.Code != c.code {
				t.Errorf("code %s, want %s (%s)", err.Code, c.code, all)
			}
			for _, w := range c.want {
				if !strings.Contains(all, w) {
					t.Errorf("%q lacks %q", all, w)
				}
			}
			if err.Suggestion == "" {
				t.Errorf("no suggestion: %+v", err)
			}
		})
	}
}

// Rows are checked as one array, one level deeper than each: a row as
// deep as JSON may be is still accepted.
func TestJSONLDeepestRow(t *testing.T) {
	deep := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	args, _ := json.Marshal(map[string]any{"format": "jsonl", "text": "[1]\n" + deep + "\n"})
	out, err := Tools(Options{})[0].Handler.Run(context.Background(), &registry.Request{Name: "data__parse", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(*Result); len(r.Rows) != 2 || string(r.Rows[1].(json.RawMessage)) != deep {
		t.Errorf("%d rows", len(r.Rows))
	}
}

// Keys that collide only once merged in are found in a Go map; which
// one the error names must not depend on the map's order.
func TestYAMLKeyErrorsAreDeterministic(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	text := "b: &b {1: x, 2: x, 3: x, 4: x}\nm:\n  <<: *b\n  4.0: y\n  3.0: y\n  2.0: y\n"
	for range 50 {
		err := h.fail(map[string]any{"format": "yaml", "text": text})
		if !strings.Contains(err.Message, `mapping key "2" defined twice`) {
			t.Fatalf("%s", err.Message)
		}
	}
}

func TestRowLimitsAndPaging(t *testing.T) {
	var csvText, jsonlText, yamlText strings.Builder
	csvText.WriteString("n,sq\n")
	for i := range 2500 {
		fmt.Fprintf(&csvText, "%d,%d\n", i, i*i)
		fmt.Fprintf(&jsonlText, "{\"n\":%d}\n", i)
		if i < 30 {
			fmt.Fprintf(&yamlText, "---\nn: %d\n", i)
		}
	}
	h := newHarness(t, Options{MaxRows: 2000}, 1<<20)

	// The default is 1000 rows.
	r, _ := h.ok(map[string]any{"format": "csv", "text": csvText.String()})
	if r.RowCount != 1000 || !r.Truncated || r.NextOffset == nil || *r.NextOffset != 1000 || !strings.Contains(r.Reason, "1000 rows") {
		t.Errorf("default limit: %d rows, truncated %v, next %v, reason %q", r.RowCount, r.Truncated, r.NextOffset, r.Reason)
	}
	// maxRows above the hard cap is refused by the schema.
	if err := h.fail(map[string]any{"format": "csv", "text": "a", "maxRows": 2001}); err.Code != registry.CodeInvalidArguments {
		t.Errorf("maxRows over the cap: %+v", err)
	}
	// Exactly as many rows as there are is not truncated.
	r, _ = h.ok(map[string]any{"format": "jsonl", "text": jsonlText.String(), "offset": 500, "maxRows": 2000})
	if r.RowCount != 2000 || r.Truncated || r.Offset != 500 {
		t.Errorf("offset 500: %d rows, truncated %v", r.RowCount, r.Truncated)
	}
	if first := r.Rows[0].(map[string]any)["n"]; first != float64(500) {
		t.Errorf("first row after offset 500 is %v", first)
	}
	// Paging with nextOffset visits every row once, in order.
	for _, format := range []string{"csv", "jsonl", "yaml"} {
		text := map[string]string{"csv": csvText.String(), "jsonl": jsonlText.String(), "yaml": yamlText.String()}[format]
		want := map[string]int{"csv": 2500, "jsonl": 2500, "yaml": 30}[format]
		page := map[string]int{"csv": 97, "jsonl": 97, "yaml": 7}[format]
		seen, offset, pages := 0, 0, 0
		for {
			r, _ := h.ok(map[string]any{"format": format, "text": text, "offset": offset, "maxRows": page + seen%3})
			pages++
			for _, row := range r.Rows {
				n := row.(map[string]any)["n"]
				if fmt.Sprint(n) != fmt.Sprint(seen) {
					t.Fatalf("%s: row %d has n=%v", format, seen, n)
				}
				seen++
			}
			if !r.Truncated {
				break
			}
			offset = *r.NextOffset
		}
		if seen != want || pages < want/(page+2) {
			t.Errorf("%s: paged through %d rows in %d pages, want %d", format, seen, pages, want)
		}
	}
}

func TestOutputLimitCutsRows(t *testing.T) {
	const limit = 2048
	h := newHarness(t, Options{}, limit)
	var text strings.Builder
	text.WriteString("id,payload\n")
	for i := range 200 {
		fmt.Fprintf(&text, "%d,%s\n", i, strings.Repeat("x", 40))
	}
	res := h.call(map[string]any{"format": "csv", "text": text.String()})
	if res.Status != registry.StatusOK || res.Truncated || len(res.Output) > limit {
		t.Fatalf("status %s, cut by the service %v, %d bytes", res.Status, res.Truncated, len(res.Output))
	}
	var r Result
	if err := json.Unmarshal(res.Output, &r); err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || r.RowCount == 0 || r.RowCount >= 200 || *r.NextOffset != r.RowCount || !strings.Contains(r.Reason, "output limit") {
		t.Errorf("%d rows, truncated %v, next %v, reason %q", r.RowCount, r.Truncated, r.NextOffset, r.Reason)
	}
	// A single row larger than the limit still comes back (cut by the service).
	res = h.call(map[string]any{"format": "jsonl", "text": `{"big":"` + strings.Repeat("y", 5000) + `"}`})
	if res.Status != registry.StatusOK || !res.Truncated {
		t.Errorf("oversized row: status %s truncated %v", res.Status, res.Truncated)
	}
}

func TestYAMLAliasBomb(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	bomb := `a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`
	err := h.fail(map[string]any{"format": "yaml", "text": bomb})
	if err.Code != registry.CodeTool || !strings.Contains(err.Message, "alias") {
		t.Errorf("alias bomb: %+v", err)
	}
}

func TestDefinition(t *testing.T) {
	tools := Tools(Options{})
	if len(tools) != 1 || tools[0].Name != "data__parse" || tools[0].Tier != registry.ReadOnly {
		t.Fatalf("tools: %+v", tools)
	}
	var s struct {
		AdditionalProperties *bool `json:"additionalProperties"`
		Properties           map[string]struct {
			Type        string   `json:"type"`
			Description string   `json:"description"`
			MaxLength   *int     `json:"maxLength"`
			Maximum     *float64 `json:"maximum"`
			Enum        []string `json:"enum"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(tools[0].Parameters, &s); err != nil {
		t.Fatal(err)
	}
	if s.AdditionalProperties == nil || *s.AdditionalProperties {
		t.Error("additionalProperties must be false")
	}
	for name, p := range s.Properties {
		if p.Description == "" {
			t.Errorf("%s: no description", name)
		}
		if p.Type == "string" && p.MaxLength == nil && p.Enum == nil {
			t.Errorf("%s: no maxLength", name)
		}
		if p.Type == "integer" && p.Maximum == nil {
			t.Errorf("%s: no maximum", name)
		}
	}
}

// TestYAMLValuesAsWritten: values the decoder would turn into something
// else came back changed: 123456789012345678901234567890 as
// 1.2345678901234568e+29, and !!binary as its decoded bytes, seldom text.
func TestYAMLValuesAsWritten(t *testing.T) {
	h := newHarness(t, Options{}, 1<<20)
	text := "big: 123456789012345678901234567890\n" +
		"neg: -98765432109876543210\n" +
		"small: 42\n" +
		"float: 1.5\n" +
		"max: 18446744073709551615\n" +
		"12345678901234567890123: bigkey\n" +
		"bin: !!binary gIGC\n" +
		"ref: &r 99999999999999999999999\n" +
		"again: *r\n" +
		"*r : aliased key\n"
	_, rows := h.ok(map[string]any{"format": "yaml", "text": text})
	for _, want := range []string{
		`"big":123456789012345678901234567890`, `"neg":-98765432109876543210`, `"small":42`, `"float":1.5`,
		`"max":18446744073709551615`, `"12345678901234567890123":"bigkey"`,
		`"bin":"gIGC"`, `"ref":99999999999999999999999`, `"again":99999999999999999999999`, `"99999999999999999999999":"aliased key"`,
	} {
		if !strings.Contains(rows, want) {
			t.Errorf("rows lack %s: %s", want, rows)
		}
	}
}
