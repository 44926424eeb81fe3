// Package custom turns `kind: Tool` resources into registry tools, so
// operators add tools by writing YAML. A resource declares one or more
// exports (name, description, JSON Schema parameters, optional tier) and
// one backend:
//
//   - exec: a program run through the process sandbox, like shell__exec's
//     programs (own process group killed on timeout, scrubbed environment,
//     bounded capture, Landlock and rlimits where the kernel has them),
//     with the call envelope as JSON on stdin and its output on stdout;
//   - http: a POST of the call envelope to an operator's URL, with
//     configured headers and trace context, redirects not followed, the
//     response bounded while it is read.
//
// The executor applies validation, policy, timeout, truncation, metrics and
// traces to these tools as to every other; backends only run the call.
package custom

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.yaml.in/yaml/v3"

	"github.com/toolsvc/toolsvc/internal/config"
	"github.com/toolsvc/toolsvc/internal/registry"
	"github.com/toolsvc/toolsvc/internal/sandbox"
	"github.com/toolsvc/toolsvc/internal/tools/workspace"
)

// The Definition.Type of the tools of each backend.
const (
	TypeExec = "exec"
	TypeHTTP = "http"
)

// Options are what custom tools need from the service.
type Options struct {
	// ProcessConcurrency is the maxConcurrency of exec tools that set
	// none (each call starts a sandboxed process); 0 leaves the registry
	// default.
	ProcessConcurrency int
	// Workspace maps a call's instance key to the directory an exec tool
	// runs in (its HOME, TMPDIR and only writable place). Required for
	// exec tools.
	Workspace *workspace.Workspace
	// Sandbox runs exec tools' programs. Required for exec tools.
	Sandbox *sandbox.Sandbox
	// LookupEnv reads the service's environment for env allowlists and
	// valueFrom.env; nil finds no variable.
	LookupEnv config.LookupEnv
	// Propagator injects the call's trace context into HTTP requests and,
	// as TRACEPARENT/TRACESTATE, into programs' environments; nil is W3C
	// Trace Context.
	Propagator propagation.TextMapPropagator
	// Transport carries HTTP tools' requests; nil makes one per resource
	// (no proxy from the environment).
	Transport http.RoundTripper
	// UserAgent is sent by HTTP tools.
	UserAgent string
	// Logger may be nil.
	Logger *slog.Logger
}

// Envelope is what a custom tool receives: on stdin for exec tools, as
// the POST body for HTTP tools.
type Envelope struct {
	// ToolName is the full name, e.g. "weather__forecast".
	ToolName string `json:"toolName"`
	// Export is the part after "__", e.g. "forecast".
	Export string `json:"export"`
	// Arguments are the call's arguments, already validated against the
	// export's schema.
	Arguments  json.RawMessage      `json:"arguments"`
	ToolCallID string               `json:"toolCallId"`
	Context    registry.CallContext `json:"context"`
}

// Spec is the spec of a `kind: Tool` resource.
type Spec struct {
	// Tier is the tier of every export that gives none.
	Tier              registry.Tier `yaml:"tier"`
	Timeout           time.Duration `yaml:"timeout"`
	MaxOutputBytes    int           `yaml:"maxOutputBytes"`
	ErrorMessageLimit int           `yaml:"errorMessageLimit"`
	MaxConcurrency    int           `yaml:"maxConcurrency"`
	Tags              []string      `yaml:"tags"`
	// Exactly one backend.
	Exec    *ExecSpec    `yaml:"exec"`
	HTTP    *HTTPSpec    `yaml:"http"`
	Exports []ExportSpec `yaml:"exports"`
}

// ExportSpec declares one function of a tool resource.
type ExportSpec struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Parameters is a JSON Schema (written as YAML, or as a JSON string)
	// whose root is type: object; absent means no arguments.
	Parameters yaml.Node `yaml:"parameters"`
	// OutputSchema, optional, is a JSON Schema (root type: object) that
	// every output must match; served as MCP's outputSchema.
	OutputSchema yaml.Node        `yaml:"outputSchema"`
	Tier         registry.Tier    `yaml:"tier"`
	Annotations  *AnnotationsSpec `yaml:"annotations"`
}

// AnnotationsSpec are the MCP hints of an export.
type AnnotationsSpec struct {
	Title           string `yaml:"title"`
	ReadOnlyHint    *bool  `yaml:"readOnlyHint"`
	DestructiveHint *bool  `yaml:"destructiveHint"`
	IdempotentHint  *bool  `yaml:"idempotentHint"`
	OpenWorldHint   *bool  `yaml:"openWorldHint"`
}

// ExecSpec is the exec backend: a program, never a shell.
type ExecSpec struct {
	// Command is argv. Command[0] is a program name looked up in
	// sandbox.DefaultPath, an absolute path, or a path relative to the
	// YAML file (e.g. "./weather.py"). A script's "#!" interpreter is
	// allowed to execute automatically.
	Command []string `yaml:"command"`
	// Dir is the working directory (relative to the YAML file); it becomes
	// readable. Empty is the call's workspace directory.
	Dir string `yaml:"dir"`
	// Env lists "NAME" (pass the service's variable) or "NAME=value".
	Env []string `yaml:"env"`
	// AllowExec lists further programs the program may run (names in
	// DefaultPath or paths); each one's loader or interpreter comes along.
	AllowExec []string `yaml:"allowExec"`
	// ReadPaths lists further files or directories the program may read
	// (relative to the YAML file).
	ReadPaths []string `yaml:"readPaths"`
}

// HTTPSpec is the http backend.
type HTTPSpec struct {
	// URL receives a POST of the Envelope. It is the operator's and
	// trusted: internal addresses are allowed, redirects are not followed.
	URL string `yaml:"url"`
	// Headers are sent with every request; values may come from the
	// environment or files (config.Value) and are never logged.
	Headers map[string]config.Value `yaml:"headers"`
}

// backend runs one export's calls.
type backend interface {
	run(ctx context.Context, req *registry.Request, export string) (any, error)
}

// Tools reads a `kind: Tool` resource into its tools, one per export,
// named {metadata.name}__{export}. Everything that can be checked at load
// is: names, tiers, schemas' JSON form, programs and paths, URLs, header
// sources. Errors name the file and line.
func Tools(r *config.Resource, o Options) ([]*registry.Tool, error) {
	if r.Kind != config.KindTool {
		return nil, r.Errorf("is not a %s resource", config.KindTool)
	}
	if err := registry.ValidateResourceName(r.Metadata.Name); err != nil {
		return nil, r.Errorf("metadata.name %v", err)
	}
	var spec Spec
	if err := r.Decode(&spec); err != nil {
		return nil, err
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	var (
		b    backend
		kind string
		err  error
	)
	switch {
	case spec.Exec != nil && spec.HTTP != nil:
		return nil, r.Errorf("give one backend, exec or http, not both")
	case spec.Exec != nil:
		kind = TypeExec
		b, err = newExec(r, spec.Exec, o)
		if spec.MaxConcurrency == 0 {
			spec.MaxConcurrency = o.ProcessConcurrency
		}
	case spec.HTTP != nil:
		kind = TypeHTTP
		b, err = newHTTP(r, spec.HTTP, o)
	default:
		return nil, r.Errorf("has no backend: add exec (a program) or http (a URL)")
	}
	if err != nil {
		return nil, err
	}
	if spec.Tier != "" && !spec.Tier.Valid() {
		return nil, r.Errorf("unknown tier %q (want read_only, side_effecting or privileged)", spec.Tier)
	}
	if spec.Timeout < 0 || spec.MaxOutputBytes < 0 || spec.ErrorMessageLimit < 0 || spec.MaxConcurrency < 0 {
		return nil, r.Errorf("timeout, maxOutputBytes, errorMessageLimit and maxConcurrency must not be negative")
	}
	if len(spec.Exports) == 0 {
		return nil, r.Errorf("has no exports: declare at least one under exports")
	}
	tools := make([]*registry.Tool, 0, len(spec.Exports))
	for i, ex := range spec.Exports {
		if err := registry.ValidateNamePart(ex.Name); err != nil {
			return nil, r.Errorf("exports[%d].name %v", i, err)
		}
		tier := ex.Tier
		if tier == "" {
			tier = spec.Tier
		}
		if tier == "" {
			return nil, r.Errorf("export %s has no tier: set tier (read_only, side_effecting or privileged) on the export or the spec", ex.Name)
		}
		if !tier.Valid() {
			return nil, r.Errorf("export %s: unknown tier %q (want read_only, side_effecting or privileged)", ex.Name, tier)
		}
		params, err := schemaJSON(&ex.Parameters)
		if err != nil {
			return nil, r.Errorf("export %s: parameters: %v", ex.Name, err)
		}
		var output json.RawMessage
		if ex.OutputSchema.Kind != 0 {
			if output, err = schemaJSON(&ex.OutputSchema); err != nil {
				return nil, r.Errorf("export %s: outputSchema: %v", ex.Name, err)
			}
		}
		if err := registry.ValidateName(registry.JoinName(r.Metadata.Name, ex.Name)); err != nil {
			return nil, r.Errorf("export %s: %v", ex.Name, err)
		}
		export := ex.Name
		run := b.run
		t := &registry.Tool{
			Definition: registry.Definition{
				Name:              registry.JoinName(r.Metadata.Name, ex.Name),
				Description:       strings.TrimSpace(ex.Description),
				Parameters:        params,
				OutputSchema:      output,
				Tier:              tier,
				Timeout:           spec.Timeout,
				MaxOutputBytes:    spec.MaxOutputBytes,
				ErrorMessageLimit: spec.ErrorMessageLimit,
				MaxConcurrency:    spec.MaxConcurrency,
				Annotations:       ex.Annotations.definition(),
				Tags:              spec.Tags,
				Type:              kind,
				Source:            r.Source(),
			},
			Handler: registry.Func(func(ctx context.Context, req *registry.Request) (any, error) {
				return run(ctx, req, export)
			}),
		}
		tools = append(tools, t)
	}
	return tools, nil
}

func (a *AnnotationsSpec) definition() *registry.Annotations {
	if a == nil {
		return nil
	}
	return &registry.Annotations{Title: a.Title, ReadOnlyHint: a.ReadOnlyHint, DestructiveHint: a.DestructiveHint,
		IdempotentHint: a.IdempotentHint, OpenWorldHint: a.OpenWorldHint}
}

// envelope returns the JSON a backend sends for req.
func envelope(req *registry.Request, export string) ([]byte, error) {
	args := req.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(Envelope{ToolName: req.Name, Export: export, Arguments: args, ToolCallID: req.CallID, Context: req.Context})
	return buf.Bytes(), err
}

// output reads what a backend returned: JSON when it is JSON, otherwise
// the text; nothing is null. cut says the text was cut at the limit, so
// it is returned as text for the executor to truncate and mark.
func output(b []byte, cut bool) any {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	if !cut && json.Valid(b) {
		var c bytes.Buffer
		if json.Compact(&c, b) == nil {
			return json.RawMessage(c.Bytes())
		}
	}
	return string(b)
}

func backendError(format string, args ...any) error {
	return &registry.Error{Code: registry.CodeTool, Message: fmt.Sprintf(format, args...),
		Suggestion: "This is a problem of the tool's installation, not of the call; do not retry, tell the user the tool is unavailable."}
}
