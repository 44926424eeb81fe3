package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestValidateName(t *testing.T) {
	good := []string{"fs__read", "a__b", "my-tool__do_it", "A1__b-2", strings.Repeat("a", 30) + "__" + strings.Repeat("b", 32)}
	bad := []string{"", "fs", "fs_read", "__read", "fs__", "_fs__read", "fs___read", "fs__read_", "fs__re__ad", "f s__read", "fs__réad",
		"fs.x__read", strings.Repeat("a", 31) + "__" + strings.Repeat("b", 32)}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
		r, e, _ := SplitName(n)
		if JoinName(r, e) != n {
			t.Errorf("split/join of %q does not round-trip", n)
		}
	}
	for _, n := range bad {
		if err := ValidateName(n); err == nil {
			t.Errorf("ValidateName(%q) = nil, want an error", n)
		}
	}
}

const objSchema = `{"type":"object","additionalProperties":false,"required":["path"],
 "properties":{"path":{"type":"string","minLength":1},"limit":{"type":"integer","minimum":1},"mode":{"enum":["a","b"]},
 "items":{"type":"array","items":{"type":"integer"}}}}`

func tool(name string, tier Tier, h Func) *Tool {
	return &Tool{Definition: Definition{Name: name, Description: "test tool " + name, Tier: tier, Parameters: json.RawMessage(objSchema)}, Handler: h}
}

func echo(_ context.Context, r *Request) (any, error) { return r.Arguments, nil }

func newExec(t *testing.T, o Options, tools ...*Tool) *Executor {
	t.Helper()
	reg, err := New(Defaults{Timeout: 5 * time.Second, MaxOutputBytes: 16384, ErrorMessageLimit: 1000}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	o.Registry = reg
	return NewExecutor(o)
}

func mustExec(t *testing.T, e *Executor, c *Caller, call *Call) *Result {
	t.Helper()
	if c == nil {
		c = Anonymous()
	}
	res, err := e.Execute(context.Background(), c, call)
	if err != nil {
		t.Fatalf("Execute: %v", err)
	}
	b, _ := json.Marshal(res)
	if !json.Valid(b) || !utf8.Valid(b) {
		t.Fatalf("result is not valid JSON/UTF-8: %s", b)
	}
	return res
}

func TestNewRefusesBadTools(t *testing.T) {
	h := Func(echo)
	cases := map[string]*Tool{
		"must have the form":    {Definition: Definition{Name: "nounderscore", Description: "d", Tier: ReadOnly, Parameters: json.RawMessage(objSchema)}, Handler: h},
		"root must have":        {Definition: Definition{Name: "a__b", Description: "d", Tier: ReadOnly, Parameters: json.RawMessage(`{"type":"string"}`)}, Handler: h},
		"not valid JSON":        {Definition: Definition{Name: "a__b", Description: "d", Tier: ReadOnly, Parameters: json.RawMessage(`{`)}, Handler: h},
		"schema is missing":     {Definition: Definition{Name: "a__b", Description: "d", Tier: ReadOnly}, Handler: h},
		"unknown tier":          {Definition: Definition{Name: "a__b", Description: "d", Tier: "root", Parameters: json.RawMessage(objSchema)}, Handler: h},
		"no handler":            {Definition: Definition{Name: "a__b", Description: "d", Tier: ReadOnly, Parameters: json.RawMessage(objSchema)}},
		"no description":        {Definition: Definition{Name: "a__b", Tier: ReadOnly, Parameters: json.RawMessage(objSchema)}, Handler: h},
		"is not loaded":         {Definition: Definition{Name: "a__b", Description: "d", Tier: ReadOnly, Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"https://example.com/s.json"}}}`)}, Handler: h},
		"file:///etc/passwd":    {Definition: Definition{Name: "a__b", Description: "d", Tier: ReadOnly, Parameters: json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"file:///etc/passwd"}}}`)}, Handler: h},
		"tools.yaml:7: tool \"": {Definition: Definition{Name: "bad", Description: "d", Tier: ReadOnly, Parameters: json.RawMessage(objSchema), Source: "tools.yaml:7"}, Handler: h},
	}
	for want, tl := range cases {
		_, err := New(Defaults{}, tl)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New(%s) = %v, want error containing %q", tl.Name, err, want)
		}
	}
	_, err := New(Defaults{}, tool("a__b", ReadOnly, echo), tool("a__b", ReadOnly, echo))
	if err == nil || !strings.Contains(err.Error(), "duplicate") {
		t.Errorf("duplicate: %v", err)
	}
}

func TestListIsSortedAndFiltered(t *testing.T) {
	a, b, c := tool("zz__last", ReadOnly, echo), tool("aa__first", Privileged, echo), tool("mm__mid", SideEffecting, echo)
	a.Tags = []string{"x"}
	c.Description = "Reads the WEATHER"
	reg, err := New(Defaults{}, a, b, c)
	if err != nil {
		t.Fatal(err)
	}
	names := func(ts []*Tool) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.Name)
		}
		return strings.Join(s, ",")
	}
	cases := []struct {
		caller *Caller
		f      Filter
		want   string
	}{
		{nil, Filter{}, "aa__first,mm__mid,zz__last"},
		{&Caller{MaxTier: SideEffecting}, Filter{}, "mm__mid,zz__last"},
		{&Caller{Tools: []string{"aa__*", "zz__*"}}, Filter{}, "aa__first,zz__last"},
		{nil, Filter{Tier: Privileged}, "aa__first"},
		{nil, Filter{Tag: "x"}, "zz__last"},
		{nil, Filter{Query: "weather"}, "mm__mid"},
		{nil, Filter{Names: []string{"zz__last", "aa__first", "nope"}}, "aa__first,zz__last"},
	}
	for _, c := range cases {
		if got := names(reg.List(c.caller, c.f)); got != c.want {
			t.Errorf("List(%+v, %+v) = %s, want %s", c.caller, c.f, got, c.want)
		}
	}
}

func TestExecuteOK(t *testing.T) {
	e := newExec(t, Options{}, tool("t__echo", ReadOnly, echo))
	res := mustExec(t, e, nil, &Call{ToolCallID: "c1", ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a","limit":2}`)})
	if res.Status != StatusOK || res.ToolCallID != "c1" || string(res.Output) != `{"path":"a","limit":2}` || res.Truncated {
		t.Fatalf("result: %+v output %s", res, res.Output)
	}
	// Arguments as a string holding an object, as OpenAI sends them.
	res = mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(`"{\"path\":\"b\"}"`)})
	if res.Status != StatusOK || string(res.Output) != `{"path":"b"}` || !strings.HasPrefix(res.ToolCallID, "call_") {
		t.Fatalf("string arguments: %+v %s", res, res.Output)
	}
}

func TestExecuteErrors(t *testing.T) {
	deny := Func(func(ctx context.Context, r *Request) (any, error) { return nil, errors.New("disk on fire") })
	e := newExec(t, Options{}, tool("t__echo", ReadOnly, echo), tool("t__fail", ReadOnly, deny), tool("t__priv", Privileged, echo))
	cases := []struct {
		name       string
		caller     *Caller
		call       Call
		code       Code
		msg        string
		suggestion string
	}{
		{"unknown", nil, Call{ToolName: "t__ehco"}, CodeToolNotFound, `no tool named "t__ehco"`, "Did you mean t__echo"},
		{"empty name", nil, Call{}, CodeToolNotFound, "no tool name given", ""},
		{"hidden by caller", &Caller{ID: "x", Tools: []string{"t__fail"}}, Call{ToolName: "t__echo"}, CodeToolNotInCatalog, "not in this caller's catalog", ""},
		{"hidden by request", nil, Call{ToolName: "t__echo", Catalog: []string{"t__fail"}}, CodeToolNotInCatalog, "", ""},
		{"hidden by tier", &Caller{ID: "x", MaxTier: ReadOnly}, Call{ToolName: "t__priv"}, CodeToolNotInCatalog, "", ""},
		{"array", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`[1]`)}, CodeInvalidArguments, "must be a JSON object", `Call t__echo with arguments like {"path": "<string>"}`},
		{"bad string", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`"{nope"`)}, CodeInvalidArguments, "not valid JSON", ""},
		{"string of array", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`"[]"`)}, CodeInvalidArguments, "must be a JSON object", ""},
		{"missing", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`{}`)}, CodeInvalidArguments, "missing required property 'path'", "optional: items ([]), limit (1), mode (\"a\")"},
		{"wrong type", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"x","limit":"2"}`)}, CodeInvalidArguments, "at /limit: expected integer, got string", ""},
		{"unknown prop", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"x","bogus":1}`)}, CodeInvalidArguments, "unknown property 'bogus'", ""},
		{"enum", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"x","mode":"z"}`)}, CodeInvalidArguments, `at /mode: expected one of "a", "b"`, ""},
		{"many", nil, Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"x","items":["a","b","c","d","e","f","g"]}`)}, CodeInvalidArguments, "+2 more", ""},
		{"tool error", nil, Call{ToolName: "t__fail", Arguments: json.RawMessage(`{"path":"x"}`)}, CodeTool, "disk on fire", ""},
		{"ask", nil, Call{ToolName: "t__priv", Arguments: json.RawMessage(`{"path":"x"}`)}, CodePolicyDenied, "requires human approval (rule tier-default:privileged)", ""},
		{"inline approval without scope", &Caller{ID: "x", Scopes: []Scope{ScopeCall}}, Call{ToolName: "t__priv", Arguments: json.RawMessage(`{"path":"x"}`), Approval: &InlineApproval{Granted: true, By: "u"}}, CodePolicyDenied, "requires human approval", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := mustExec(t, e, c.caller, &c.call)
			if res.Status != StatusError || res.Error == nil || res.Error.Code != c.code {
				t.Fatalf("got %+v (error %+v), want code %s", res, res.Error, c.code)
			}
			if !strings.Contains(res.Error.Message, c.msg) {
				t.Errorf("message %q does not contain %q", res.Error.Message, c.msg)
			}
			if !strings.Contains(res.Error.Suggestion, c.suggestion) {
				t.Errorf("suggestion %q does not contain %q", res.Error.Suggestion, c.suggestion)
			}
			if res.Output != nil {
				t.Errorf("error result has output %s", res.Output)
			}
		})
	}
	res := mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"x","items":["a","b","c","d","e","f","g"]}`)})
	if len(res.Error.Details) != 5 || res.Error.Details[0].Path != "/items/0" {
		t.Errorf("details: %+v", res.Error.Details)
	}
	res = mustExec(t, e, nil, &Call{ToolName: "t__priv", Arguments: json.RawMessage(`{"path":"x"}`), Approval: &InlineApproval{Granted: true, By: "u"}})
	if res.Status != StatusOK {
		t.Errorf("inline approval by an approver: %+v", res.Error)
	}
}

type denyAll struct{}

func (denyAll) Decide(context.Context, *PolicyInput) (Decision, error) {
	return Decision{Effect: Deny, Rule: "ops/no-writes", Reason: "read-only day"}, nil
}

func TestPolicyDeny(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newExec(t, Options{Policy: denyAll{}, Metrics: NewMetrics(reg)}, tool("t__echo", ReadOnly, echo))
	res := mustExec(t, e, nil, &Call{ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"x"}`)})
	if res.Code() != CodePolicyDenied || !strings.Contains(res.Error.Message, "ops/no-writes: read-only day") {
		t.Fatalf("got %+v", res.Error)
	}
	if n := testutil.ToFloat64(e.metrics.decisions.WithLabelValues("t__echo", "deny")); n != 1 {
		t.Errorf("deny decisions counted: %v", n)
	}
}

func TestTimeoutPanicAndLimits(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	stubborn := Func(func(ctx context.Context, r *Request) (any, error) { <-block; return "late", nil })
	polite := Func(func(ctx context.Context, r *Request) (any, error) { <-ctx.Done(); return nil, ctx.Err() })
	boom := Func(func(ctx context.Context, r *Request) (any, error) { panic("kaboom: secret detail") })
	long := Func(func(ctx context.Context, r *Request) (any, error) {
		return nil, errors.New("BEGIN " + strings.Repeat("é", 5000) + " THE REAL ERROR")
	})
	ts, tp := tool("t__stubborn", ReadOnly, stubborn), tool("t__polite", ReadOnly, polite)
	ts.Timeout, tp.Timeout = 50*time.Millisecond, 10*time.Second
	tl := tool("t__long", ReadOnly, long)
	tl.ErrorMessageLimit = 100
	e := newExec(t, Options{}, ts, tp, tool("t__boom", ReadOnly, boom), tl)
	args := json.RawMessage(`{"path":"x"}`)

	res := mustExec(t, e, nil, &Call{ToolName: "t__stubborn", Arguments: args})
	if res.Code() != CodeTimeout || !strings.Contains(res.Error.Message, "50ms") {
		t.Errorf("stubborn tool: %+v", res.Error)
	}
	// timeoutMs may shorten the tool's timeout.
	res = mustExec(t, e, nil, &Call{ToolName: "t__polite", Arguments: args, TimeoutMs: 30})
	if res.Code() != CodeTimeout || !strings.Contains(res.Error.Message, "30ms") {
		t.Errorf("shortened timeout: %+v", res.Error)
	}
	// ... but never lengthen it.
	res = mustExec(t, e, nil, &Call{ToolName: "t__stubborn", Arguments: args, TimeoutMs: 60_000})
	if res.Code() != CodeTimeout || !strings.Contains(res.Error.Message, "50ms") {
		t.Errorf("lengthened timeout: %+v", res.Error)
	}
	// ... even by a value past what a Duration holds (a "no limit").
	for _, ms := range []int64{math.MaxInt64, 9223372036855, 18446744073710} {
		res = mustExec(t, e, nil, &Call{ToolName: "t__stubborn", Arguments: args, TimeoutMs: ms})
		if res.Code() != CodeTimeout || !strings.Contains(res.Error.Message, "within 50ms") {
			t.Errorf("timeoutMs %d: %+v", ms, res.Error)
		}
	}
	// A caller that goes away cancels the call.
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	r2, err := e.Execute(ctx, Anonymous(), &Call{ToolName: "t__polite", Arguments: args})
	if err != nil || r2.Code() != CodeCanceled {
		t.Errorf("canceled: %v %+v", err, r2)
	}
	res = mustExec(t, e, nil, &Call{ToolName: "t__boom", Arguments: args})
	if res.Code() != CodeInternal || res.Error.Message != "internal error" {
		t.Errorf("panic: %+v", res.Error)
	}
	res = mustExec(t, e, nil, &Call{ToolName: "t__long", Arguments: args})
	// Cut in the middle: a program's error is at the end of what it wrote.
	if m := res.Error.Message; utf8.RuneCountInString(m) != 100 || !strings.HasPrefix(m, "BEGIN éé") ||
		!strings.Contains(m, " … [4952 characters omitted] … ") || !strings.HasSuffix(m, "éé THE REAL ERROR") {
		t.Errorf("message limit: %d runes: %q", utf8.RuneCountInString(m), m)
	}
}

func TestMaxTimeoutCaps(t *testing.T) {
	tp := tool("t__polite", ReadOnly, func(ctx context.Context, r *Request) (any, error) { <-ctx.Done(); return nil, ctx.Err() })
	tp.Timeout = time.Hour
	e := newExec(t, Options{MaxTimeout: 40 * time.Millisecond}, tp)
	res := mustExec(t, e, nil, &Call{ToolName: "t__polite", Arguments: json.RawMessage(`{"path":"x"}`)})
	if res.Code() != CodeTimeout || !strings.Contains(res.Error.Message, "40ms") {
		t.Errorf("max timeout: %+v", res.Error)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	slow := Func(func(ctx context.Context, r *Request) (any, error) { started <- struct{}{}; <-release; return "ok", nil })
	e := newExec(t, Options{MaxConcurrency: 1}, tool("t__slow", ReadOnly, slow))
	args := json.RawMessage(`{"path":"x"}`)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); mustExec(t, e, nil, &Call{ToolName: "t__slow", Arguments: args}) }()
	<-started
	if _, err := e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__slow", Arguments: args}); !errors.Is(err, ErrOverloaded) {
		t.Errorf("second call: %v, want ErrOverloaded", err)
	}
	close(release)
	wg.Wait()
	go func() { <-started }()
	if res := mustExec(t, e, nil, &Call{ToolName: "t__slow", Arguments: args}); res.Status != StatusOK {
		t.Errorf("after release: %+v", res)
	}
}

func TestHugeOutputIsTruncated(t *testing.T) {
	big := strings.Repeat("ab\"é\n", 2_000_000) // 12 MB of text with escapes and multi-byte runes
	str := Func(func(ctx context.Context, r *Request) (any, error) { return big, nil })
	obj := Func(func(ctx context.Context, r *Request) (any, error) { return map[string]any{"data": big}, nil })
	reg := prometheus.NewRegistry()
	e := newExec(t, Options{Metrics: NewMetrics(reg)}, tool("t__str", ReadOnly, str), tool("t__obj", ReadOnly, obj))
	for _, name := range []string{"t__str", "t__obj"} {
		res := mustExec(t, e, nil, &Call{ToolName: name, Arguments: json.RawMessage(`{"path":"x"}`)})
		if !res.Truncated || res.OriginalBytes < int64(len(big)) {
			t.Fatalf("%s: truncated=%v originalBytes=%d", name, res.Truncated, res.OriginalBytes)
		}
		var s string
		if err := json.Unmarshal(res.Output, &s); err != nil {
			t.Fatalf("%s: output is not a JSON string: %v", name, err)
		}
		shown, marker, _ := strings.Cut(s, "\n[output truncated: ")
		marker = "[output truncated: " + marker
		// What the output shows plus what it omits is the whole text that
		// was cut: the string, or the JSON text of the object, whose
		// quotes and backslashes the output escapes once more.
		full := big
		if name == "t__obj" {
			b, _ := json.Marshal(map[string]any{"data": big})
			full = string(b)
		}
		if !strings.HasPrefix(full, shown) {
			t.Fatalf("%s: the output does not show the start of the text", name)
		}
		if want := "[output truncated: " + itoa(res.OriginalBytes) + " bytes total, " + itoa(int64(len(full)-len(shown))) + " omitted; the full output was not kept]"; marker != want {
			t.Errorf("%s: marker %q, want %q", name, marker, want)
		}
		if len(res.Output) > 16384+len(marker)+4 {
			t.Errorf("%s: output is %d bytes", name, len(res.Output))
		}
	}
	if n := testutil.ToFloat64(e.metrics.truncated.WithLabelValues("t__str")); n != 1 {
		t.Errorf("truncations counted: %v", n)
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

func TestEncodeOutputFits(t *testing.T) {
	for _, v := range []any{"short", map[string]int{"a": 1}, json.RawMessage(`[1,2]`), nil, "<&>"} {
		out, tr, _, err := encodeOutput(v, 100)
		if err != nil || tr {
			t.Errorf("encodeOutput(%v) = %s %v %v", v, out, tr, err)
		}
		want, _ := json.Marshal(v)
		if v == "<&>" {
			want = []byte(`"<&>"`)
		}
		if string(out) != string(want) {
			t.Errorf("encodeOutput(%v) = %s, want %s", v, out, want)
		}
	}
	out, _, _, _ := encodeOutput("bad \xff utf8", 100)
	if !utf8.Valid(out) || !json.Valid(out) {
		t.Errorf("invalid UTF-8 not repaired: %q", out)
	}
}

func FuzzEncodeOutput(f *testing.F) {
	f.Add("hello \"world\"\n", 10)
	f.Add("ééééé\x00\x01\xff", 7)
	f.Fuzz(func(t *testing.T, s string, limit int) {
		if limit < 2 || limit > 1<<16 {
			return
		}
		for _, v := range []any{s, map[string]string{"k": s}} {
			out, truncated, original, err := encodeOutput(v, limit)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(out) || !utf8.Valid(out) {
				t.Fatalf("invalid output %q", out)
			}
			if !truncated {
				if len(out) > limit {
					t.Fatalf("untruncated output of %d bytes over limit %d", len(out), limit)
				}
				continue
			}
			var str string
			if err := json.Unmarshal(out, &str); err != nil {
				t.Fatal(err)
			}
			i := strings.LastIndex(str, "\n[output truncated: "+itoa(original)+" bytes total, ")
			if i < 0 || !strings.HasSuffix(str, " omitted]") {
				t.Fatalf("no marker in %q", str)
			}
			marker := str[i:]
			if len(out)-len(marker)-2 > limit { // the marker's newline encodes as two bytes
				t.Fatalf("truncated output of %d bytes over limit %d", len(out), limit)
			}
		}
	})
}

func TestPerToolSeriesExistBeforeUse(t *testing.T) {
	reg := prometheus.NewRegistry()
	newExec(t, Options{Metrics: NewMetrics(reg)}, tool("t__a", ReadOnly, echo), tool("t__b", ReadOnly, echo))
	for _, name := range []string{"toolsvc_tool_output_truncated_total", "toolsvc_tool_calls_in_flight"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 2 {
			t.Errorf("%s: %d series before any call (%v), want one per tool", name, n, err)
		}
	}
}

// closestReference is Closest as first written: every name lowered and
// compared in full.
func closestReference(r *Registry, name string, n int) []string {
	type scored struct {
		name string
		dist int
	}
	lname := strings.ToLower(name)
	limit := max(3, len(name)/3)
	var found []scored
	for _, t := range r.tools {
		ln := strings.ToLower(t.Name)
		d := EditDistance(lname, ln)
		if d > limit && !(len(lname) >= 3 && strings.Contains(ln, lname)) {
			continue
		}
		found = append(found, scored{t.Name, d})
	}
	slices.SortFunc(found, func(a, b scored) int {
		if a.dist != b.dist {
			return a.dist - b.dist
		}
		return strings.Compare(a.name, b.name)
	})
	names := []string{}
	for i := 0; i < len(found) && i < n; i++ {
		names = append(names, found[i].name)
	}
	return names
}

func TestClosestMatchesReference(t *testing.T) {
	var tools []*Tool
	for _, n := range []string{"fs__read", "fs__write", "fs__list", "text__transform", "json__query", "http__get", "http__post", "Data__Parse", "a__b"} {
		tools = append(tools, tool(n, ReadOnly, echo))
	}
	reg, err := New(Defaults{Timeout: time.Second}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"", "fs", "fs__reed", "FS__READ", "read", "text__transfrom", "jsonquery", "http__got", "data__parse",
		"ｆｓ__read", "fs__réad", "über__tool", "a", "a__bb", "http", strings.Repeat("x", 200), strings.Repeat("fs__read", 12), "fs__read" + strings.Repeat("é", 70)} {
		got, want := reg.Closest(nil, q, 3), closestReference(reg, q, 3)
		if !slices.Equal(got, want) {
			t.Errorf("Closest(%q) = %v, want %v", q, got, want)
		}
	}
}

// TestCatalogSizeAddsNoAllocations: a call, known tool or unknown, costs
// the same allocations with 1,000 tools as with 10.
func TestCatalogSizeAddsNoAllocations(t *testing.T) {
	allocs := func(n int, call *Call) float64 {
		tools := []*Tool{tool("t__echo", ReadOnly, func(context.Context, *Request) (any, error) { return "ok", nil })}
		for i := range n - 1 {
			tools = append(tools, tool(fmt.Sprintf("gen%02d__tool%05d", i%100, i), Tiers()[i%3], echo))
		}
		e := newExec(t, Options{Metrics: NewMetrics(prometheus.NewRegistry())}, tools...)
		if e.Registry().Len() != n {
			t.Fatalf("registry has %d tools, want %d", e.Registry().Len(), n)
		}
		ctx, caller := context.Background(), Anonymous()
		return testing.AllocsPerRun(200, func() {
			if _, err := e.Execute(ctx, caller, call); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, call := range []*Call{
		{ToolCallID: "c", ToolName: "t__echo", Arguments: json.RawMessage(`{"path":"a","limit":3}`)},
		{ToolCallID: "c", ToolName: "gen01__tol00001", Arguments: json.RawMessage(`{}`)},
	} {
		small, large := allocs(10, call), allocs(1000, call)
		// sync.Pool drops some items under the race detector: allow one.
		if large > small+1 {
			t.Errorf("%s: %.0f allocations per call with 1,000 tools, %.0f with 10", call.ToolName, large, small)
		}
	}
}

func TestPerToolConcurrencyLimit(t *testing.T) {
	started, release := make(chan struct{}, 4), make(chan struct{})
	hold := func(ctx context.Context, r *Request) (any, error) { started <- struct{}{}; <-release; return "ok", nil }
	slow := tool("t__slow", ReadOnly, hold)
	slow.MaxConcurrency = 1
	e := newExec(t, Options{MaxConcurrency: 2}, slow, tool("t__hold", ReadOnly, hold))
	args := json.RawMessage(`{"path":"x"}`)
	done := make(chan *Result, 2)
	go func() { done <- mustExec(t, e, nil, &Call{ToolName: "t__slow", Arguments: args}) }()
	<-started
	_, err := e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__slow", Arguments: args})
	if !errors.Is(err, ErrOverloaded) || !strings.Contains(err.Error(), "at most 1") {
		t.Errorf("second call of a tool limited to 1: %v, want ErrOverloaded", err)
	}
	// The refused call gave its service-wide slot back: with a limit of 2,
	// another tool still gets the second one.
	go func() { done <- mustExec(t, e, nil, &Call{ToolName: "t__hold", Arguments: args}) }()
	<-started
	if _, err := e.Execute(context.Background(), Anonymous(), &Call{ToolName: "t__hold", Arguments: args}); !errors.Is(err, ErrOverloaded) {
		t.Errorf("a third call over the service-wide limit of 2: %v, want ErrOverloaded", err)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if res := <-done; res.Status != StatusOK {
			t.Errorf("held call: %+v", res)
		}
	}
	if res := mustExec(t, e, nil, &Call{ToolName: "t__slow", Arguments: args}); res.Status != StatusOK {
		t.Errorf("after the first call ended: %+v", res)
	}
}
