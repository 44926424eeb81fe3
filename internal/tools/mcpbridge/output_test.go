package mcpbridge

import (
	"encoding/json"
	"io"
	"strconv"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkManyContentItems is the memory an answer of many small text
// items takes to become a tool's output (380,000 items, about 12 MB of
// JSON on the wire), written as the executor writes outputs.
func BenchmarkManyContentItems(b *testing.B) {
	res := &mcp.CallToolResult{}
	for i := range 380000 {
		res.Content = append(res.Content, &mcp.TextContent{Text: "t" + strconv.Itoa(i)})
	}
	b.ReportAllocs()
	for b.Loop() {
		out, err := resultOutput(res)
		if err != nil {
			b.Fatal(err)
		}
		// As the executor writes it.
		enc := json.NewEncoder(io.Discard)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(out); err != nil {
			b.Fatal(err)
		}
	}
}

// Several contents are a list, text as it is and binary data described.
func TestContentList(t *testing.T) {
	out, err := resultOutput(&mcp.CallToolResult{Content: []mcp.Content{
		&mcp.TextContent{Text: "a <b> & \"c\"\n"},
		&mcp.ImageContent{MIMEType: "image/png", Data: []byte{1, 2, 3}},
		&mcp.TextContent{Text: ""},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"text","text":"a <b> & \"c\"\n"},{"bytes":3,"mimeType":"image/png","note":"binary content not shown","type":"image"},{"type":"text","text":""}]`
	if got := string(out.(json.RawMessage)); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
