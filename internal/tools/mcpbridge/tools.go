package mcpbridge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// registryTools makes the registry tools of server s from the latest
// listing of the connection.
func (c *conn) registryTools(s *Server) []*registry.Tool {
	c.mu.Lock()
	listing := c.tools
	c.mu.Unlock()
	var picked []*mcp.Tool
	for _, t := range listing {
		if included(&s.spec, t.Name) {
			picked = append(picked, t)
		}
	}
	names := exportNames(s.name, picked)
	out := make([]*registry.Tool, 0, len(picked))
	for _, t := range picked {
		export := names[t.Name]
		if export != t.Name && c.noteRename(t.Name, export) {
			c.m.log.Info("mcp: tool renamed to fit the naming rule", "server", s.name, "tool", t.Name, "as", registry.JoinName(s.name, export))
		}
		tool, err := definition(s, t, export)
		if err == nil {
			remote := t.Name
			tool.Handler = registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
				return c.call(ctx, remote, req)
			})
			err = probe(tool)
			if err != nil && len(tool.OutputSchema) > 0 {
				// An output schema toolsvc cannot use (not a valid
				// schema, or a root other than an object, which MCP
				// allows since 2026-07-28) costs the tool its output
				// check, not its place in the catalog.
				out := tool.OutputSchema
				tool.OutputSchema = nil
				if probe(tool) == nil {
					c.m.log.Warn("mcp: output schema left out; the tool's outputs are not checked", "server", s.name, "tool", t.Name, "error", err, "outputSchema", string(out))
					err = nil
				}
			}
		}
		if err != nil {
			c.m.log.Warn("mcp: tool left out", "server", s.name, "tool", t.Name, "error", err)
			continue
		}
		out = append(out, tool)
	}
	return out
}

// probe reports what the registry would refuse of tool, which must not
// break the whole registry: it tries the tool alone (on a copy, which
// registration changes). Its parameters and output schemas are compiled
// as every custom tool's are.
func probe(tool *registry.Tool) error {
	p := *tool
	_, err := registry.New(registry.Defaults{}, &p)
	return err
}

func included(s *Spec, name string) bool {
	if len(s.Include) > 0 && !registry.MatchAny(s.Include, name) {
		return false
	}
	return !registry.MatchAny(s.Exclude, name)
}

// definition maps one MCP tool onto a registry tool (without handler).
func definition(s *Server, t *mcp.Tool, export string) (*registry.Tool, error) {
	over := s.spec.Tools[t.Name]
	params := json.RawMessage(`{"type":"object"}`)
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("input schema: %w", err)
		}
		params = b
	}
	// The server's outputSchema, when it declares one, is the tool's:
	// the executor checks every structured output against it (a mismatch
	// is E_TOOL naming the tool as faulty) and /mcp serves it.
	var output json.RawMessage
	if t.OutputSchema != nil {
		b, err := json.Marshal(t.OutputSchema)
		if err != nil {
			return nil, fmt.Errorf("output schema: %w", err)
		}
		output = b
	}
	desc := strings.TrimSpace(t.Description)
	if desc == "" {
		desc = strings.TrimSpace(t.Title)
	}
	if desc == "" {
		desc = fmt.Sprintf("The tool %s of the MCP server %s (it has no description).", t.Name, s.name)
	}
	def := registry.Definition{
		Name:              registry.JoinName(s.name, export),
		Description:       desc,
		Parameters:        params,
		OutputSchema:      output,
		Tier:              tier(s, t),
		Timeout:           orDefault(over.Timeout, s.spec.Timeout),
		MaxOutputBytes:    orDefault(over.MaxOutputBytes, s.spec.MaxOutputBytes),
		ErrorMessageLimit: orDefault(over.ErrorMessageLimit, s.spec.ErrorMessageLimit),
		Annotations:       annotations(t),
		Tags:              s.spec.Tags,
		Type:              Type,
		Source:            s.source,
	}
	return &registry.Tool{Definition: def}, nil
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v != zero {
		return v
	}
	return def
}

// tier is the operator's choice for the tool or the server, else what
// the server's annotations claim.
func tier(s *Server, t *mcp.Tool) registry.Tier {
	if o := s.spec.Tools[t.Name].Tier; o != "" {
		return o
	}
	if s.spec.Tier != "" {
		return s.spec.Tier
	}
	if a := t.Annotations; a != nil {
		if a.ReadOnlyHint {
			return registry.ReadOnly
		}
		if a.DestructiveHint != nil && *a.DestructiveHint {
			return registry.Privileged
		}
	}
	return registry.SideEffecting
}

func annotations(t *mcp.Tool) *registry.Annotations {
	a := t.Annotations
	if a == nil {
		return nil
	}
	ro, idem := a.ReadOnlyHint, a.IdempotentHint
	return &registry.Annotations{Title: a.Title, ReadOnlyHint: &ro, DestructiveHint: a.DestructiveHint,
		IdempotentHint: &idem, OpenWorldHint: a.OpenWorldHint}
}

// exportNames maps each tool's name to the export part of its registry
// name. Names that break the naming rule are sanitised: characters other
// than letters, digits, '_' and '-' become '_', runs of '_' shrink to one,
// '_' is trimmed from the ends, and a name too long for the 64-character
// limit is cut and given a hash suffix. Tools whose sanitised names
// collide get a hash suffix too (the first in name order keeps the plain
// name), so the mapping depends only on the listing.
func exportNames(server string, tools []*mcp.Tool) map[string]string {
	remote := make([]string, len(tools))
	for i, t := range tools {
		remote[i] = t.Name
	}
	slices.Sort(remote)
	room := registry.MaxNameLength - len(server) - len(registry.Separator)
	out := make(map[string]string, len(remote))
	used := map[string]bool{}
	for _, name := range remote {
		s := sanitize(name)
		if len(s) > room || registry.ValidateNamePart(s) != nil {
			s = withHash(s, name, room)
		}
		if used[s] {
			s = withHash(s, name, room)
		}
		for n := 0; used[s]; n++ {
			s = withHash(s, fmt.Sprintf("%s#%d", name, n), room)
		}
		used[s] = true
		out[name] = s
	}
	return out
}

func sanitize(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	for strings.Contains(s, "__") {
		s = strings.ReplaceAll(s, "__", "_")
	}
	s = strings.Trim(s, "_")
	if s == "" {
		s = "tool"
	}
	return s
}

// withHash cuts s to fit room with a "-" and six hex digits of the hash
// of seed.
func withHash(s, seed string, room int) string {
	sum := sha256.Sum256([]byte(seed))
	suffix := "-" + hex.EncodeToString(sum[:3])
	keep := max(0, room-len(suffix))
	if len(s) > keep {
		s = strings.TrimRight(s[:keep], "_")
	}
	return s + suffix
}

// resultOutput maps a tools/call result onto an output or an error:
// isError is E_TOOL with the text as message; structured content is the
// output when there is some; a single text is a string; several contents
// are a list (binary data is described, not returned).
func resultOutput(res *mcp.CallToolResult) (any, error) {
	if res.IsError {
		msg := strings.TrimSpace(texts(res.Content))
		if msg == "" {
			msg = "the tool reported an error without a message"
		}
		return nil, &registry.Error{Code: registry.CodeTool, Message: msg}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err == nil {
			return json.RawMessage(b), nil
		}
	}
	switch len(res.Content) {
	case 0:
		return nil, nil
	case 1:
		if t, ok := res.Content[0].(*mcp.TextContent); ok {
			return t.Text, nil
		}
	}
	items := make([]any, 0, len(res.Content))
	for _, c := range res.Content {
		items = append(items, contentItem(c))
	}
	return items, nil
}

func texts(cs []mcp.Content) string {
	var parts []string
	for _, c := range cs {
		if t, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func contentItem(c mcp.Content) map[string]any {
	switch c := c.(type) {
	case *mcp.TextContent:
		return map[string]any{"type": "text", "text": c.Text}
	case *mcp.ImageContent:
		return map[string]any{"type": "image", "mimeType": c.MIMEType, "bytes": len(c.Data), "note": "binary content not shown"}
	case *mcp.AudioContent:
		return map[string]any{"type": "audio", "mimeType": c.MIMEType, "bytes": len(c.Data), "note": "binary content not shown"}
	case *mcp.ResourceLink:
		return map[string]any{"type": "resource_link", "uri": c.URI, "name": c.Name, "mimeType": c.MIMEType, "description": c.Description}
	case *mcp.EmbeddedResource:
		item := map[string]any{"type": "resource"}
		if r := c.Resource; r != nil {
			item["uri"], item["mimeType"] = r.URI, r.MIMEType
			if r.Text != "" {
				item["text"] = r.Text
			} else if len(r.Blob) > 0 {
				item["bytes"], item["note"] = len(r.Blob), "binary content not shown"
			}
		}
		return item
	}
	return map[string]any{"type": fmt.Sprintf("%T", c), "note": "content of this type is not shown"}
}

// noteRename reports whether the mapping of remote to export is new, so
// each mapping is logged once per connection.
func (c *conn) noteRename(remote, export string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.renamed == nil {
		c.renamed = map[string]string{}
	}
	if c.renamed[remote] == export {
		return false
	}
	c.renamed[remote] = export
	return true
}
