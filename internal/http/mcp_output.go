package http

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// readOnHint finds the read-on hints of cut-output markers in a result's
// text, whose quotes may be escaped when the output is JSON.
var readOnHint = regexp.MustCompile(`read on with ` + regexp.QuoteMeta(registry.ReadOnTool) +
	` (\{\\?"toolCallId\\?":\\?"[A-Za-z0-9_.:-]{1,256}\\?"(?:,\\?"stream\\?":\\?"[a-z]+\\?")?,\\?"offset\\?":\d+\})`)

// operatorHint finds the hints of markers whose caller cannot call
// result__read: the route itself, with the id path-escaped.
var operatorHint = regexp.MustCompile(`read it with GET /calls/([^/?\s\]]{1,800})/output\?offset=\d+(?:&stream=([a-z]+))?`)

// linkCutOutputs adds to a tools/call result, for every kept output its
// markers point to, a resource_link to GET /calls/{id}/output on this
// server (base), so a client can fetch the whole output as well as the
// model can read on with result__read.
func linkCutOutputs(res *mcp.CallToolResult, base string) *mcp.CallToolResult {
	if res == nil || len(res.Content) == 0 {
		return res
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok || !strings.Contains(text.Text, "[output truncated: ") {
		return res
	}
	type hint struct {
		ToolCallID string `json:"toolCallId"`
		Stream     string `json:"stream"`
	}
	var hints []hint
	for _, m := range readOnHint.FindAllStringSubmatch(text.Text, 8) {
		var h hint
		if json.Unmarshal([]byte(strings.ReplaceAll(m[1], `\"`, `"`)), &h) == nil {
			hints = append(hints, h)
		}
	}
	for _, m := range operatorHint.FindAllStringSubmatch(text.Text, 8) {
		if id, err := url.PathUnescape(m[1]); err == nil {
			hints = append(hints, hint{ToolCallID: id, Stream: m[2]})
		}
	}
	seen := map[string]bool{}
	for _, hint := range hints {
		stream := hint.Stream
		if stream == "" {
			stream = registry.SpillStreamOutput
		}
		uri := base + "/calls/" + url.PathEscape(hint.ToolCallID) + "/output?stream=" + stream
		if seen[uri] {
			continue
		}
		seen[uri] = true
		res.Content = append(res.Content, &mcp.ResourceLink{
			URI: uri, Name: hint.ToolCallID + " " + stream, MIMEType: "application/octet-stream",
			Title:       "Full " + stream + " of call " + hint.ToolCallID,
			Description: "The whole output that the result shows cut (GET it with the same credentials; offset and limit select a range).",
		})
	}
	return res
}

// requestBase is the scheme and host a request reached this server at.
func requestBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
