// Package data provides data__parse, which turns CSV, TSV, JSON Lines and
// YAML text into JSON rows a model can read, with bounded input and
// output and errors that name the line at fault.
package data

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// Resource is the resource part of the data tools' names.
const Resource = "data"

// The defaults of Options.
const (
	DefaultMaxInputBytes = 1 << 20
	DefaultMaxRows       = 10000
	// DefaultRows is how many rows a call returns when it does not say.
	DefaultRows = 1000
)

// Options configure the data tools.
type Options struct {
	// MaxInputBytes bounds the text one call parses (default 1 MiB).
	MaxInputBytes int
	// MaxRows is the most rows a call may ask for (default 10000); a call
	// that does not say gets min(1000, MaxRows).
	MaxRows int
	// Timeout is the tools' timeout; zero leaves the registry default.
	Timeout time.Duration
	// MaxOutputBytes is the tools' output limit; zero leaves the registry
	// default. Rows that would not fit are left for a next call (offset).
	MaxOutputBytes int
}

func (o Options) withDefaults() Options {
	if o.MaxInputBytes <= 0 {
		o.MaxInputBytes = DefaultMaxInputBytes
	}
	if o.MaxRows <= 0 {
		o.MaxRows = DefaultMaxRows
	}
	return o
}

// Tools returns the data tools.
func Tools(o Options) []*registry.Tool {
	p := &parser{o: o.withDefaults()}
	return []*registry.Tool{p.tool()}
}

type parser struct {
	o Options
}

func (p *parser) defaultRows() int { return min(DefaultRows, p.o.MaxRows) }

func (p *parser) tool() *registry.Tool {
	desc := fmt.Sprintf(`Parse CSV, TSV, JSON Lines or YAML text into JSON rows.
- csv and tsv: with header (default true) the first row names the columns and every other row becomes an object keyed by them, in column order (empty names become "column_N", repeated ones get "_2", "_3"); without header every row is an array of strings. Values are always strings. Quoted fields ("a, b", "say ""hi""") follow RFC 4180; delimiter picks another single-character separator for csv (e.g. ";").
- jsonl: one JSON value per line; blank lines are skipped.
- yaml: each document (documents are separated by "---") is one row, so a single document is rows[0]; JSON text is valid YAML.
Input is at most %d bytes. At most maxRows rows (default %d, at most %d) are returned, fewer when the output limit is reached; then truncated is true and nextOffset is the offset to pass to get the following rows. Malformed input fails with the line (and column) at fault.`,
		p.o.MaxInputBytes, p.defaultRows(), p.o.MaxRows)
	schema := fmt.Sprintf(`{
  "type": "object",
  "additionalProperties": false,
  "required": ["text", "format"],
  "properties": {
    "text": {"type": "string", "maxLength": %d, "description": "The data to parse."},
    "format": {"type": "string", "enum": ["csv", "tsv", "jsonl", "yaml"], "description": "The format of text: \"csv\" (comma-separated values), \"tsv\" (tab-separated), \"jsonl\" (JSON Lines: one JSON value per line) or \"yaml\"."},
    "header": {"type": "boolean", "description": "csv and tsv only: whether the first row holds column names (default true). With it rows are objects keyed by column name, without it arrays."},
    "delimiter": {"type": "string", "minLength": 1, "maxLength": 1, "description": "csv only: the single character that separates fields (default \",\"), e.g. \";\" or \"|\"."},
    "maxRows": {"type": "integer", "minimum": 1, "maximum": %d, "description": "Most rows to return (default %d)."},
    "offset": {"type": "integer", "minimum": 0, "maximum": 100000000, "default": 0, "description": "Data rows (or yaml documents) to skip before the first one returned; use nextOffset from a truncated result."}
  }
}`, p.o.MaxInputBytes, p.o.MaxRows, p.defaultRows())
	yes, no := true, false
	return &registry.Tool{
		Definition: registry.Definition{
			Name:        registry.JoinName(Resource, "parse"),
			Description: desc,
			Parameters:  json.RawMessage(schema),
			OutputSchema: json.RawMessage(`{"type": "object", "required": ["format", "rows", "rowCount", "offset", "truncated"],
  "properties": {"format": {"type": "string"}, "columns": {"type": "array", "items": {"type": "string"}},
    "rows": {"type": "array"}, "rowCount": {"type": "integer"}, "offset": {"type": "integer"},
    "truncated": {"type": "boolean"}, "reason": {"type": "string"}, "nextOffset": {"type": "integer"}}}`),
			Tier:           registry.ReadOnly,
			Timeout:        p.o.Timeout,
			MaxOutputBytes: p.o.MaxOutputBytes,
			Annotations:    &registry.Annotations{ReadOnlyHint: &yes, IdempotentHint: &yes, OpenWorldHint: &no},
			Tags:           []string{"data"},
			Type:           "builtin",
		},
		Handler: registry.Func(p.parse),
	}
}

type parseArgs struct {
	Text      string  `json:"text"`
	Format    string  `json:"format"`
	Header    *bool   `json:"header"`
	Delimiter *string `json:"delimiter"`
	MaxRows   int     `json:"maxRows"`
	Offset    int     `json:"offset"`
}

// Result is the output of data__parse.
type Result struct {
	Format string `json:"format"`
	// Columns are the header's column names (csv and tsv with header).
	Columns  []string `json:"columns,omitempty"`
	Rows     []any    `json:"rows"`
	RowCount int      `json:"rowCount"`
	// Offset is the index of the first returned row.
	Offset    int    `json:"offset"`
	Truncated bool   `json:"truncated"`
	Reason    string `json:"reason,omitempty"`
	// NextOffset is the offset of the first row not returned.
	NextOffset *int `json:"nextOffset,omitempty"`
}

// collector gathers rows within the row and output limits.
type collector struct {
	ctx    context.Context
	res    *Result
	skip   int // rows still to skip
	limit  int
	budget int // output bytes left; -1 is unbounded
	index  int // index of the next row seen
}

// add takes one parsed row. It returns errFull once no more rows fit;
// the row that did not fit is then the next offset.
func (c *collector) add(row any) error {
	if c.index%256 == 0 {
		if err := c.ctx.Err(); err != nil {
			return err
		}
	}
	if c.skip > 0 {
		c.skip--
		c.index++
		return nil
	}
	if len(c.res.Rows) >= c.limit {
		return c.full(fmt.Sprintf("more than %d rows; pass offset %d for the next ones", c.limit, c.index))
	}
	if c.budget >= 0 {
		b, err := json.Marshal(row)
		if err != nil {
			return err
		}
		if len(b)+1 > c.budget {
			if len(c.res.Rows) == 0 {
				// A row must come back even when it alone is too large;
				// the service's output limit then cuts it.
				c.budget = 0
			} else {
				return c.full(fmt.Sprintf("output limit reached; pass offset %d for the next rows", c.index))
			}
		} else {
			c.budget -= len(b) + 1
		}
	}
	c.res.Rows = append(c.res.Rows, row)
	c.index++
	return nil
}

var errFull = errors.New("rows full")

func (c *collector) full(reason string) error {
	next := c.index
	c.res.Truncated, c.res.Reason, c.res.NextOffset = true, reason, &next
	return errFull
}

func (p *parser) parse(ctx context.Context, req *registry.Request) (any, error) {
	var a parseArgs
	if err := req.Bind(&a); err != nil {
		return nil, err
	}
	if len(a.Text) > p.o.MaxInputBytes {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("text is %d bytes; the limit is %d", len(a.Text), p.o.MaxInputBytes),
			Suggestion: "Parse the data in parts of at most that size, each with its header line."}
	}
	if a.Delimiter != nil && a.Format != "csv" {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("delimiter applies to format csv only, not %s", a.Format),
			Suggestion: `Leave delimiter out, or use format "csv" with it.`}
	}
	if a.Header != nil && a.Format != "csv" && a.Format != "tsv" {
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message:    fmt.Sprintf("header applies to formats csv and tsv only, not %s", a.Format),
			Suggestion: "Leave header out for jsonl and yaml."}
	}
	limit := p.defaultRows()
	if a.MaxRows > 0 {
		limit = min(a.MaxRows, p.o.MaxRows)
	}
	res := &Result{Format: a.Format, Rows: []any{}, Offset: a.Offset}
	c := &collector{ctx: ctx, res: res, skip: a.Offset, limit: limit, budget: -1}
	if req.MaxOutputBytes > 0 {
		c.budget = max(req.MaxOutputBytes-512, 64)
	}
	var err error
	switch a.Format {
	case "csv", "tsv":
		err = p.parseCSV(a, c)
	case "jsonl":
		err = parseJSONL(a.Text, c)
	case "yaml":
		err = parseYAML(a.Text, c)
	default:
		return nil, &registry.Error{Code: registry.CodeInvalidArguments,
			Message: fmt.Sprintf("unknown format %q", a.Format), Suggestion: `Use "csv", "tsv", "jsonl" or "yaml".`}
	}
	if err != nil && !errors.Is(err, errFull) {
		return nil, err
	}
	res.RowCount = len(res.Rows)
	return res, nil
}

func (p *parser) parseCSV(a parseArgs, c *collector) error {
	name := a.Format
	text := strings.TrimPrefix(a.Text, "\uFEFF")
	r := csv.NewReader(strings.NewReader(text))
	r.FieldsPerRecord = -1
	if a.Format == "tsv" {
		r.Comma = '\t'
		r.LazyQuotes = true
	}
	if a.Delimiter != nil {
		d, size := utf8.DecodeRuneInString(*a.Delimiter)
		if size != len(*a.Delimiter) || d == '"' || d == '\r' || d == '\n' || d == utf8.RuneError {
			return &registry.Error{Code: registry.CodeInvalidArguments,
				Message:    fmt.Sprintf("delimiter %q cannot separate fields", *a.Delimiter),
				Suggestion: `Use one character other than a double quote or a line break, e.g. "," ";" "|" or a tab.`}
		}
		r.Comma = d
	}
	header := a.Header == nil || *a.Header
	var columns []string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return csvError(name, err)
		}
		if header && columns == nil {
			columns = columnNames(rec)
			c.res.Columns = columns
			continue
		}
		if !header {
			if err := c.add(rec); err != nil {
				return err
			}
			continue
		}
		if len(rec) != len(columns) {
			line, _ := r.FieldPos(0)
			return registry.ToolError(
				fmt.Sprintf("%s: line %d: row has %d fields but the header has %d", name, line, len(rec), len(columns)),
				delimiterHint(name, a)+" Every row needs as many fields as the header; quote fields that contain the delimiter, or pass header: false to get rows as arrays.")
		}
		if err := c.add(row{columns, rec}); err != nil {
			return err
		}
	}
}

func delimiterHint(format string, a parseArgs) string {
	if format != "csv" {
		return "Check that fields are separated by tabs."
	}
	if a.Delimiter != nil {
		return fmt.Sprintf("Check that fields are separated by %q.", *a.Delimiter)
	}
	return `Check the delimiter: the default is ","; pass delimiter for another one (e.g. ";").`
}

func csvError(format string, err error) error {
	var pe *csv.ParseError
	if !errors.As(err, &pe) {
		return registry.ToolError(fmt.Sprintf("%s: %v", format, err), "")
	}
	hint := "Fix the input at that place."
	switch {
	case errors.Is(pe.Err, csv.ErrQuote), errors.Is(pe.Err, csv.ErrBareQuote):
		hint = `Enclose a field that contains a double quote in double quotes and double the quotes inside it: "say ""hi""".`
	}
	return registry.ToolError(fmt.Sprintf("%s: line %d, column %d: %v", format, pe.Line, pe.Column, pe.Err), hint)
}

// columnNames makes header names usable as object keys: never empty and
// never repeated.
func columnNames(rec []string) []string {
	names := make([]string, len(rec))
	seen := map[string]int{}
	for i, n := range rec {
		if strings.TrimSpace(n) == "" {
			n = fmt.Sprintf("column_%d", i+1)
		}
		if k := seen[n]; k > 0 {
			for {
				k++
				cand := fmt.Sprintf("%s_%d", n, k)
				if seen[cand] == 0 {
					seen[n] = k
					n = cand
					break
				}
			}
		}
		seen[n]++
		names[i] = n
	}
	return names
}

// row is a record keyed by column names, encoded in column order.
type row struct {
	columns, values []string
}

// MarshalJSON encodes the row as an object in column order.
func (r row) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range r.columns {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(c)
		v, _ := json.Marshal(r.values[i])
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func parseJSONL(text string, c *collector) error {
	// A byte order mark is not JSON, and the error would name a character
	// the model cannot see in its text.
	text = strings.TrimPrefix(text, "\uFEFF")
	line := 0
	for len(text) > 0 {
		line++
		var l string
		l, text, _ = strings.Cut(text, "\n")
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, []byte(l)); err != nil {
			msg := err.Error()
			var se *json.SyntaxError
			if errors.As(err, &se) {
				msg = fmt.Sprintf("column %d: %v", se.Offset, err)
			}
			return registry.ToolError(fmt.Sprintf("jsonl: line %d: invalid JSON: %s", line, msg),
				"Each line must hold exactly one complete JSON value (an object such as {\"a\": 1}); a value cannot span lines.")
		}
		if err := c.add(json.RawMessage(buf.Bytes())); err != nil {
			return err
		}
	}
	return nil
}

func parseYAML(text string, c *collector) error {
	dec := yaml.NewDecoder(strings.NewReader(text))
	for doc := 1; ; doc++ {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			if strings.Contains(msg, "invalid map key") {
				// The decoder names the key's Go type.
				msg = "a mapping key is a sequence or a mapping (a complex key such as \"? [a, b]\"), which a JSON object cannot have"
			}
			return registry.ToolError(fmt.Sprintf("yaml document %d: %s", doc, msg),
				"Fix the YAML at that line: check indentation (spaces, not tabs), quoting and that every mapping key appears once.")
		}
		if err := c.add(jsonValue(v)); err != nil {
			return err
		}
	}
}

// jsonValue turns a decoded YAML value into one encoding/json can encode:
// non-string keys become strings, and infinities and NaN become the
// strings YAML writes them as.
func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonValue(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonValue(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonValue(e)
		}
		return x
	case float64:
		switch {
		case math.IsNaN(x):
			return ".nan"
		case math.IsInf(x, 1):
			return ".inf"
		case math.IsInf(x, -1):
			return "-.inf"
		}
	case []byte:
		return string(x)
	}
	return v
}
