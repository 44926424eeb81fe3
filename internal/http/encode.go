package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime"
	"strings"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// encode writes v as JSON with status.
func encode(w http.ResponseWriter, status int, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode response: %w", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err := w.Write(buf.Bytes())
	return err
}

// readBody reads r's body, at most limit bytes, and then yields the
// processor.
//
// Once a handler has read a body to its end, net/http starts a goroutine
// that reads the connection (to notice the client leaving), and when the
// handler returns, it waits for that goroutine to have begun before it
// reads the connection's next request. The new goroutine is first in line
// on this P, but the first goroutine the handler then wakes (the runner of a
// tool) takes that place and sends it to the back of the run queue, so the
// connection's next request would wait behind every call queued: under
// load, most of the p99 of POST /calls (BENCHMARKS.md, "Where the time
// goes"). Yielding once here lets it begin first. It is only a hint to the
// scheduler: nothing waits on it, whatever net/http does.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if b, ok := r.Body.(*readBodyAhead); ok && b.limit == limit && b.off == 0 {
		return b.body, b.err // admitCall read it, and yielded
	}
	if r.ContentLength > limit {
		// Refused before reading: a client that declared more than the
		// limit and sends less would otherwise hold the read until it
		// times out.
		return nil, &http.MaxBytesError{Limit: limit}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	runtime.Gosched()
	return body, err
}

// readJSON reads a request body that must be JSON, within the size and
// depth limits, and returns it.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if err := requireJSON(r); err != nil {
		return nil, err
	}
	body, err := readBody(w, r, s.deps.Limits.MaxRequestBytes)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, err
		}
		return nil, problem(kindUnreadableBody, "could not read the request body: it stopped arriving before the server's read deadline, or its framing is broken").because(err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, problem(kindInvalidJSON, "request body is empty; send a JSON object")
	}
	if err := checkDepth(body, s.deps.Limits.MaxJSONDepth); err != nil {
		return nil, err
	}
	if !json.Valid(body) {
		return nil, problem(kindInvalidJSON, "request body is not valid JSON: "+syntaxError(body))
	}
	return body, nil
}

func syntaxError(body []byte) string {
	var v any
	err := json.Unmarshal(body, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "unknown error"
}

func requireJSON(r *http.Request) error {
	// A compressed body would be read as JSON and refused for its first
	// byte ("invalid character '\x1f'"), which does not say what to change.
	for _, ce := range r.Header.Values("Content-Encoding") {
		for c := range strings.SplitSeq(ce, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				return problem(kindUnsupportedMediaType, fmt.Sprintf("Content-Encoding %q is not supported; send the JSON body uncompressed, without Content-Encoding", clipTo(ce, maxEchoBytes)))
			}
		}
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return problem(kindUnsupportedMediaType, "missing Content-Type; send Content-Type: application/json")
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return problem(kindUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not supported; send Content-Type: application/json", clipTo(ct, maxEchoBytes)))
	}
	if msg := badCharset(params); msg != "" {
		return problem(kindUnsupportedMediaType, msg)
	}
	return nil
}

// badCharset says why a JSON body whose Content-Type has the parameters
// params cannot be read, or "" when it can: JSON is UTF-8 (RFC 8259,
// section 8.1), and a body declared in another charset would be read as
// UTF-8 all the same and refused for a byte that does not say why
// ("invalid character 'ÿ'"), or, worse, read as other text than was meant.
func badCharset(params map[string]string) string {
	cs, ok := params["charset"]
	if !ok || strings.EqualFold(cs, "utf-8") {
		return ""
	}
	return fmt.Sprintf("Content-Type has charset %s; JSON is read only as UTF-8, so send the body in UTF-8, as Content-Type: application/json (charset=utf-8 or none)", clipTo(cs, maxEchoBytes))
}

// checkDepth refuses JSON nested deeper than max, before any decoder
// spends memory or stack on it.
func checkDepth(b []byte, max int) error {
	if !registry.WithinDepth(b, max) {
		return problem(kindTooDeep, fmt.Sprintf("request body nests deeper than %d levels", max))
	}
	return nil
}
