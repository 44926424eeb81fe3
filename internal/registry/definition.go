package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Annotations are the MCP behaviour hints of a tool.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// Definition is what a model and an operator see of a tool.
type Definition struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is a JSON Schema whose root is type: object.
	Parameters json.RawMessage `json:"parameters"`
	// OutputSchema, when set, is a JSON Schema (root type: object) that
	// every successful output must match; a mismatch is an E_TOOL result
	// naming the tool as faulty. It is served as MCP's outputSchema.
	OutputSchema      json.RawMessage `json:"outputSchema,omitempty"`
	Tier              Tier            `json:"tier"`
	Timeout           time.Duration   `json:"-"`
	MaxOutputBytes    int             `json:"maxOutputBytes"`
	ErrorMessageLimit int             `json:"errorMessageLimit"`
	// MaxConcurrency bounds the calls of this tool running at once (429
	// beyond); 0 leaves only the service-wide limit.
	MaxConcurrency int          `json:"maxConcurrency,omitempty"`
	Annotations    *Annotations `json:"annotations,omitempty"`
	Tags           []string     `json:"tags,omitempty"`
	// Type says what backs the tool ("builtin", "exec", "http", "mcp"); it
	// becomes the gen_ai.tool.type of traces.
	Type string `json:"type,omitempty"`
	// Source says where the tool was declared ("file.yaml:12"), for errors.
	Source string `json:"-"`
}

// MarshalJSON adds timeoutMs to the wire form.
func (d Definition) MarshalJSON() ([]byte, error) {
	type plain Definition
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // descriptions are read by models, not browsers
	err := enc.Encode(struct {
		plain
		TimeoutMs int64 `json:"timeoutMs"`
	}{plain(d), d.Timeout.Milliseconds()})
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), err
}

// Request is what a tool's handler receives: arguments already decoded and
// validated against the tool's schema.
type Request struct {
	// Name is the tool name the call asked for.
	Name string
	// CallID is the call's toolCallId.
	CallID string
	// Arguments is the validated arguments object.
	Arguments json.RawMessage
	Context   CallContext
	// MaxOutputBytes is the output limit; tools that stream data (files,
	// processes, HTTP bodies) should bound what they capture by it.
	MaxOutputBytes int
	// Deadline is when the call's timeout expires.
	Deadline time.Time
	// Caller is who made the call. Tools that make calls of their own
	// (plan__execute) make them as this caller, so each is checked by
	// policy as if the caller had made it.
	Caller *Caller
	// Catalog is the call's own narrowing of the caller's catalog (empty:
	// none); tools that make calls of their own pass it on.
	Catalog []string

	// spiller keeps cut streams (nil: none are kept); cut is the whole
	// output's size a tool reported with ReportTruncated (0: none).
	spiller *Spiller
	cut     int64
	// recorded says the call has a record, to which its spills belong.
	recorded bool
	// reg is the registry the call was looked up in (nil in tests that
	// build requests by hand).
	reg *Registry
	// sinks are the spills the handler started, given up when it returns
	// (dropSpills) if it did not close them itself.
	sinksMu sync.Mutex
	sinks   []*SpillSink
	// after is what the handler left to run once the executor is done
	// with its output (AfterOutput); settles says an executor runs the
	// request and will (settle), settled that it has.
	afterMu sync.Mutex
	after   []func()
	settles bool
	settled bool
}

// AfterOutput runs f once the executor is done with the handler's output:
// encoded, cut, and its whole text kept in the spill store, or given up
// when the call ended otherwise. A tool whose output is large holds what
// made it until then (the worker pool, its worker slot), so that the
// outputs waiting to be encoded are bounded as the outputs being made are,
// not by the calls in flight. On a request no executor runs (built by
// hand), or one its executor is done with (an abandoned handler that
// returned late), f runs at once.
func (r *Request) AfterOutput(f func()) {
	r.afterMu.Lock()
	if !r.settles || r.settled {
		r.afterMu.Unlock()
		f()
		return
	}
	r.after = append(r.after, f)
	r.afterMu.Unlock()
}

// settle runs what the handler left to AfterOutput; the executor calls it
// once, when it is done with the output.
func (r *Request) settle() {
	r.afterMu.Lock()
	after := r.after
	r.after, r.settled = nil, true
	r.afterMu.Unlock()
	for _, f := range after {
		f()
	}
}

// Bind decodes the arguments into v. A number the schema accepted as an
// integer but written as 2.0 or 1e2 (JSON Schema counts both as integers)
// is read as the integer it is.
func (r *Request) Bind(v any) error {
	err := json.Unmarshal(r.Arguments, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && strings.HasPrefix(te.Value, "number") {
		if args, ok := integralNumbers(r.Arguments); ok {
			err = json.Unmarshal(args, v)
		}
	}
	if err != nil {
		return &Error{Code: CodeInvalidArguments, Message: "arguments: " + bindError(err)}
	}
	return nil
}

// integralNumbers rewrites the integral numbers of args that are written
// with a fraction or an exponent (2.0, 1e2) as plain integers; ok is false
// when there is none.
func integralNumbers(args json.RawMessage) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return nil, false
	}
	changed := false
	var walk func(any) any
	walk = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				v[k] = walk(e)
			}
		case []any:
			for i, e := range v {
				v[i] = walk(e)
			}
		case json.Number:
			if !strings.ContainsAny(string(v), ".eE") {
				return v
			}
			f, _, err := big.ParseFloat(string(v), 10, 256, big.ToNearestEven)
			if err != nil || !f.IsInt() || f.MantExp(nil) > 64 {
				return v
			}
			i, _ := f.Int(nil)
			changed = true
			return json.Number(i.String())
		}
		return v
	}
	v = walk(v)
	if !changed {
		return nil, false
	}
	out, err := json.Marshal(v)
	return out, err == nil
}

// bindError says what did not fit in the words of JSON, not of Go types.
func bindError(err error) string {
	if msg, ok := JSONTypeError(err); ok {
		return msg
	}
	return err.Error()
}

// JSONTypeError says, in JSON's words, which member of a decoded document
// did not have the type it should ("limit must be an integer, not number
// 2.5"); ok is false when err is not a type error naming a member.
func JSONTypeError(err error) (msg string, ok bool) {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return "", false
	}
	want := "a " + te.Type.Kind().String()
	switch te.Type.Kind() {
	case reflect.String:
		want = "a string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "an integer"
	case reflect.Float32, reflect.Float64:
		want = "a number"
	case reflect.Bool:
		want = "a boolean"
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		want = "an object"
	}
	return fmt.Sprintf("%s must be %s, not %s", te.Field, want, te.Value), true
}

// Handler runs a tool. It only computes: the executor has already looked the
// tool up, validated the arguments, applied policy and set the timeout.
// The output is marshalled to JSON; a string output stays a JSON string.
type Handler interface {
	Run(ctx context.Context, req *Request) (any, error)
}

// Func adapts a function to Handler.
type Func func(ctx context.Context, req *Request) (any, error)

// Run implements Handler.
func (f Func) Run(ctx context.Context, req *Request) (any, error) { return f(ctx, req) }

// Tool is a definition and the handler that runs it.
type Tool struct {
	Definition
	Handler Handler
	// Nests says that the handler runs calls of its own through the
	// executor while it runs (plan__execute), and that what it does, those
	// calls do. Those calls may use the concurrency slot the tool's call
	// holds, so a full service cannot leave them waiting on the very slot
	// their parent keeps. They are recorded each under an id of their own
	// that the handler derives from its call's, and the tool's call itself
	// is not recorded (unless it waits for approval, or asks to be): a
	// repeat of it repeats its calls, which answer from their records
	// where they ran, and run where they did not (a plan stopped by its
	// deadline, a restart or a rate limit goes on where it stopped).
	Nests bool
	// Normalize, when set, rewrites arguments that have several spellings
	// of one meaning ("./notes//todo.md", which the tool reads as
	// "notes/todo.md") into the spelling the tool uses. It runs on valid
	// arguments before policy, so rules, approvers, the record and the
	// tool all see the call the tool makes; it reports whether it changed
	// anything and leaves what the tool would refuse as it is.
	Normalize func(args map[string]any) bool

	schema *jsonschema.Schema
	// output is the compiled OutputSchema (nil without one).
	output *jsonschema.Schema
	// suggestion renders, on first use, the example call that
	// E_INVALID_ARGUMENTS suggests.
	suggestion func() string
	// strict computes, on first use, the strict form of the parameters.
	strict func() *StrictForm
	// provider computes, on first use, the parameters in the form OpenAI
	// and Anthropic take.
	provider func() json.RawMessage
	// spanName and lowerName are computed once, at registration.
	spanName  string
	lowerName string
	// slots bound the calls running at once (MaxConcurrency); nil when
	// the tool has no limit of its own.
	slots chan struct{}
}

// Schema returns the compiled parameters schema (nil before registration).
func (t *Tool) Schema() *jsonschema.Schema { return t.schema }
