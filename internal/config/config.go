// Package config reads toolsvc resources: multi-document YAML files, each
// document with apiVersion toolsvc/v1, a kind and a spec. It knows nothing
// of what a kind means; each consumer decodes its own spec, strictly, and
// every error names the file and line.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"
)

// APIVersion is the only apiVersion toolsvc reads.
const APIVersion = "toolsvc/v1"

// The kinds of resource.
const (
	KindTool      = "Tool"
	KindPolicy    = "Policy"
	KindCaller    = "Caller"
	KindMCPServer = "MCPServer"
	KindNotifier  = "Notifier"
	KindIssuer    = "Issuer"
)

// Kinds returns every known kind.
func Kinds() []string {
	return []string{KindTool, KindPolicy, KindCaller, KindMCPServer, KindNotifier, KindIssuer}
}

// Metadata names a resource.
type Metadata struct {
	Name        string            `yaml:"name"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Resource is one document.
type Resource struct {
	APIVersion string
	Kind       string
	Metadata   Metadata
	// File and Line say where the document starts.
	File  string
	Line  int
	spec  *yaml.Node
	src   *source
	index int // the document's position in the file
}

// source is what the resources of one file share: its bytes, and a strict
// decoder left after the document it decoded last. Decoding a resource
// decodes its whole document again from the file (see Resource.Decode);
// resources decoded in file order, as a program reads a kind after
// another, move the decoder on, so a pass over a file's resources reads
// it once, where starting from the top for each one took time quadratic
// in its documents (1000 Callers in one file: 12.5 s).
type source struct {
	data []byte
	mu   sync.Mutex
	dec  *yaml.Decoder
	next int // the position of the document dec reads next
}

// decode decodes the document at index into v.
func (s *source) decode(index int, v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dec == nil || index < s.next {
		s.dec = yaml.NewDecoder(bytes.NewReader(s.data))
		s.dec.KnownFields(true)
		s.next = 0
	}
	for ; s.next < index; s.next++ {
		var skip yaml.Node
		if err := s.dec.Decode(&skip); err != nil {
			s.dec = nil
			return err
		}
	}
	s.next++
	err := s.dec.Decode(v)
	if err != nil {
		s.dec = nil // start again at the next call, whatever was read
	}
	return err
}

// Source is "file:line" of the resource.
func (r *Resource) Source() string { return fmt.Sprintf("%s:%d", r.File, r.Line) }

// Decode decodes the resource's spec into v (a pointer), refusing unknown
// fields. Errors name the file and the line of the offending value.
func (r *Resource) Decode(v any) error {
	if r.spec == nil {
		return r.Errorf("has no spec")
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("config: Decode needs a non-nil pointer, got %T", v)
	}
	// Decode the whole document again, from the file's own bytes, into a
	// wrapper whose spec field has v's type: known-field checking reaches
	// every level and line numbers stay the file's.
	wrapper := reflect.StructOf([]reflect.StructField{
		{Name: "APIVersion", Type: reflect.TypeFor[string](), Tag: `yaml:"apiVersion"`},
		{Name: "Kind", Type: reflect.TypeFor[string](), Tag: `yaml:"kind"`},
		{Name: "Metadata", Type: reflect.TypeFor[Metadata](), Tag: `yaml:"metadata"`},
		{Name: "Spec", Type: rv.Elem().Type(), Tag: `yaml:"spec"`},
	})
	w := reflect.New(wrapper)
	if err := r.src.decode(r.index, w.Interface()); err != nil {
		return fmt.Errorf("%s: %s %q: %s", r.File, r.Kind, r.Metadata.Name, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	rv.Elem().Set(w.Elem().Field(3))
	return nil
}

// SpecLine returns the line where the spec starts.
func (r *Resource) SpecLine() int {
	if r.spec == nil {
		return r.Line
	}
	return r.spec.Line
}

// Errorf returns an error that names the resource's file and line.
func (r *Resource) Errorf(format string, args ...any) error {
	return fmt.Errorf("%s: %s %q: %s", r.Source(), r.Kind, r.Metadata.Name, fmt.Sprintf(format, args...))
}

// Load reads every resource from paths (files, or directories whose *.yaml
// and *.yml files are read in name order).
func Load(paths ...string) ([]*Resource, error) { return Options{}.Load(paths...) }

// Files returns the files Load reads of path: path itself when it is a
// file, else the *.yaml and *.yml files under it, hidden ones skipped, in
// name order.
func Files(path string) ([]string, error) { return expand(path) }

// IsYAML reports whether name is a file Load reads in a directory: one
// ending in .yaml or .yml.
func IsYAML(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

func expand(p string) ([]string, error) {
	info, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !info.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// Hidden entries are skipped: editor back-ups, and the timestamped
		// directory a Kubernetes ConfigMap mount keeps its files in (its
		// keys are also linked at the top, so they would be read twice).
		if path != p && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() && IsYAML(path) {
			files = append(files, path)
		}
		return nil
	})
	slices.Sort(files)
	return files, err
}

// LoadFile reads the resources of one file (see ReadFile).
func LoadFile(path string) ([]*Resource, error) {
	b, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, b)
}

// Parse reads the resources of one file's contents.
func Parse(file string, data []byte) ([]*Resource, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	src := &source{data: data}
	var out []*Resource
	for index := 0; ; index++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s", file, strings.TrimPrefix(err.Error(), "yaml: "))
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind == 0 {
			continue
		}
		r, err := parseDoc(file, doc.Content[0])
		if err != nil {
			return nil, err
		}
		if r != nil {
			r.src, r.index = src, index
			out = append(out, r)
		}
	}
}

func parseDoc(file string, n *yaml.Node) (*Resource, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	r := &Resource{File: file, Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: a resource must be a mapping with apiVersion, kind, metadata and spec", file, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "apiVersion":
			r.APIVersion = v.Value
		case "kind":
			r.Kind = v.Value
		case "metadata":
			if err := v.Decode(&r.Metadata); err != nil {
				return nil, fmt.Errorf("%s:%d: metadata: %s", file, v.Line, strings.TrimPrefix(err.Error(), "yaml: "))
			}
		case "spec":
			r.spec = v
		default:
			return nil, fmt.Errorf("%s:%d: unknown field %q (want apiVersion, kind, metadata, spec)", file, k.Line, k.Value)
		}
	}
	switch {
	case r.APIVersion != APIVersion:
		return nil, fmt.Errorf("%s:%d: apiVersion must be %q, got %q", file, n.Line, APIVersion, r.APIVersion)
	case !slices.Contains(Kinds(), r.Kind):
		return nil, fmt.Errorf("%s:%d: unknown kind %q (want one of %s)", file, n.Line, r.Kind, strings.Join(Kinds(), ", "))
	case r.Metadata.Name == "":
		return nil, fmt.Errorf("%s:%d: %s has no metadata.name", file, n.Line, r.Kind)
	}
	return r, nil
}
