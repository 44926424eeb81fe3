package http

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// wireCall is every body shape POST /calls accepts: the native call, an
// OpenAI tool call, an OpenAI Responses function_call item, an Anthropic
// tool_use block, or a Gemini functionCall part.
type wireCall struct {
	registry.Call
	// OpenAI: {"id", "type": "function", "function": {"name", "arguments"}}.
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
	// Anthropic: {"type": "tool_use", "id", "name", "input"}.
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// OpenAI Responses: {"type": "function_call", "call_id", "name",
	// "arguments"}; arguments land in Call.Arguments.
	CallID string `json:"call_id"`
	// Gemini: {"functionCall": {"id", "name", "args"}}.
	FunctionCall *struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
}

// decodeCall reads one call in any accepted shape. When the call is an
// object that cannot be read, it also returns what could be read of it (its
// id, for a batch to answer in the right slot).
//
// A native call must hold only members toolsvc knows, so that a misspelt
// one ("args") is refused with the member it meant rather than silently
// dropped. Bodies in a model provider's own shape keep the provider's other
// members (a Gemini part's thoughtSignature, an item's status). In every
// shape, a member toolsvc reads must be given once and in the contract's
// case (see shape.check), and a call is in one shape only: a provider's
// body may not also carry the tool's name, arguments or id in another's
// (see callForm.mixed).
func decodeCall(raw []byte, maxDepth int) (*registry.Call, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, problem(kindInvalidCall, "a call must be a JSON object")
	}
	e, others, present := callShape.checkPresent(raw)
	if e != nil {
		// Nothing of the call is echoed: which of two ids would it be?
		if e.twice() {
			return nil, problem(kindInvalidCall, e.detail("the call"))
		}
		return nil, problem(kindUnknownMember, e.detail("the call"))
	}
	var w wireCall
	var uerr error
	unknown := ""
	if !others {
		// Every member is one the call has: read in place. A Decoder
		// copies the body into buffers it doubles as it reads, about
		// twice the body in garbage (2 MB of the 14 MB a call of 1 MB
		// allocated: BenchmarkBigWrite).
		uerr = json.Unmarshal(raw, &w)
	} else {
		// The decoder reports the first unknown member or type mismatch
		// and still fills the other fields.
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		uerr = dec.Decode(&w)
		unknown = unknownMember(uerr)
		if unknown != "" {
			// Read again without the check: a model-shaped body may carry
			// members of its provider's own.
			w = wireCall{}
			uerr = json.Unmarshal(raw, &w)
		}
	}
	c := w.Call
	native := false
	var form *callForm
	switch {
	case w.Type == "function" && w.Function != nil:
		form = &openAIForm
		c.ToolName, c.Arguments = w.Function.Name, w.Function.Arguments
		if c.ToolCallID == "" {
			c.ToolCallID = w.ID
		}
	case w.Type == "tool_use":
		form = &anthropicForm
		c.ToolName, c.Arguments = w.Name, w.Input
		if c.ToolCallID == "" {
			c.ToolCallID = w.ID
		}
	case w.Type == "function_call":
		form = &responsesForm
		c.ToolName = w.Name
		if c.ToolCallID == "" {
			c.ToolCallID = w.CallID
		}
	case w.FunctionCall != nil:
		form = &geminiForm
		c.ToolName, c.Arguments = w.FunctionCall.Name, w.FunctionCall.Args
		if c.ToolCallID == "" {
			c.ToolCallID = w.FunctionCall.ID
		}
	default:
		native = true
		if unknown == "" {
			unknown = w.modelMember()
		}
	}
	if form != nil {
		if detail := form.mixed(present); detail != "" {
			// Nothing of the call is echoed: which of two names or ids
			// would it be?
			return nil, problem(kindInvalidCall, detail)
		}
	}
	// The id is checked before anything is answered: no answer, and no
	// audit line, may echo an id that fails the check.
	badID := badCallID(c.ToolCallID, raw)
	if badID != "" {
		c.ToolCallID = ""
	}
	if native && unknown != "" {
		return &c, problem(kindUnknownMember, unknownMemberDetail(unknown))
	}
	if uerr != nil {
		return &c, problem(kindInvalidCall, "the call does not have the expected shape: "+shapeError(uerr))
	}
	if err := checkStringArguments(c.Arguments, maxDepth); err != nil {
		return &c, err
	}
	if c.ToolName == "" {
		return &c, problem(kindMissingToolName, `the call names no tool; send {"toolName": "...", "arguments": {...}}, an OpenAI tool call or function_call item, an Anthropic tool_use block or a Gemini functionCall part`)
	}
	if badID != "" {
		return &c, problem(kindInvalidCall, "toolCallId "+badID)
	}
	if msg := badContext(&c.Context, raw); msg != "" {
		return &c, problem(kindInvalidCall, msg)
	}
	if c.TimeoutMs < 0 {
		return &c, problem(kindInvalidCall, fmt.Sprintf("timeoutMs is %d; it is a number of milliseconds, at least 1 (leave it out, or send 0, for the tool's own timeout)", c.TimeoutMs))
	}
	return &c, nil
}

// callForm is a model provider's shape of a call.
type callForm struct {
	what string // "an OpenAI tool call"
	// The members that carry the tool's name, the arguments and the
	// call's id, dotted as the body has them.
	name, args, id string
	// own is the form's members among callCarriers.
	own []string
}

// The provider shapes decodeCall reads.
var (
	openAIForm    = callForm{"an OpenAI tool call", "function.name", "function.arguments", "id", []string{"function", "id"}}
	anthropicForm = callForm{"an Anthropic tool_use block", "name", "input", "id", []string{"name", "input", "id"}}
	responsesForm = callForm{"an OpenAI Responses function_call item", "name", "arguments", "call_id", []string{"name", "arguments", "call_id", "id"}}
	geminiForm    = callForm{"a Gemini functionCall part", "functionCall.name", "functionCall.args", "functionCall.id", []string{"functionCall"}}
)

// callCarriers are the members of a call, in any shape, that carry the
// tool's name, the arguments or the call's id, and which of them.
var callCarriers = []struct{ member, role string }{
	{"toolName", "name"}, {"function", "name"}, {"functionCall", "name"}, {"name", "name"},
	{"arguments", "args"}, {"input", "args"},
	{"toolCallId", "id"}, {"id", "id"}, {"call_id", "id"},
}

// mixed says what is wrong with a call in form f whose body holds the
// members present (dotted, as shape.checkPresent gives them), or "" when
// nothing is: a member that carries the tool's name, the arguments or the
// id in another shape. Readers differ on which shape counts (toolsvc read
// the provider's and dropped the rest), so {"toolName": "fs__read",
// "type": "function", "function": {"name": "fs__delete", …}} would show a
// person or a log one tool and run another. A toolCallId beside a shape
// whose own id is absent (a Gemini part often has none) is the call's id.
func (f *callForm) mixed(present []string) string {
	for _, c := range callCarriers {
		if slices.Contains(f.own, c.member) || !slices.Contains(present, c.member) {
			continue
		}
		if c.member == "toolCallId" && !slices.Contains(present, f.id) {
			continue
		}
		own, does := f.name, "names the tool"
		switch c.role {
		case "args":
			own, does = f.args, "holds the arguments"
		case "id":
			own, does = f.id, "holds the call's id"
		}
		return fmt.Sprintf("the call is %s, whose %q %s, and also has %q, which %s in another shape; JSON readers differ on which one counts, so send the call in one shape", f.what, own, does, c.member, does)
	}
	return ""
}

// badContext says what is wrong with an identifier of a call's context,
// or of a batch's (which its calls take), naming it; "" when nothing is.
// raw is the body the context was read from.
func badContext(cc *registry.CallContext, raw []byte) string {
	for _, f := range []struct{ name, v string }{
		{"context.instanceKey", cc.InstanceKey},
		{"context.agentName", cc.AgentName},
		{"context.turnId", cc.TurnID},
	} {
		if msg := badText(f.v, raw); msg != "" {
			return f.name + " " + msg
		}
	}
	return ""
}

// maxCallText bounds a call's identifiers: its toolCallId and the members
// of its context, which every record and log line of the call carries.
const maxCallText = 256

// badText says what is wrong with an identifier s of the call whose body
// is raw, or "" when nothing is. Identifiers key records and appear in
// logs, URLs and headers, so they are bounded and hold no control
// characters (PostgreSQL refuses to store a NUL at all: a call carrying
// one would fail as if the store were down).
func badText(s string, raw []byte) string {
	switch {
	case utf8.RuneCountInString(s) > maxCallText:
		return fmt.Sprintf("is longer than %d characters", maxCallText)
	case strings.ContainsRune(s, utf8.RuneError) && !cleanText(raw):
		// The decoder turned invalid UTF-8 or an unpaired surrogate into
		// U+FFFD: kept, two different ids would be one, and the answer's
		// id would not be the one sent. (A body with neither holds a
		// U+FFFD of its own, which is a character like any other.)
		return "is not valid UTF-8 (or holds an unpaired surrogate escape); send it as valid UTF-8"
	case strings.ContainsFunc(s, unicode.IsControl):
		return "holds a control character (such as NUL, a tab or a newline); send printable text"
	}
	return ""
}

// badCallID is badText for a toolCallId, which also names the call in
// URLs: GET /calls/{toolCallId}, its output and its console page. "." and
// ".." are dot segments there, which browsers, curl and proxies remove
// from a path before it is sent (RFC 3986, section 5.2.4): no URL could
// reach such a call.
func badCallID(id string, raw []byte) string {
	if id == "." || id == ".." {
		return fmt.Sprintf("is %q, which no URL can carry: browsers, curl and proxies remove it from a path as a dot segment, so GET /calls/%s would never reach the call; use another id", id, id)
	}
	return badText(id, raw)
}

// cleanText reports whether the JSON text b is valid UTF-8 and escapes no
// unpaired surrogate (RFC 7493, section 2.1): whether every U+FFFD its
// strings decode to was written as one.
func cleanText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"':
			inString = !inString
		case b[i] == '\\' && inString && i+1 < len(b):
			if b[i+1] != 'u' {
				i++ // \n, \", \\ and the like
				continue
			}
			r, ok := hex4(b, i+2)
			switch {
			case !ok:
				return false
			case utf16.IsSurrogate(r) && r < 0xdc00:
				// A high surrogate must be followed by a low one.
				if i+7 >= len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
					return false
				}
				if lo, ok := hex4(b, i+8); !ok || lo < 0xdc00 || lo > 0xdfff {
					return false
				}
				i += 11
			case utf16.IsSurrogate(r):
				return false // a low surrogate alone
			default:
				i += 5
			}
		}
	}
	return true
}

// hex4 reads the four hex digits of a \u escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// checkStringArguments holds arguments given as a string holding JSON
// (the OpenAI shape) to the body's depth limit: the body's own check sees
// only a string.
func checkStringArguments(args json.RawMessage, maxDepth int) error {
	args = bytes.TrimSpace(args)
	if len(args) == 0 || args[0] != '"' {
		return nil
	}
	var inner string
	if err := json.Unmarshal(args, &inner); err != nil {
		return problem(kindInvalidCall, "arguments string is not a valid JSON string: "+err.Error())
	}
	if err := checkDepth([]byte(inner), maxDepth); err != nil {
		return problem(kindTooDeep, fmt.Sprintf("arguments string nests deeper than %d levels", maxDepth))
	}
	return nil
}

// modelMember returns the first member of a model provider's shape that
// w holds, for a body that turned out not to be in that shape.
func (w *wireCall) modelMember() string {
	switch {
	case w.ID != "":
		return "id"
	case w.Type != "":
		return "type"
	case w.Function != nil:
		return "function"
	case w.Name != "":
		return "name"
	case len(w.Input) > 0:
		return "input"
	case w.CallID != "":
		return "call_id"
	}
	return ""
}

// unknownMember returns the member an unknown-field error of
// encoding/json names, or "".
func unknownMember(err error) string {
	if err == nil {
		return ""
	}
	_, rest, ok := strings.Cut(err.Error(), "unknown field ")
	if !ok {
		return ""
	}
	name, err := strconv.Unquote(rest)
	if err != nil {
		return strings.Trim(rest, `"`)
	}
	return name
}

// unknownMemberDetail says that member is not part of a native call and
// which member was probably meant.
func unknownMemberDetail(member string) string {
	detail := fmt.Sprintf("the call has a member %q, which is not part of a call", member)
	if want := closestMember(member); want != "" {
		return detail + fmt.Sprintf("; did you mean %q? Send {\"toolName\": \"...\", \"arguments\": {...}}", want)
	}
	return detail + "; a call has only " + strings.Join(callMembers(), ", ")
}

// memberAlias returns the native member that a name other APIs use for
// it stands for, or "".
func memberAlias(name string) string {
	switch name {
	case "args", "input", "params", "parameters":
		return "arguments"
	case "name", "tool", "tool_name", "function":
		return "toolName"
	case "id", "call_id", "tool_call_id", "callId":
		return "toolCallId"
	case "timeout", "timeout_ms":
		return "timeoutMs"
	case "instanceKey", "metadata":
		return "context"
	}
	return ""
}

// closestMember returns the member of a native call (or of its context
// and approval) that member most likely meant, or "".
func closestMember(member string) string {
	if want := memberAlias(member); want != "" {
		return want
	}
	return closestOf(member, callMembers()...)
}

// closestOf returns the one of names that member most likely meant: one
// it begins (three characters at least), or the nearest within two edits,
// case aside; "" when none is.
func closestOf(member string, names ...string) string {
	lu := strings.ToLower(member)
	best, bestDist := "", 3 // at most two edits
	for _, n := range names {
		ln := strings.ToLower(n)
		if len(lu) >= 3 && strings.HasPrefix(ln, lu) {
			return n
		}
		if d := registry.EditDistance(lu, ln); d < bestDist {
			best, bestDist = n, d
		}
	}
	return best
}

// callMembers lists the members of a native call and of its nested
// objects, from registry.Call's own JSON names.
func callMembers() []string {
	var out []string
	for _, t := range []reflect.Type{reflect.TypeFor[registry.Call](), reflect.TypeFor[registry.CallContext](), reflect.TypeFor[registry.InlineApproval]()} {
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" && f.IsExported() {
				out = append(out, name)
			}
		}
	}
	return out
}

// shapeError says which member of a call has the wrong type, in JSON
// terms rather than Go's.
func shapeError(err error) string {
	if msg, ok := registry.JSONTypeError(err); ok {
		return strings.TrimPrefix(msg, "Call.")
	}
	return err.Error()
}

func (s *Server) handleCall(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	format, err := s.formats.result(q.Get("format"))
	if err != nil {
		return err
	}
	strict, err := strictParam(q)
	if err != nil {
		return err
	}
	body, err := s.readJSON(w, r)
	if err != nil {
		return err
	}
	call, err := decodeCall(body, s.deps.Limits.MaxJSONDepth)
	if err != nil {
		return err
	}
	if strict {
		s.dropStrictNulls(call)
	}
	if err := s.limitHTTP(w, r, call.ToolName); err != nil {
		return err
	}
	res, err := s.deps.Executor.Execute(r.Context(), CallerFrom(r.Context()), call)
	if err != nil {
		return err
	}
	markRecordPending(w, res)
	return encode(w, resultStatus(res), format(res))
}

// RecordHeader says, with the value "pending", that a call ran but its
// record is not yet in the store: the service holds the result and
// retries, and until then only this instance answers a retry with it.
const RecordHeader = "Toolsvc-Record"

func markRecordPending(w http.ResponseWriter, results ...*registry.Result) {
	for _, r := range results {
		if r != nil && r.RecordPending {
			w.Header().Set(RecordHeader, "pending")
			return
		}
	}
}

func resultStatus(r *registry.Result) int {
	if r.Status == registry.StatusPendingApproval || r.Status == registry.StatusRunning {
		return http.StatusAccepted
	}
	return http.StatusOK
}

// shape is the members of a JSON object that encoding/json decodes into a
// struct, each with the shape of its own value when that is an object too
// (nil otherwise), and their names as encoding/json folds them.
type shape struct {
	members map[string]*shape
	folded  map[string]string // a member's name by its folded form
}

// The shapes of the bodies whose member names are checked.
var (
	callShape     = shapeOf(reflect.TypeFor[wireCall]())
	batchShape    = shapeOf(reflect.TypeFor[wireBatch]())
	decisionShape = shapeOf(reflect.TypeFor[decision]())
)

// shapeOf is the shape of struct type t, by encoding/json's rules: the
// tag's name or else the field's, and the fields of an untagged embedded
// struct inlined; nil when t is not a struct.
func shapeOf(t reflect.Type) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	s := &shape{members: map[string]*shape{}, folded: map[string]string{}}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "":
			if inner := shapeOf(f.Type); inner != nil {
				maps.Copy(s.members, inner.members)
				maps.Copy(s.folded, inner.folded)
			}
			continue
		case !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		s.members[name] = shapeOf(f.Type)
		s.folded[string(appendFolded(nil, name))] = name
	}
	return s
}

// appendFolded appends name folded as encoding/json folds member names
// to match them to fields: two names fold alike exactly when it takes one
// for the other ("TOOLNAME" for toolName, "timeoutMſ" for timeoutMs).
func appendFolded(out []byte, name string) []byte {
	for _, r := range name {
		switch {
		case 'a' <= r && r <= 'z':
			out = append(out, byte(r-'a'+'A'))
		case r < utf8.RuneSelf:
			out = append(out, byte(r))
		default:
			// The smallest rune of r's fold set.
			for {
				r2 := unicode.SimpleFold(r)
				if r2 <= r {
					r = r2
					break
				}
				r = r2
			}
			out = utf8.AppendRune(out, r)
		}
	}
	return out
}

// memberError is a member name that encoding/json would read without a
// word, but not as the contract means it: given twice in one object (it
// keeps the last, other readers the first, so {"decision": "deny",
// "decision": "approve"} would approve), or in another case than the
// contract's (it matches names case-insensitively, so "TOOLNAME" would
// pass for toolName).
type memberError struct {
	member string // dotted from the body: "context.turnId"
	want   string // for a name in another case, the contract's; "" for a name given twice
}

// detail says what is wrong, of body what ("the call").
func (e *memberError) detail(what string) string {
	if e.twice() {
		return fmt.Sprintf("%s has the member %q twice; JSON readers differ on which one counts, so send it once", what, clipTo(e.member, maxEchoBytes))
	}
	return fmt.Sprintf("%s has a member %q; member names are case-sensitive, so send it as %q", what, clipTo(e.member, maxEchoBytes), e.want)
}

// twice reports whether the member is given twice (rather than in
// another case).
func (e *memberError) twice() bool { return e.want == "" }

// check returns the first member of the JSON object raw, or of an object
// within it that s describes, that is given twice or that differs from a
// member of s only in case; nil when there is none. Members s does not
// know are left to the decoder, and so are the values it does not
// describe: the arguments are the executor's to check (a member twice in
// them is E_INVALID_ARGUMENTS, with its JSON pointer).
func (s *shape) check(raw []byte) *memberError {
	e, _ := s.checkAll(raw)
	return e
}

// checkAll is check that also reports whether raw, or an object within it
// that s describes, has a member s does not know: whether a decoder that
// disallows unknown fields would refuse it.
func (s *shape) checkAll(raw []byte) (e *memberError, others bool) {
	e = s.checkIn(raw, "", &others, nil)
	return e, others
}

// checkPresent is checkAll that also returns the members s knows that raw
// holds, dotted ("functionCall.id"), whatever their values (an "id" of ""
// or null is there all the same).
func (s *shape) checkPresent(raw []byte) (e *memberError, others bool, present []string) {
	e = s.checkIn(raw, "", &others, &present)
	return e, others, present
}

func (s *shape) checkIn(raw []byte, prefix string, others *bool, present *[]string) *memberError {
	// From a bytes.Buffer the decoder reads in place, without a copy.
	d := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	// Where the walk stops short, others is set: the decoder that
	// refuses unknown members reads the body and says what is wrong.
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		*others = true
		return nil // not an object: the decoder says so
	}
	// Only the members s knows are kept: the decoder ignores the others
	// (or refuses the first), so which of two of them counts matters not.
	var seenArr [16]string
	seen := seenArr[:0]
	var buf [64]byte
	for d.PeekKind() == '"' {
		tok, err := d.ReadToken()
		if err != nil {
			*others = true
			return nil
		}
		name := tok.String()
		inner, known := s.members[name]
		if known {
			if slices.Contains(seen, name) {
				return &memberError{member: prefix + name}
			}
			seen = append(seen, name)
			if present != nil {
				*present = append(*present, prefix+name)
			}
		} else if want, ok := s.folded[string(appendFolded(buf[:0], name))]; ok {
			return &memberError{member: prefix + name, want: prefix + want}
		} else {
			*others = true
		}
		v, err := d.ReadValue()
		if err != nil {
			*others = true
			return nil
		}
		if inner != nil && v.Kind() == '{' {
			if e := inner.checkIn(v, prefix+name+".", others, present); e != nil {
				return e
			}
		}
	}
	if d.PeekKind() != '}' {
		*others = true
	}
	return nil
}
