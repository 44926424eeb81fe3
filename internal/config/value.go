package config

import (
	"fmt"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// LookupEnv reads one environment variable, like os.LookupEnv; the main
// program builds it from its environment, so packages never read the
// process environment themselves.
type LookupEnv func(name string) (string, bool)

// Value is a setting, such as an HTTP header, given literally or read
// when the configuration loads from an environment variable or a file,
// so that secrets need not be written into the YAML:
//
//	Authorization: "Bearer literal"          # shorthand for value:
//	Authorization: {value: "Bearer literal"}
//	Authorization: {valueFrom: {env: API_TOKEN}}
//	Authorization: {valueFrom: {file: /run/secrets/token}}
//
// Resolved values are secrets: never log them.
type Value struct {
	// Literal is the value given as such.
	Literal *string
	// Env names the environment variable holding the value.
	Env string
	// File names the file holding the value; one trailing newline is
	// removed.
	File string
	// Line is where the value is declared.
	Line int
}

// UnmarshalYAML reads the shorthand or the mapping form, strictly.
func (v *Value) UnmarshalYAML(n *yaml.Node) error {
	v.Line = n.Line
	switch n.Kind {
	case yaml.ScalarNode:
		s := n.Value
		v.Literal = &s
		return nil
	case yaml.MappingNode:
	default:
		return fmt.Errorf("line %d: want a string, {value: ...} or {valueFrom: {env: NAME} | {file: path}}", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "value":
			if val.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: value must be a string", val.Line)
			}
			s := val.Value
			v.Literal = &s
		case "valueFrom":
			if val.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: valueFrom must be {env: NAME} or {file: path}", val.Line)
			}
			for j := 0; j+1 < len(val.Content); j += 2 {
				fk, fv := val.Content[j], val.Content[j+1]
				if fv.Kind != yaml.ScalarNode || fv.Value == "" {
					return fmt.Errorf("line %d: valueFrom.%s must be a non-empty string", fv.Line, fk.Value)
				}
				switch fk.Value {
				case "env":
					v.Env = fv.Value
				case "file":
					v.File = fv.Value
				default:
					return fmt.Errorf("line %d: field %s not found in valueFrom (want env or file)", fk.Line, fk.Value)
				}
			}
		default:
			return fmt.Errorf("line %d: field %s not found in a value (want value or valueFrom)", k.Line, k.Value)
		}
	}
	n2 := 0
	for _, set := range []bool{v.Literal != nil, v.Env != "", v.File != ""} {
		if set {
			n2++
		}
	}
	if n2 != 1 {
		return fmt.Errorf("line %d: give exactly one of value, valueFrom.env and valueFrom.file", n.Line)
	}
	return nil
}

// Resolve returns the value: the literal, the environment variable
// (through lookup; nil finds none) or the file's contents (a relative
// path is taken from baseDir; see ReadFile). Errors name the variable or
// file, never a value.
func (v Value) Resolve(lookup LookupEnv, baseDir string) (string, error) {
	switch {
	case v.Literal != nil:
		return *v.Literal, nil
	case v.Env != "":
		if lookup != nil {
			if s, ok := lookup(v.Env); ok {
				return s, nil
			}
		}
		return "", fmt.Errorf("line %d: environment variable %s is not set", v.Line, v.Env)
	case v.File != "":
		p := v.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		b, err := ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("line %d: reading value file: %w", v.Line, err)
		}
		s := strings.TrimSuffix(string(b), "\n")
		return strings.TrimSuffix(s, "\r"), nil
	}
	return "", fmt.Errorf("line %d: empty value", v.Line)
}

// Environ resolves the environment entries of a program: "NAME" passes
// the service's own variable NAME when it is set (an allowlist), and
// "NAME=value" sets a literal value. Names are returned as given; the
// caller checks what a program may receive.
func Environ(entries []string, lookup LookupEnv) ([]string, error) {
	var out []string
	for _, e := range entries {
		name, value, literal := strings.Cut(e, "=")
		if name == "" || strings.ContainsAny(name, " \t\x00") {
			return nil, fmt.Errorf("environment entry %q: want NAME or NAME=value", e)
		}
		if literal {
			out = append(out, name+"="+value)
			continue
		}
		if lookup == nil {
			continue
		}
		if v, ok := lookup(name); ok {
			out = append(out, name+"="+v)
		}
	}
	return out, nil
}

// Dir returns the directory of the resource's file, against which the
// relative paths a resource names are resolved.
func (r *Resource) Dir() string {
	abs, err := filepath.Abs(r.File)
	if err != nil {
		return filepath.Dir(r.File)
	}
	return filepath.Dir(abs)
}
