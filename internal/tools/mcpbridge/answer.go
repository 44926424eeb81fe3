package mcpbridge

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// maxDepthText is the MCP SDK's bound on the nesting of a message
// (objects and arrays), which it applies to every message it decodes,
// whole: a deeper one is refused, not a part of it.
const maxDepthText = "1,000"

// tooDeep reports whether err says a message was nested deeper than the
// MCP SDK (or, past 10,000 levels, the JSON parser) reads, and says so.
func tooDeep(err error) (string, bool) {
	var bad *notJSONRPCError
	if errors.As(err, &bad) && bad.what == whatDeep {
		return "the server's answer is nested deeper than " + maxDepthText + " levels", true
	}
	s := err.Error()
	if strings.Contains(s, "exceeded maximum nesting depth") || strings.Contains(s, "exceeded max depth") {
		return "the server's answer is nested deeper than " + maxDepthText + " levels", true
	}
	return "", false
}

// unreadable reports whether err, from a tools/call, says that the answer
// came but its result is not what MCP says a tools/call result is, and
// what is wrong, in plain words: the SDK's own account names Go types
// ("cannot unmarshal … into Go value of type struct { mcp.res; Content
// []*mcp.wireContent …}"). The session goes on after such an answer.
func unreadable(err error) (string, bool) {
	var b64 *base64.CorruptInputError
	if errors.As(err, &b64) || strings.Contains(err.Error(), "illegal base64 data") {
		return "a content item's data (an image, audio or blob) is not valid base64", true
	}
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		if ute.Field == "" {
			return "the result is not a JSON object", true
		}
		return fmt.Sprintf("the result's member %q has the wrong type", ute.Field), true
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "the result is not valid JSON", true
	}
	s := err.Error()
	for _, p := range []struct{ text, what string }{
		{"unrecognized content type ", "a content item has the type %s, which MCP does not define"},
		{"invalid content type ", "a content item has the type %s, which a tool's result may not hold"},
	} {
		if _, typ, ok := strings.Cut(s, p.text); ok {
			return fmt.Sprintf(p.what, quoteCut(strings.Trim(typ, `"`), maxQuote)), true
		}
	}
	if strings.Contains(s, "nil content") {
		return "a content item is null", true
	}
	return "", false
}

// undecodable reports whether text, the error of a call over HTTP, says
// that an answer of the server was not a JSON-RPC message the SDK could
// decode (the SDK then ends the session), what it was in plain words (a
// noun phrase), and whether that answer was the call's own, as its trace tells.
func undecodable(text string, tr *callTrace) (what string, own, ok bool) {
	var detail string
	switch {
	case strings.Contains(text, "failed to decode response: "):
		_, detail, _ = strings.Cut(text, "failed to decode response: ")
		tr.mu.Lock()
		own = tr.end
		tr.mu.Unlock()
	case strings.Contains(text, "failed to decode event: "):
		_, detail, _ = strings.Cut(text, "failed to decode event: ")
		tr.mu.Lock()
		own = tr.stream
		tr.mu.Unlock()
	case strings.Contains(text, "unsupported content type "):
		// Only the call whose answer it was is told.
		_, typ, _ := strings.Cut(text, "unsupported content type ")
		return fmt.Sprintf("a body of the content type %s, neither JSON nor an event stream", quoteCut(strings.Trim(typ, `"`), maxQuote)), true, true
	default:
		return "", false, false
	}
	switch {
	case strings.Contains(detail, "exceeded maximum nesting depth"):
		what = "a message nested deeper than " + maxDepthText + " levels (the most toolsvc reads)"
	case strings.Contains(detail, "invalid message version tag"), strings.Contains(detail, "cannot unmarshal"),
		strings.Contains(detail, "invalid request"):
		what = "JSON that is not a JSON-RPC 2.0 message"
	default:
		what = "text that is not JSON"
	}
	return what, own, true
}

// answerTo reports, from head, the start of a line a stdio server wrote,
// whether the line may be the answer to the request with the given id:
// not when it is a message of the server's own (it has a method) or an
// answer to another id; when that cannot be told from head, it may.
func answerTo(head string, id jsonrpc.ID) bool {
	dec := json.NewDecoder(strings.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return true
	}
	for {
		t, err := dec.Token()
		key, isKey := t.(string)
		if err != nil || !isKey {
			return true
		}
		switch key {
		case "method":
			return false
		case "id":
			t, err := dec.Token()
			if err != nil {
				return true
			}
			other, err := jsonrpc.MakeID(t)
			return err != nil || other == id
		}
		// Skip a plain value; a nested one (params, result) comes after
		// the id in every server seen, and ends the search.
		if t, err := dec.Token(); err != nil {
			return true
		} else if _, nested := t.(json.Delim); nested {
			return true
		}
	}
}
