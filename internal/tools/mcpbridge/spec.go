// Package mcpbridge imports the tools of MCP servers (`kind: MCPServer`
// resources, over stdio or streamable HTTP, with
// github.com/modelcontextprotocol/go-sdk) into the registry, named
// {server}__{tool}, so the executor applies validation, policy, timeout,
// truncation, metrics and traces to them as to every other tool.
//
// Connections outlive a registry: a Manager keeps one client session per
// server, keyed by the server's transport settings, so a configuration
// reload that leaves a server unchanged keeps its connection. It lists
// each server's tools, refreshes the listing on notifications/
// tools/list_changed, reconnects with exponential backoff when a
// connection is lost, and calls Options.OnChange whenever a server's tools
// change, so the main program can rebuild the registry. A server that was
// never reached has no tools to list: its tools are absent, its status
// says why, and the manager keeps retrying. A server that was reached and
// then lost keeps its tools, whose calls fail with a clear error until it
// is back.
package mcpbridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
)

// Type is the Definition.Type of imported tools.
const Type = "mcp"

// Spec is the spec of a `kind: MCPServer` resource.
type Spec struct {
	// Exactly one transport.
	Stdio *StdioSpec `yaml:"stdio"`
	HTTP  *HTTPSpec  `yaml:"http"`
	// Include and Exclude are globs (path.Match) over the server's own tool
	// names; empty Include takes every tool, Exclude wins.
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
	// Tier pins the tier of every tool of the server; otherwise it comes
	// from the tool's annotations (readOnlyHint: read_only,
	// destructiveHint: privileged, else side_effecting), which are the
	// server's own claims.
	Tier              registry.Tier `yaml:"tier"`
	Timeout           time.Duration `yaml:"timeout"`
	MaxOutputBytes    int           `yaml:"maxOutputBytes"`
	ErrorMessageLimit int           `yaml:"errorMessageLimit"`
	Tags              []string      `yaml:"tags"`
	// MaxDescriptionBytes bounds the description (and the title) of each
	// of the server's tools as toolsvc serves it; a longer one is cut on a
	// character boundary and marked. 0 is DefaultMaxDescriptionBytes.
	MaxDescriptionBytes int `yaml:"maxDescriptionBytes"`
	// MaxSchemaBytes bounds the JSON of each of the server's tools' input
	// and output schemas; a tool with a larger one is left out. 0 is
	// DefaultMaxSchemaBytes.
	MaxSchemaBytes int `yaml:"maxSchemaBytes"`
	// Tools overrides settings per tool, by the server's tool name.
	Tools map[string]ToolOverride `yaml:"tools"`
}

// DefaultMaxDescriptionBytes bounds the description of an imported tool
// unless its server's maxDescriptionBytes says otherwise. The server
// chooses the text, and it goes, for every tool the server lists, into
// every catalog fetch (GET /tools in every format, /mcp) and, through the
// gateway, into every prompt that offers the tool: OpenAI and Anthropic
// put tool definitions in the model's context, where they cost tokens on
// every turn. Only the 16 MiB bound on a whole listing bounded it: one
// tool's 4 MiB description made every catalog 4 MiB. 8 KiB is about
// 2,000 tokens, six times the longest description of a built-in tool
// (shell__exec's, 1.4 KiB): room for a careful description with
// examples. A server that needs more can be given more.
const DefaultMaxDescriptionBytes = 8 << 10

// DefaultMaxSchemaBytes bounds the input and output schemas of an
// imported tool unless its server's maxSchemaBytes says otherwise. A
// tool's input schema goes into every prompt that offers the tool, as its
// description does, and the bound on its subschemas (maxSchemaNodes)
// leaves their texts (descriptions, enum values, examples) unbounded.
// Unlike a description, a schema cannot be cut without changing what it
// accepts, so a tool with a larger one is left out. 64 KiB is eight
// descriptions' worth, and holds an enum of a few thousand names.
const DefaultMaxSchemaBytes = 64 << 10

// StdioSpec starts the server as a child process speaking MCP on its
// stdin and stdout.
type StdioSpec struct {
	// Command is a program name (looked up in sandbox.DefaultPath), an
	// absolute path or a path relative to the YAML file.
	Command string   `yaml:"command"`
	Args    []string `yaml:"args"`
	// Env lists "NAME" (pass the service's variable) or "NAME=value". The
	// process gets only these and PATH.
	Env []string `yaml:"env"`
	// Dir is the working directory (relative to the YAML file); empty is
	// the service's.
	Dir string `yaml:"dir"`
}

// HTTPSpec reaches the server over streamable HTTP.
type HTTPSpec struct {
	// URL is the server's MCP endpoint. It is the operator's and trusted;
	// redirects are not followed.
	URL     string                  `yaml:"url"`
	Headers map[string]config.Value `yaml:"headers"`
}

// ToolOverride changes how one tool of a server is served.
type ToolOverride struct {
	Tier              registry.Tier `yaml:"tier"`
	Timeout           time.Duration `yaml:"timeout"`
	MaxOutputBytes    int           `yaml:"maxOutputBytes"`
	ErrorMessageLimit int           `yaml:"errorMessageLimit"`
}

// Server is a decoded, resolved MCPServer resource, ready for a Manager.
type Server struct {
	name   string
	source string
	spec   Spec
	// Resolved transport settings; secrets among them are never logged.
	command string
	args    []string
	env     []string
	dir     string
	url     string
	headers map[string]string
	key     string
	// endpoint is url without what may be secret (see describe);
	// urlForms are the ways errors quote url, longest first.
	endpoint string
	urlForms []string
}

// Name returns the server's name, the prefix of its tools' names.
func (s *Server) Name() string { return s.name }

// Source returns the file and line that declared the server.
func (s *Server) Source() string { return s.source }

// Decode reads and checks a `kind: MCPServer` resource: name, transport,
// globs, tiers, the program and the header sources (resolved now, through
// lookup). It does not contact the server. Errors name the file and line.
func Decode(r *config.Resource, lookup config.LookupEnv) (*Server, error) {
	if r.Kind != config.KindMCPServer {
		return nil, r.Errorf("is not an %s resource", config.KindMCPServer)
	}
	if err := registry.ValidateResourceName(r.Metadata.Name); err != nil {
		return nil, r.Errorf("metadata.name %v", err)
	}
	var spec Spec
	if err := r.Decode(&spec); err != nil {
		return nil, err
	}
	s := &Server{name: r.Metadata.Name, source: r.Source(), spec: spec}
	switch {
	case spec.Stdio != nil && spec.HTTP != nil:
		return nil, r.Errorf("give one transport, stdio or http, not both")
	case spec.Stdio != nil:
		if spec.Stdio.Command == "" {
			return nil, r.Errorf("stdio.command is empty")
		}
		name := spec.Stdio.Command
		if strings.Contains(name, "/") && !filepath.IsAbs(name) {
			name = filepath.Join(r.Dir(), name)
		}
		cmd, err := sandbox.LookPath(name)
		if err != nil {
			return nil, r.Errorf("stdio.command: %v", err)
		}
		s.command, s.args = cmd, slices.Clone(spec.Stdio.Args)
		env, err := config.Environ(spec.Stdio.Env, lookup)
		if err != nil {
			return nil, r.Errorf("stdio.env: %v", err)
		}
		s.env = env
		if spec.Stdio.Dir != "" {
			s.dir = spec.Stdio.Dir
			if !filepath.IsAbs(s.dir) {
				s.dir = filepath.Join(r.Dir(), s.dir)
			}
		}
	case spec.HTTP != nil:
		u, err := url.Parse(spec.HTTP.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, r.Errorf("http.url %q must be an absolute http or https URL", registry.RedactURL(spec.HTTP.URL))
		}
		s.url = spec.HTTP.URL
		s.endpoint = endpoint(u)
		for _, f := range []string{s.url, u.String(), u.Redacted()} {
			if !slices.Contains(s.urlForms, f) {
				s.urlForms = append(s.urlForms, f)
			}
		}
		slices.SortFunc(s.urlForms, func(a, b string) int { return len(b) - len(a) })
		s.headers = map[string]string{}
		for name, v := range spec.HTTP.Headers {
			val, err := v.Resolve(lookup, r.Dir())
			if err != nil {
				return nil, r.Errorf("http.headers.%s: %v", name, err)
			}
			if strings.ContainsAny(val, "\r\n\x00") || strings.ContainsAny(name, " :\r\n\x00") {
				return nil, r.Errorf("http.headers.%s: invalid header name or value", name)
			}
			s.headers[name] = val
		}
	default:
		return nil, r.Errorf("has no transport: add stdio (command, args, env) or http (url, headers)")
	}
	for _, g := range append(slices.Clone(spec.Include), spec.Exclude...) {
		if _, err := path.Match(g, ""); err != nil {
			return nil, r.Errorf("include/exclude glob %q: %v", g, err)
		}
	}
	tiers := map[string]registry.Tier{"spec": spec.Tier}
	for name, o := range spec.Tools {
		tiers["tools."+name] = o.Tier
	}
	if spec.MaxDescriptionBytes < 0 {
		return nil, r.Errorf("maxDescriptionBytes must not be negative (0 is the default, %d)", DefaultMaxDescriptionBytes)
	}
	if spec.MaxSchemaBytes < 0 {
		return nil, r.Errorf("maxSchemaBytes must not be negative (0 is the default, %d)", DefaultMaxSchemaBytes)
	}
	for where, t := range tiers {
		if t != "" && !t.Valid() {
			return nil, r.Errorf("%s.tier: unknown tier %q (want read_only, side_effecting or privileged)", where, t)
		}
	}
	s.key = s.connectionKey()
	return s, nil
}

// connectionKey identifies what a connection depends on: a server whose
// key did not change keeps its connection across reloads. Filters and
// overrides are not part of it; they apply when the registry is built.
func (s *Server) connectionKey() string {
	b, _ := json.Marshal(struct {
		Name    string
		Command string
		Args    []string
		Env     []string
		Dir     string
		URL     string
		Headers map[string]string
	}{s.name, s.command, s.args, s.env, s.dir, s.url, s.headers})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// maxDescription is the bound on each of the server's tools' descriptions.
func (s *Server) maxDescription() int {
	if s.spec.MaxDescriptionBytes > 0 {
		return s.spec.MaxDescriptionBytes
	}
	return DefaultMaxDescriptionBytes
}

// maxSchema is the bound on each of the server's tools' schemas.
func (s *Server) maxSchema() int {
	if s.spec.MaxSchemaBytes > 0 {
		return s.spec.MaxSchemaBytes
	}
	return DefaultMaxSchemaBytes
}

// transport names the kind of transport, for status and logs.
func (s *Server) transport() string {
	if s.url != "" {
		return "http"
	}
	return "stdio"
}

// endpoint is u as describe shows it: user information and query
// redacted (registry.RedactURL), and of the path only its last segment
// when that is short ("/mcp", "/.../sse"): hosted MCP servers put a key
// in the path as others do in the query (https://host/mcp/<key>/sse).
func endpoint(u *url.URL) string {
	e := *u
	e.Path, e.RawPath, e.Fragment = "", "", ""
	segments := strings.Split(strings.Trim(u.EscapedPath(), "/"), "/")
	switch last := segments[len(segments)-1]; {
	case last == "":
	case len(last) > maxShownSegment:
		e.Path = "/..."
	case len(segments) == 1:
		e.Path = "/" + last
	default:
		e.Path = "/.../" + last
	}
	return registry.RedactURL(e.String())
}

// maxShownSegment is the longest last segment of an MCP server's path
// that is shown; a longer one may be a key.
const maxShownSegment = 16

// describe names the endpoint without secrets, for logs and status: a URL
// as endpoint shows it, a program without its arguments.
func (s *Server) describe() string {
	if s.url != "" {
		return s.endpoint
	}
	return s.command
}

// redact returns text, an error's, with the server's URL, quoted by
// failed requests, named as describe does, and other URLs redacted as
// everywhere (no query, no user information). It is what the status
// (served by the unauthenticated /readyz), the log and a failed call's
// message say.
func (s *Server) redact(text string) string {
	for _, f := range s.urlForms {
		text = strings.ReplaceAll(text, f, s.endpoint)
	}
	return registry.RedactURLs(text)
}
