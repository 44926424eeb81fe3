package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// UnmarshalYAML decodes a rule strictly (unknown fields are errors) and
// records its line, so errors about the rule can point at it.
func (r *Rule) UnmarshalYAML(n *yaml.Node) error {
	type plain Rule
	var p plain
	if err := decodeStrict(n, &p, "policy.Rule"); err != nil {
		return err
	}
	*r = Rule(p)
	r.Line = n.Line
	return nil
}

// UnmarshalYAML decodes an example strictly and records its line.
func (e *Example) UnmarshalYAML(n *yaml.Node) error {
	type plain Example
	var p plain
	if err := decodeStrict(n, &p, "policy.Example"); err != nil {
		return err
	}
	*e = Example(p)
	e.Line = n.Line
	return nil
}

// UnmarshalYAML decodes an example's caller strictly.
func (c *ExampleCaller) UnmarshalYAML(n *yaml.Node) error {
	type plain ExampleCaller
	return decodeStrict(n, (*plain)(c), "policy.ExampleCaller")
}

// UnmarshalYAML decodes an example's context strictly.
func (c *ExampleContext) UnmarshalYAML(n *yaml.Node) error {
	type plain ExampleContext
	return decodeStrict(n, (*plain)(c), "policy.ExampleContext")
}

// decodeStrict decodes n into v (a pointer to a struct), refusing keys
// that v's yaml tags do not name. A custom unmarshaler is decoded without
// the strictness of the decoder that called it, so the check is done here.
func decodeStrict(n *yaml.Node, v any, typeName string) error {
	if n.Kind == yaml.MappingNode {
		known := yamlKeys(reflect.TypeOf(v).Elem())
		var errs []string
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if !slices.Contains(known, k.Value) {
				errs = append(errs, fmt.Sprintf("line %d: field %s not found in type %s (want one of %s)",
					k.Line, k.Value, typeName, strings.Join(known, ", ")))
			}
		}
		if len(errs) > 0 {
			return &yaml.TypeError{Errors: errs}
		}
	}
	return n.Decode(v)
}

func yamlKeys(t reflect.Type) []string {
	var keys []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}
