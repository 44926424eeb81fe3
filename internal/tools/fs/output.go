package fs

// outputSchemas are the declared output schemas of the fs tools, by
// export: what each handler returns, which the executor checks after
// every run and MCP clients receive as outputSchema.
var outputSchemas = map[string]string{
	"read": `{"type": "object", "required": ["path", "content", "encoding", "size", "offset", "bytesRead", "truncated"],
  "properties": {"path": {"type": "string"}, "content": {"type": "string"}, "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
    "size": {"type": "integer"}, "offset": {"type": "integer"}, "bytesRead": {"type": "integer"}, "truncated": {"type": "boolean"},
    "nextOffset": {"type": "integer", "description": "Where the next read continues, when truncated."}}}`,
	"list": `{"type": "object", "required": ["path", "entries", "count", "truncated"],
  "properties": {"path": {"type": "string"},
    "entries": {"type": "array", "items": {"type": "object", "required": ["path", "type"],
      "properties": {"path": {"type": "string"}, "type": {"type": "string"}, "size": {"type": "integer"}}}},
    "count": {"type": "integer"}, "truncated": {"type": "boolean"}, "reason": {"type": "string"}, "skippedDirs": {"type": "integer"}}}`,
	"stat": `{"type": "object", "required": ["path", "exists"],
  "properties": {"path": {"type": "string"}, "exists": {"type": "boolean"}, "type": {"type": "string"}, "size": {"type": "integer"},
    "mode": {"type": "string"}, "modTime": {"type": "string"}, "linkTarget": {"type": "string"}}}`,
	"search": `{"type": "object", "required": ["matches", "matchCount", "filesScanned", "bytesScanned", "truncated"],
  "properties": {"matches": {"type": "array", "items": {"type": "object", "required": ["path", "line", "column", "text"],
      "properties": {"path": {"type": "string"}, "line": {"type": "integer"}, "column": {"type": "integer"}, "text": {"type": "string"}}}},
    "matchCount": {"type": "integer"}, "filesScanned": {"type": "integer"}, "bytesScanned": {"type": "integer"},
    "truncated": {"type": "boolean"}, "reason": {"type": "string"}}}`,
	"write": `{"type": "object", "required": ["path", "bytesWritten", "size", "created", "mode"],
  "properties": {"path": {"type": "string"}, "bytesWritten": {"type": "integer"}, "size": {"type": "integer"},
    "created": {"type": "boolean"}, "mode": {"type": "string"}}}`,
	"edit": `{"type": "object", "required": ["path", "line", "replaced", "size"],
  "properties": {"path": {"type": "string"}, "line": {"type": "integer"}, "replaced": {"type": "integer"}, "size": {"type": "integer"}}}`,
	"delete": `{"type": "object", "required": ["path", "type", "deleted"],
  "properties": {"path": {"type": "string"}, "type": {"type": "string"}, "deleted": {"type": "boolean"}}}`,
}
