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
	"strconv"
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
- yaml: each document (documents are separated by "---") is one row, so a single document is rows[0]; JSON text is valid YAML. Integers keep every digit; one beyond a 64-bit float's range (about 1.8e308) comes back as a string of its digits.
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
		if size != len(*a.Delimiter) || d == 0 || d == '"' || d == '\r' || d == '\n' || d == utf8.RuneError {
			return &registry.Error{Code: registry.CodeInvalidArguments,
				Message:    fmt.Sprintf("delimiter %q cannot separate fields", *a.Delimiter),
				Suggestion: `Use one character other than a double quote, a line break or NUL, e.g. "," ";" "|" or a tab.`}
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
		// encoding/csv's own errors begin with "csv: ".
		return registry.ToolError(fmt.Sprintf("%s: %s", format, strings.TrimPrefix(err.Error(), "csv: ")),
			`Check the delimiter: one character other than a double quote, a line break or NUL, e.g. "," ";" "|" or a tab.`)
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
	// Rows reach the model as they are, so they must meet the bar the
	// service sets for arguments: JSON every parser reads alike. They are
	// checked together, as one array: one decoder for the call, not one
	// for each line.
	all := text
	array := make([]byte, 1, len(text)+2)
	array[0] = '['
	line := 0
	var err error
	for len(text) > 0 && err == nil {
		line++
		var l string
		l, text, _ = strings.Cut(text, "\n")
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		var buf bytes.Buffer
		if cerr := json.Compact(&buf, []byte(l)); cerr != nil {
			// A line before may be at fault first.
			if ierr := interoperableRows(all, line-1, array); ierr != nil {
				return ierr
			}
			msg, r := syntaxError([]byte(l))
			hint := "Each line must hold exactly one complete JSON value (an object such as {\"a\": 1}); a value cannot span lines."
			if strings.ContainsRune("“”„‘’‚«»", r) {
				hint = "Write JSON strings in straight double quotes (\"), not typographic quotes such as “ ” or ‘ ’. " + hint
			}
			return registry.ToolError(fmt.Sprintf("jsonl: line %d: invalid JSON: %s", line, msg), hint)
		}
		if len(array) > 1 {
			array = append(array, ',')
		}
		array = append(array, buf.Bytes()...)
		err = c.add(json.RawMessage(buf.Bytes()))
	}
	if ierr := interoperableRows(all, line, array); ierr != nil {
		return ierr
	}
	return err
}

// syntaxError says where the JSON text b, which is not valid, goes wrong:
// the column (in characters, from 1) and the whole character there (see
// registry.SyntaxErrorAt). json.Compact reports no offset; json.Unmarshal,
// run again here, does. It also returns the character (0 at the end of
// the text).
func syntaxError(b []byte) (string, rune) {
	var raw json.RawMessage
	err := json.Unmarshal(b, &raw)
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		return fmt.Sprint(err), 0
	}
	at, msg := registry.SyntaxErrorAt(b, se)
	var r rune
	if at < len(b) {
		r, _ = utf8.DecodeRune(b[at:])
	}
	return fmt.Sprintf("column %d: %s", utf8.RuneCount(b[:at])+1, msg), r
}

// interoperableRows checks that the rows on the first lines of text, held
// in array as a JSON array without its "]", are I-JSON (RFC 7493), and
// otherwise names the first line that is not.
func interoperableRows(text string, lines int, array []byte) error {
	if len(array) == 1 || registry.Interoperable(append(array, ']')) == nil {
		return nil
	}
	for line := 1; line <= lines; line++ {
		var l string
		l, text, _ = strings.Cut(text, "\n")
		l = strings.TrimRight(l, "\r")
		if strings.TrimSpace(l) == "" {
			continue
		}
		if err := registry.Interoperable([]byte(l)); err != nil {
			return registry.ToolError(fmt.Sprintf("jsonl: line %d: not interoperable JSON (RFC 7493): %v", line, err),
				`Give each member name once per object, keep numbers within a 64-bit float's range (quote larger ones as strings) and escape only whole surrogate pairs (\ud83d\ude00, not a lone \ud800).`)
		}
	}
	// Only the array's own level of nesting was too deep.
	return nil
}

func parseYAML(text string, c *collector) error {
	dec := yaml.NewDecoder(strings.NewReader(text))
	for doc := 1; ; doc++ {
		// Parse first and decode the node: the decoder's checks (repeated
		// keys, aliases) are those of Decode into a value, and the node
		// still has the keys as written, with their lines.
		var n yaml.Node
		err := dec.Decode(&n)
		if err == io.EOF {
			return nil
		}
		var v any
		if err == nil {
			exact := keepAsWritten(&n, false)
			err = n.Decode(&v)
			if err == nil && exact {
				// Again, into values that keep large integers as numbers.
				// The first decode, of the whole document at once, ran
				// the decoder's checks (excessive aliasing among them),
				// which yamlValue's decodes, one for each node, cannot.
				var y *yamlValue
				err = n.Decode(&y)
				v = y.get()
			}
		}
		if err != nil {
			msg := strings.TrimPrefix(err.Error(), "yaml: ")
			if strings.Contains(msg, "invalid map key") {
				// The decoder names the key's Go type.
				msg = "a mapping key is a sequence or a mapping (a complex key such as \"? [a, b]\"), which a JSON object cannot have"
			}
			return yamlError(doc, msg)
		}
		if err := uniqueKeys(&n); err != nil {
			return yamlError(doc, err.Error())
		}
		row, err := jsonValue(v)
		if err != nil {
			return yamlError(doc, err.Error())
		}
		if err := c.add(row); err != nil {
			return err
		}
	}
}

// exactTag is the tag keepAsWritten gives a large integer it keeps as a
// number. Decoded into any, such a scalar is the string of its digits,
// which is what a mapping key (an alias of it) needs; decoded into a
// yamlValue, it is a json.Number. Only keepAsWritten's marks carry it:
// keepAsWritten retags a scalar the text itself tags so.
const exactTag = "!toolsvc/exact-integer"

// keepAsWritten retags the scalars of n whose decoded value would lose
// what the text says: !!binary (decoded to bytes that are seldom text)
// and integers past 64 bits (decoded to a float that drops digits:
// 123456789012345678901234567890 came back as 1.2345678901234568e+29).
// Binary stays the base64 text written. A large integer stays a JSON
// number with every digit (exactTag), or, as a mapping key (isKey) or
// when beyond what a 64-bit float holds, the string of its digits: a
// JSON reader fails on such a number (Go's encoding/json) or reads it as
// Infinity (JavaScript), and the service refuses it in arguments.
// (Dates and times become RFC 3339 strings, by design.) It reports
// whether it marked a large integer as a number.
func keepAsWritten(n *yaml.Node, isKey bool) (exact bool) {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == exactTag {
			// Written in the text, so a string as any unknown tag makes it.
			n.Tag = "!!str"
		}
		switch n.ShortTag() {
		case "!!binary":
			n.Tag = "!!str"
		case "!!int", "!!float":
			if !bigInteger(n.Value) {
				break
			}
			n.Tag = "!!str"
			if number := jsonInteger(n.Value); !isKey && withinFloat(number) {
				n.Tag, n.Value = exactTag, number
				return true
			}
		}
	case yaml.MappingNode:
		for i, c := range n.Content {
			exact = keepAsWritten(c, i%2 == 0) || exact
		}
	default:
		for _, c := range n.Content {
			exact = keepAsWritten(c, false) || exact
		}
	}
	return exact
}

// jsonInteger writes the decimal integer s as JSON does: no "+", no
// leading zeros (YAML's 00012345678901234567890123 is the integer
// 12345678901234567890123).
func jsonInteger(s string) string {
	sign, digits := "", strings.TrimPrefix(s, "+")
	if d, ok := strings.CutPrefix(digits, "-"); ok {
		sign, digits = "-", d
	}
	return sign + strings.TrimLeft(digits, "0")
}

// withinFloat reports whether the JSON number s is within what a 64-bit
// float holds: the bar the service sets for numbers in arguments
// (registry.Interoperable).
func withinFloat(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// yamlValue is a YAML node decoded as into any, except that the scalars
// keepAsWritten tagged exactTag are json.Numbers: a Go type of their own,
// where a mark within a string would be a string the text can write.
type yamlValue struct{ v any }

// get is the value; nil, a null, is decoded as nil. (A null in a
// sequence of yamlValue structs, which the decoder cannot set to null,
// would be left out.)
func (y *yamlValue) get() any {
	if y == nil {
		return nil
	}
	return y.v
}

// UnmarshalYAML decodes n. The decoder resolves aliases and merge keys
// ("<<") before, and calls it for each element of a sequence or mapping.
func (y *yamlValue) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == exactTag {
			y.v = json.Number(n.Value)
			return nil
		}
	case yaml.SequenceNode:
		var s []*yamlValue
		if err := n.Decode(&s); err != nil {
			return err
		}
		a := make([]any, len(s))
		for i, e := range s {
			a[i] = e.get()
		}
		y.v = a
		return nil
	case yaml.MappingNode:
		// Keyed as decoding into any keys it, so that jsonValue turns
		// the keys into the same strings.
		var err error
		if stringKeys(n) {
			y.v, err = decodeMapping[string](n)
		} else {
			y.v, err = decodeMapping[any](n)
		}
		return err
	}
	return n.Decode(&y.v)
}

// stringKeys reports whether the decoder, decoding the mapping n into
// any, makes a map[string]any: when every key is a string or "<<".
func stringKeys(n *yaml.Node) bool {
	for i := 0; i < len(n.Content); i += 2 {
		if t := n.Content[i].ShortTag(); t != "!!str" && t != "!!merge" {
			return false
		}
	}
	return true
}

func decodeMapping[K comparable](n *yaml.Node) (map[K]any, error) {
	var m map[K]*yamlValue
	if err := n.Decode(&m); err != nil {
		return nil, err
	}
	out := make(map[K]any, len(m))
	for k, e := range m {
		out[k] = e.get()
	}
	return out, nil
}

// bigInteger reports whether s is a decimal integer too large for int64
// and uint64.
func bigInteger(s string) bool {
	digits := strings.TrimLeft(s, "+-")
	if len(digits) < 19 || len(s)-len(digits) > 1 || strings.Trim(digits, "0123456789") != "" {
		return false
	}
	if _, err := strconv.ParseInt(s, 10, 64); err == nil {
		return false
	}
	_, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 10, 64)
	return err != nil
}

func yamlError(doc int, msg string) error {
	return registry.ToolError(fmt.Sprintf("yaml document %d: %s", doc, msg),
		"Fix the YAML at that line: check indentation (spaces, not tabs), quoting and that every mapping key appears once.")
}

// uniqueKeys refuses a mapping two of whose keys become the same JSON
// object key, such as 1 and 1.0, or null and ~. The decoder refuses only
// keys written alike; others it either keeps apart in a map[any]any, to
// collide when jsonValue turns them into strings, or, when they are equal
// values (1 and 0x1), silently keeps the last.
func uniqueKeys(n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, e := range n.Content {
			if err := uniqueKeys(e); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		if err := mappingKeys(n); err != nil {
			return err
		}
		for i := 1; i < len(n.Content); i += 2 {
			if err := uniqueKeys(n.Content[i]); err != nil {
				return err
			}
		}
	}
	// Aliases are checked where their anchor is.
	return nil
}

func mappingKeys(n *yaml.Node) error {
	plain := true
	for i := 0; i < len(n.Content); i += 2 {
		// An alias key may repeat a string key, unseen by the decoder.
		if k := n.Content[i]; k.Kind == yaml.AliasNode || k.ShortTag() != "!!str" && !isMerge(k) {
			plain = false
			break
		}
	}
	if plain {
		// String keys stay as written, and the decoder refused repeats.
		return nil
	}
	type first struct {
		line    int
		written string
	}
	seen := make(map[string]first, len(n.Content)/2)
	for i := 0; i < len(n.Content); i += 2 {
		k := n.Content[i]
		if isMerge(k) {
			continue
		}
		written := k.Value
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			written = "*" + k.Value
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: a mapping key is a sequence or a mapping, which a JSON object cannot have", n.Content[i].Line)
		}
		var v any
		if err := k.Decode(&v); err != nil {
			return errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
		}
		s, err := keyString(v)
		if err != nil {
			return fmt.Errorf("line %d: mapping key %s: %v", n.Content[i].Line, registry.Clip(written, 40), err)
		}
		if f, ok := seen[s]; ok {
			return fmt.Errorf("line %d: mapping key %q already defined at line %d (%s and %s are both the JSON object key %q)",
				n.Content[i].Line, s, f.line, registry.Clip(f.written, 40), registry.Clip(written, 40), s)
		}
		seen[s] = first{n.Content[i].Line, written}
	}
	return nil
}

// isMerge reports whether k is the merge key "<<" (as the decoder has it).
func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.ShortTag() == "!!merge")
}

// keyString is the JSON object key for a decoded YAML mapping key: the
// key as jsonValue and encoding/json write the same scalar as a value
// (null, true, 1.5, RFC 3339 timestamps), without a string's quotes.
func keyString(k any) (string, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case map[string]any, map[any]any, []any:
		return "", errors.New("a mapping key is a sequence or a mapping, which a JSON object cannot have")
	}
	v, err := jsonValue(k)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	if b[0] != '"' {
		return string(b), nil
	}
	var s string
	err = json.Unmarshal(b, &s)
	return s, err
}

// jsonValue turns a decoded YAML value into one encoding/json can encode:
// non-string keys become strings (keyString), and infinities and NaN
// become the strings YAML writes them as.
func jsonValue(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			x[k] = e
		}
		return x, nil
	case map[any]any:
		m := make(map[string]any, len(x))
		// uniqueKeys has refused keys that collide as written; keys that
		// collide here came in through a merge key ("<<"). Name the least
		// one, so the error does not depend on the map's order.
		var dup *string
		for k, e := range x {
			s, err := keyString(k)
			if err != nil {
				return nil, err
			}
			if _, ok := m[s]; ok {
				if dup == nil || s < *dup {
					dup = &s
				}
				continue
			}
			if m[s], err = jsonValue(e); err != nil {
				return nil, err
			}
		}
		if dup != nil {
			return nil, fmt.Errorf("mapping key %q defined twice: two keys of one mapping, one of them merged in with \"<<\", are both the JSON object key %q", *dup, *dup)
		}
		return m, nil
	case []any:
		for i, e := range x {
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			x[i] = e
		}
		return x, nil
	case float64:
		switch {
		case math.IsNaN(x):
			return ".nan", nil
		case math.IsInf(x, 1):
			return ".inf", nil
		case math.IsInf(x, -1):
			return "-.inf", nil
		}
	case []byte:
		return string(x), nil
	}
	return v, nil
}
