package mcpbridge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// registryTools makes the registry tools of server s from the latest
// listing of the connection.
func (c *conn) registryTools(s *Server) []*registry.Tool {
	c.mu.Lock()
	listing, listingHash := c.tools, c.toolsHash
	c.mu.Unlock()
	// A server chooses its listing, and may change it every second:
	// what is logged about one listing is bounded.
	notes := 0
	note := func(level slog.Level, msg string, args ...any) {
		if notes++; notes <= maxListingNotes {
			// The server chooses the names and much of the errors'
			// text: a listing of long names (1 MiB each, anew every
			// second) wrote 8 MB of log a second.
			for i, a := range args {
				switch a := a.(type) {
				case string:
					args[i] = cutText(a, maxLogSchema)
				case error:
					args[i] = cutText(a.Error(), maxLogSchema)
				}
			}
			c.m.log.Log(context.Background(), level, msg, append([]any{"server", s.name}, args...)...)
		}
	}
	defer func() {
		if notes > maxListingNotes {
			c.m.log.Warn("mcp: more notes on the server's tools not logged", "server", s.name, "notes", notes-maxListingNotes, "reason", fmt.Sprintf("more than %d for one listing", maxListingNotes))
		}
	}()
	var picked []*mcp.Tool
	listed := make(map[string]bool, len(listing))
	for _, t := range listing {
		if listed[t.Name] {
			// Both would get one registry name, which breaks the whole
			// registry; and a call names one tool only.
			note(slog.LevelWarn, "mcp: tool left out", "tool", t.Name, "error", "the server lists this name more than once; the first is kept")
			continue
		}
		listed[t.Name] = true
		if included(&s.spec, t.Name) {
			picked = append(picked, t)
		}
	}
	names := exportNames(s.name, picked)
	for _, remote := range c.noteRenames(names) {
		note(slog.LevelInfo, "mcp: tool renamed to fit the naming rule", "tool", remote, "as", registry.JoinName(s.name, names[remote]))
	}
	out := make([]*registry.Tool, 0, len(picked))
	spent, nodes, cut := 0, 0, 0
	for _, t := range picked {
		export := names[t.Name]
		tool, texts, err := definition(s, t, export)
		cut += texts
		if err == nil {
			in, out := schemaNodes(tool.Parameters), schemaNodes(tool.OutputSchema)
			switch work := in*in + out*out; {
			case spent+work > maxServerSchemaWork:
				err = fmt.Errorf("the schemas of the server's tools listed before it are as large as toolsvc compiles for one server (the squares of their numbers of subschemas add up to more than %d)", maxServerSchemaWork)
			case nodes+in+out > maxServerSchemaNodes:
				err = fmt.Errorf("the schemas of the server's tools listed before it are as large as toolsvc compiles for one server (more than %d subschemas in all)", maxServerSchemaNodes)
			default:
				spent += work
				nodes += in + out
			}
		}
		if err == nil {
			remote, tier := t.Name, tool.Tier
			tool.Handler = registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
				return c.call(ctx, remote, tier, req)
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
					note(slog.LevelWarn, "mcp: output schema left out; the tool's outputs are not checked", "tool", t.Name, "error", err, "outputSchema", string(out))
					err = nil
				}
			}
		}
		if err != nil {
			note(slog.LevelWarn, "mcp: tool left out", "tool", t.Name, "error", err)
			continue
		}
		out = append(out, tool)
	}
	if cut > 0 && c.noteCuts(fmt.Sprintf("%s/%d", listingHash, s.maxDescription())) {
		// One line for the listing, without the texts: they are what is
		// too long.
		c.m.log.Warn("mcp: tool descriptions cut", "server", s.name, "descriptions", cut, "maxDescriptionBytes", s.maxDescription())
	}
	return out
}

// noteCuts reports whether the cuts of the listing and bound that key
// names are not yet logged, and remembers them: the registry is rebuilt
// whenever any server's tools change, and each rebuild makes every
// server's tools again.
func (c *conn) noteCuts(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cutsLogged == key {
		return false
	}
	c.cutsLogged = key
	return true
}

// probe reports what the registry would refuse of tool, which must not
// break the whole registry: it tries the tool alone (on a copy, which
// registration changes). Its parameters and output schemas are compiled
// as every custom tool's are, and refused when their $refs go round in a
// cycle.
func probe(tool *registry.Tool) error {
	if _, err := schemaSize("parameters", tool.Parameters); err != nil {
		return err
	}
	if _, err := schemaSize("output", tool.OutputSchema); err != nil {
		return err
	}
	if err := refCycle("parameters", tool.Parameters); err != nil {
		return err
	}
	if err := refCycle("output", tool.OutputSchema); err != nil {
		return err
	}
	p := *tool
	_, err := registry.New(registry.Defaults{}, &p)
	return err
}

// Bounds on the schemas of an imported tool, which the server chooses.
// The JSON Schema compiler keeps the subschemas it has seen in a list that
// it searches by JSON pointer for each new one, so its work grows with the
// square of their number and with the length of their pointers, and more
// than that with their depth: 20,000 properties took 5 s to compile, a
// schema nested 1,000 deep 8 s, and a registry build compiles each schema
// several times, uninterruptibly, the service's start included.
const (
	maxSchemaNodes = 1024
	maxSchemaDepth = 64
	// maxSchemaPointers bounds the sum of the lengths of the subschemas'
	// JSON pointers: long names repeat in every pointer below them.
	maxSchemaPointers = 256 << 10
	// maxServerSchemaWork bounds the work of compiling the schemas of one
	// server's tools, the squares of their numbers of subschemas added up:
	// eight schemas at the bound above, or thousands of small ones.
	maxServerSchemaWork = 8 * maxSchemaNodes * maxSchemaNodes
	// maxServerSchemaNodes bounds the subschemas of one server's tools
	// together: each costs the same whatever its schema's size (checking
	// it against the meta-schema, every build), and 9,990 tools of 28
	// each, well within the bound above, took 16 s of CPU and 2 GB for
	// every rebuild of the catalog, which a server may ask for once a
	// second. This many cost about what the bound above does (0.5 s).
	maxServerSchemaNodes = 16 * maxSchemaNodes
	// maxLogSchema bounds a schema, a name or an error quoted in the log.
	maxLogSchema = 1 << 10
	// maxListingNotes bounds what is logged about one listing (tools
	// renamed or left out): a server that lists 10,000 new names a second
	// wrote 7,000 lines a second.
	maxListingNotes = 20
)

// schemaNodes is the number of subschemas of a schema, as counted
// against maxServerSchemaWork and maxServerSchemaNodes; a schema refused
// for its size counts for nothing, since it is never compiled.
func schemaNodes(raw json.RawMessage) int {
	n, err := schemaSize("", raw)
	if err != nil {
		return 0
	}
	return n
}

// schemaSize returns the number of subschemas of a schema, or why it is
// larger than the bounds above. A schema that is not JSON is left to the
// registry, which says why.
func schemaSize(what string, raw json.RawMessage) (int, error) {
	if len(raw) == 0 {
		return 0, nil
	}
	var doc any
	if json.Unmarshal(raw, &doc) != nil {
		return 0, nil
	}
	var nodes, pointers, depth int
	var walk func(v any, level, ptr int)
	walk = func(v any, level, ptr int) {
		depth = max(depth, level)
		switch v := v.(type) {
		case map[string]any:
			nodes++
			pointers += ptr
			if level >= maxSchemaDepth {
				return
			}
			for k, m := range v {
				walk(m, level+1, ptr+1+len(k))
			}
		case []any:
			if level >= maxSchemaDepth {
				return
			}
			for i, m := range v {
				walk(m, level+1, ptr+1+len(strconv.Itoa(i)))
			}
		case bool: // true and false are schemas too
			nodes++
			pointers += ptr
		}
	}
	walk(doc, 0, 1)
	switch {
	case depth >= maxSchemaDepth:
		return 0, fmt.Errorf("%s schema: nested deeper than %d levels, more than toolsvc compiles for an imported tool", what, maxSchemaDepth)
	case nodes > maxSchemaNodes:
		return 0, fmt.Errorf("%s schema: %d subschemas, more than the %d toolsvc compiles for an imported tool", what, nodes, maxSchemaNodes)
	case pointers > maxSchemaPointers:
		return 0, fmt.Errorf("%s schema: its subschemas' JSON pointers add up to %d bytes, more than the %d toolsvc compiles for an imported tool", what, pointers, maxSchemaPointers)
	}
	return nodes, nil
}

// refCycle reports a schema in which a $ref leads, directly or through
// others (and allOf, anyOf, oneOf, not, if/then/else, dependentSchemas,
// which apply to the same value), back to itself without descending into
// a member or an item. The compiler accepts it, but validating any value
// that reaches it fails ("causing reference cycle"), which would blame
// the arguments of every call. A schema that does not compile is left to
// the registry, which says why.
func refCycle(what string, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil
	}
	const url = "toolsvc:///schema.json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if c.AddResource(url, doc) != nil {
		return nil
	}
	root, err := c.Compile(url)
	if err != nil {
		return nil
	}
	if cycle := findRefCycle(root); cycle != nil {
		locs := make([]string, len(cycle))
		for i, s := range cycle {
			_, frag, _ := strings.Cut(s.Location, "#")
			locs[i] = "#" + frag
		}
		return fmt.Errorf("%s schema: its $refs go round in a cycle (%s) without descending into a value, so no value could be validated against it", what, strings.Join(locs, " → "))
	}
	if n := inPlaceFanOut(root); n > maxSchemaNodes {
		return fmt.Errorf("%s schema: its $refs apply more than %d subschemas to one value, more than toolsvc validates for an imported tool", what, maxSchemaNodes)
	}
	return nil
}

// inPlaceFanOut returns how many schemas, counted with repeats, the
// schema that applies the most to one value does (itself, its $refs,
// allOf, anyOf and the like, and theirs), at most maxSchemaNodes+1. The
// validator follows every path: $defs of a few nodes each applying the
// next one twice (allOf: [{$ref: next}, {$ref: next}]) took 2^24
// validations, 11 s of CPU, for every call of the tool. root must have no
// cycle of in-place references.
func inPlaceFanOut(root *jsonschema.Schema) int {
	memo := map[*jsonschema.Schema]int{}
	var count func(s *jsonschema.Schema) int
	count = func(s *jsonschema.Schema) int {
		if n, ok := memo[s]; ok {
			return n
		}
		n := 1
		for _, next := range registry.SchemasInPlace(s) {
			n = min(n+count(next), maxSchemaNodes+1)
		}
		memo[s] = n
		return n
	}
	most := 0
	all := []*jsonschema.Schema{root}
	seen := map[*jsonschema.Schema]bool{root: true}
	for i := 0; i < len(all); i++ {
		most = max(most, count(all[i]))
		for _, next := range append(registry.SchemasInPlace(all[i]), registry.SchemasBelow(all[i])...) {
			if !seen[next] {
				seen[next] = true
				all = append(all, next)
			}
		}
	}
	return most
}

// noLoader loads no external schema.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %q is not loaded", url)
}

// findRefCycle returns the schemas of a cycle of in-place references
// reachable from root (the first one repeated at the end), or nil.
func findRefCycle(root *jsonschema.Schema) []*jsonschema.Schema {
	// Every schema reachable from root, in the order found.
	all := []*jsonschema.Schema{root}
	seen := map[*jsonschema.Schema]bool{root: true}
	for i := 0; i < len(all); i++ {
		for _, next := range append(registry.SchemasInPlace(all[i]), registry.SchemasBelow(all[i])...) {
			if !seen[next] {
				seen[next] = true
				all = append(all, next)
			}
		}
	}
	// A depth-first search along in-place references only: one that
	// meets a schema on its own path has found a cycle.
	const (
		visiting = 1
		done     = 2
	)
	state := map[*jsonschema.Schema]int{}
	var path []*jsonschema.Schema
	var visit func(s *jsonschema.Schema) []*jsonschema.Schema
	visit = func(s *jsonschema.Schema) []*jsonschema.Schema {
		switch state[s] {
		case visiting:
			i := slices.Index(path, s)
			return append(slices.Clone(path[i:]), s)
		case done:
			return nil
		}
		state[s] = visiting
		path = append(path, s)
		for _, next := range registry.SchemasInPlace(s) {
			if cycle := visit(next); cycle != nil {
				return cycle
			}
		}
		path = path[:len(path)-1]
		state[s] = done
		return nil
	}
	for _, s := range all {
		if cycle := visit(s); cycle != nil {
			return cycle
		}
	}
	return nil
}

func included(s *Spec, name string) bool {
	if len(s.Include) > 0 && !registry.MatchAny(s.Include, name) {
		return false
	}
	return !registry.MatchAny(s.Exclude, name)
}

// definition maps one MCP tool onto a registry tool (without handler),
// and says how many of its texts (description, title) were cut at the
// server's maxDescriptionBytes.
func definition(s *Server, t *mcp.Tool, export string) (*registry.Tool, int, error) {
	over := s.spec.Tools[t.Name]
	params := json.RawMessage(`{"type":"object"}`)
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, 0, fmt.Errorf("input schema: %w", err)
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
			return nil, 0, fmt.Errorf("output schema: %w", err)
		}
		output = b
	}
	// Schemas are not cut, as descriptions are: that would change what
	// they accept.
	if len(params) > s.maxSchema() {
		return nil, 0, fmt.Errorf("input schema: %d bytes of JSON, more than the server's maxSchemaBytes (%d)", len(params), s.maxSchema())
	}
	if len(output) > s.maxSchema() {
		return nil, 0, fmt.Errorf("output schema: %d bytes of JSON, more than the server's maxSchemaBytes (%d)", len(output), s.maxSchema())
	}
	desc := strings.TrimSpace(t.Description)
	if desc == "" {
		desc = strings.TrimSpace(t.Title)
	}
	if desc == "" {
		desc = fmt.Sprintf("The tool %s of the MCP server %s (it has no description).", t.Name, s.name)
	}
	cut := 0
	desc, clipped := clipDescription(desc, s.maxDescription())
	if clipped {
		cut++
	}
	ann := annotations(t)
	if ann != nil {
		if ann.Title, clipped = clipDescription(ann.Title, s.maxDescription()); clipped {
			cut++
		}
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
		Annotations:       ann,
		Tags:              s.spec.Tags,
		Type:              Type,
		Source:            s.source,
	}
	return &registry.Tool{Definition: def}, cut, nil
}

// clipDescription returns text, a server's, cut at limit bytes on a
// character boundary and marked when it is longer, and whether it was.
func clipDescription(text string, limit int) (string, bool) {
	if len(text) <= limit {
		return text, false
	}
	return fmt.Sprintf("%s… [description truncated: %d bytes total]", strings.TrimRightFunc(registry.Clip(text, limit), unicode.IsSpace), len(text)), true
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
// collide get a hash suffix too: a tool whose name needs no change keeps
// it (a.b does not take a_b's name), and of the others the first in name
// order keeps the plain name, so the mapping depends only on the listing.
func exportNames(server string, tools []*mcp.Tool) map[string]string {
	remote := make([]string, len(tools))
	for i, t := range tools {
		remote[i] = t.Name
	}
	slices.Sort(remote)
	room := registry.MaxNameLength - len(server) - len(registry.Separator)
	out := make(map[string]string, len(remote))
	used := map[string]bool{}
	// First the names that stay as they are: they are unique (a listing
	// holds each name once), and a tool's own name is the one to keep.
	for _, name := range remote {
		if len(name) <= room && sanitize(name) == name && registry.ValidateNamePart(name) == nil {
			used[name] = true
			out[name] = name
		}
	}
	for _, name := range remote {
		if _, done := out[name]; done {
			continue
		}
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
	// Written as they are made, text items without a map each: a
	// server's answer of many small items held as maps took ten times
	// its size, per call, until it was encoded.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	b.WriteByte('[')
	for i, c := range res.Content {
		if i > 0 {
			b.WriteByte(',')
		}
		t, text := c.(*mcp.TextContent)
		var v any
		if text {
			b.WriteString(`{"type":"text","text":`)
			v = t.Text
		} else {
			v = contentItem(c)
		}
		if err := enc.Encode(v); err != nil {
			return nil, err
		}
		b.Truncate(b.Len() - 1) // the encoder's newline
		if text {
			b.WriteByte('}')
		}
	}
	b.WriteByte(']')
	return json.RawMessage(b.Bytes()), nil
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

// noteRenames returns, sorted, the remote names that names (remote to
// export) maps to another name and that were not mapped so by the
// previous listing, so each mapping is logged once while it lasts. Only
// the mappings of this listing are kept: a server that lists new names
// on every change grew the ones remembered without end (10,000 more a
// listing, a listing a second).
func (c *conn) noteRenames(names map[string]string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := map[string]string{}
	var fresh []string
	for remote, export := range names {
		if remote == export {
			continue
		}
		cur[remote] = export
		if c.renamed[remote] != export {
			fresh = append(fresh, remote)
		}
	}
	c.renamed = cur
	slices.Sort(fresh)
	return fresh
}
