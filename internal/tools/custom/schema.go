package custom

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// noParameters is the schema of an export that declares none.
const noParameters = `{"type":"object","properties":{},"additionalProperties":false}`

// schemaJSON converts a parameters schema written in YAML to JSON,
// keeping the order of keys (models read properties in order). A string
// is taken as JSON text. The registry compiles the result.
func schemaJSON(n *yaml.Node) (json.RawMessage, error) {
	if n.Kind == 0 {
		return json.RawMessage(noParameters), nil
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		raw := bytes.TrimSpace([]byte(n.Value))
		if !json.Valid(raw) {
			return nil, fmt.Errorf("line %d: a string schema must be JSON text", n.Line)
		}
		var c bytes.Buffer
		_ = json.Compact(&c, raw)
		return c.Bytes(), nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a JSON Schema object with type: object", n.Line)
	}
	var buf bytes.Buffer
	if err := writeJSON(&buf, n, 0, 0); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

const (
	maxSchemaDepth = 64
	// maxSchemaBytes bounds a schema as JSON. An alias (*a) repeats what
	// its anchor (&a) holds, so a few hundred bytes of YAML whose anchors
	// each repeat the one before nine times came to gigabytes: 58 s and
	// 4.7 GB to load 8 levels, and 3.8 MB served in every catalog from 6.
	// The schema goes into every prompt that offers the tool; 1 MiB is
	// sixteen times what an MCP server's tool may have by default.
	maxSchemaBytes = 1 << 20
)

// writeJSON writes n as JSON. via is the line of the alias being
// expanded, if any, which is where a schema too large is said to be.
func writeJSON(buf *bytes.Buffer, n *yaml.Node, depth, via int) error {
	if depth > maxSchemaDepth {
		return fmt.Errorf("line %d: nested more than %d levels", n.Line, maxSchemaDepth)
	}
	// Checked before each node: what one node writes itself is at most
	// one scalar of the file.
	if buf.Len() > maxSchemaBytes {
		if via == 0 {
			return fmt.Errorf("line %d: the schema is more than %d bytes as JSON: make it smaller", n.Line, maxSchemaBytes)
		}
		return fmt.Errorf("line %d: the schema is more than %d bytes as JSON through this alias (an alias *name repeats all its anchor &name holds, and the aliases in it): make it smaller, or use fewer aliases", via, maxSchemaBytes)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return writeJSON(buf, n.Alias, depth+1, cmp.Or(via, n.Line))
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return writeJSON(buf, n.Content[0], depth+1, via)
	case yaml.MappingNode:
		buf.WriteByte('{')
		seen := make(map[string]bool, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return fmt.Errorf("line %d: keys must be plain strings (no merge keys or complex keys)", k.Line)
			}
			if seen[k.Value] {
				return fmt.Errorf("line %d: key %q appears twice", k.Line, k.Value)
			}
			seen[k.Value] = true
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := marshal(k.Value)
			buf.Write(kb)
			buf.WriteByte(':')
			if err := writeJSON(buf, v, depth+1, via); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, c, depth+1, via); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	case yaml.ScalarNode:
		var v any
		if n.Tag == "!!str" || n.Tag == "!!binary" || strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!") {
			v = n.Value
		} else if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %v", n.Line, err)
		}
		b, err := marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %q is not a JSON value: %v", n.Line, n.Value, err)
		}
		buf.Write(b)
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	return nil
}

// marshal is json.Marshal without HTML escaping: schemas are read by
// models and operators, not browsers.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}
