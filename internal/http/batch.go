package http

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// wireBatch is the body of POST /calls/batch. Context and Catalog apply to
// every call that does not give its own.
type wireBatch struct {
	Calls   *[]json.RawMessage    `json:"calls"`
	Context *registry.CallContext `json:"context"`
	Catalog []string              `json:"catalog"`
}

// batchResponse holds one result per call, in request order, each in the
// shape ?format= asks for.
type batchResponse struct {
	Results []any `json:"results"`
}

// decodeBatch reads the batch envelope. Only a bad envelope is a problem;
// a bad call inside becomes an error result in its slot.
func decodeBatch(raw []byte) (*wireBatch, error) {
	raw = bytes.TrimSpace(raw)
	if raw[0] != '{' {
		return nil, problem(kindInvalidBatch, `a batch must be a JSON object: {"calls": [...]}`)
	}
	if e := batchShape.check(raw); e != nil {
		return nil, problem(kindInvalidBatch, e.detail("the batch"))
	}
	var b wireBatch
	dec := json.NewDecoder(bytes.NewReader(raw))
	// Strict as a native call is: a misspelt "catalog" would otherwise
	// widen the catalog the batch meant to narrow.
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		if m := unknownMember(err); m != "" {
			detail := fmt.Sprintf("the batch has a member %q, which is not part of a batch or of a call's context; a batch has only calls, context and catalog", m)
			if want := closestOf(m, "calls", "context", "catalog"); want != "" {
				detail += fmt.Sprintf(" (did you mean %q?)", want)
			}
			return nil, problem(kindInvalidBatch, detail)
		}
		return nil, problem(kindInvalidBatch, `the batch does not have the expected shape {"calls": [...], "context": {...}, "catalog": [...]}: `+shapeError(err))
	}
	if b.Calls == nil {
		return nil, problem(kindInvalidBatch, `the batch has no "calls" array; send {"calls": [call, ...]}`)
	}
	if n := len(*b.Calls); n > registry.MaxBatchCalls {
		return nil, problem(kindInvalidBatch, fmt.Sprintf("the batch holds %d calls; at most %d are allowed, so split it", n, registry.MaxBatchCalls))
	}
	// The calls take the batch's context as their own: it is held to what
	// a call's own context is.
	if b.Context != nil {
		if msg := badContext(b.Context, raw); msg != "" {
			return nil, problem(kindInvalidBatch, "the batch's "+msg)
		}
	}
	return &b, nil
}

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) error {
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
	b, err := decodeBatch(body)
	if err != nil {
		return err
	}
	raws := *b.Calls
	results := make([]*registry.Result, len(raws))
	calls := make([]*registry.Call, 0, len(raws))
	slots := make([]int, 0, len(raws))
	ids := make(map[string]int, len(raws))
	for i, raw := range raws {
		call, err := decodeCall(raw, s.deps.Limits.MaxJSONDepth)
		if err != nil {
			results[i] = unreadableCall(i, call, err)
			continue
		}
		if strict {
			s.dropStrictNulls(call)
		}
		if b.Context != nil && call.Context == (registry.CallContext{}) {
			call.Context = *b.Context
		}
		if len(call.Catalog) == 0 {
			call.Catalog = b.Catalog
		}
		if call.ToolCallID != "" {
			if j, dup := ids[call.ToolCallID]; dup {
				results[i] = errorResult(call, &registry.Error{Code: registry.CodeInvalidArguments,
					Message:    fmt.Sprintf("toolCallId %q is also used by call %d of this batch; it did not run", call.ToolCallID, j+1),
					Suggestion: "Give every call of a batch its own id."})
				continue
			}
			ids[call.ToolCallID] = i
		}
		calls = append(calls, call)
		slots = append(slots, i)
	}
	names := make([]string, len(calls))
	for i, c := range calls {
		names[i] = c.ToolName
	}
	// Every call of the batch takes a token; a batch over the limit runs
	// none of its calls.
	if err := s.limitHTTP(w, r, names...); err != nil {
		return err
	}
	// The executor names a call of the batch by its position in the
	// request, which counts the calls answered here.
	o := s.deps.Batch
	o.Positions = make([]int, len(slots))
	for k, i := range slots {
		o.Positions[k] = i + 1
	}
	caller := CallerFrom(r.Context())
	ran, err := s.deps.Executor.ExecuteBatch(r.Context(), caller, calls, o)
	if err != nil {
		return err
	}
	// The calls answered here, without the executor, get the audit line
	// it gives the others, now that the batch is answered.
	for _, res := range results {
		if res != nil {
			s.deps.Executor.AuditRefused(r.Context(), caller, res)
		}
	}
	for k, i := range slots {
		results[i] = ran[k]
	}
	markRecordPending(w, results...)
	out := batchResponse{Results: make([]any, len(results))}
	for i, res := range results {
		out.Results[i] = format(res)
	}
	return encode(w, http.StatusOK, out)
}

// unreadableCall is the result in the slot of a call that cannot be read,
// with whatever id and name could be read of it.
func unreadableCall(i int, partial *registry.Call, err error) *registry.Result {
	call := &registry.Call{}
	if partial != nil {
		call = partial
	}
	detail := err.Error()
	if p, ok := err.(*Problem); ok {
		detail = p.Detail
	}
	return errorResult(call, &registry.Error{Code: registry.CodeInvalidArguments,
		Message:    fmt.Sprintf("call %d of the batch cannot be read, so it did not run: %s", i+1, detail),
		Suggestion: `Send each call as {"toolName": "...", "arguments": {...}}, or in the model's own tool-call shape.`})
}

func errorResult(call *registry.Call, e *registry.Error) *registry.Result {
	id := call.ToolCallID
	if id == "" {
		id = registry.NewCallID()
	}
	return &registry.Result{ToolCallID: id, ToolName: call.ToolName, Status: registry.StatusError, Error: e}
}
