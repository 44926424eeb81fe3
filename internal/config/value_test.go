package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestValue(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	doc := `apiVersion: toolsvc/v1
kind: Tool
metadata: {name: v}
spec:
  headers:
    A: literal
    B: {value: "also literal"}
    C: {valueFrom: {env: TOKEN}}
    D: {valueFrom: {file: token}}
`
	rs, err := Parse(filepath.Join(dir, "v.yaml"), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Headers map[string]Value `yaml:"headers"`
	}
	if err := rs[0].Decode(&spec); err != nil {
		t.Fatal(err)
	}
	lookup := func(name string) (string, bool) {
		if name == "TOKEN" {
			return "from-env", true
		}
		return "", false
	}
	want := map[string]string{"A": "literal", "B": "also literal", "C": "from-env", "D": "from-file"}
	for k, w := range want {
		got, err := spec.Headers[k].Resolve(lookup, rs[0].Dir())
		if err != nil || got != w {
			t.Errorf("%s: %q %v, want %q", k, got, err, w)
		}
	}
	if _, err := spec.Headers["C"].Resolve(nil, dir); err == nil || !strings.Contains(err.Error(), "TOKEN") || !strings.Contains(err.Error(), "line 8") {
		t.Errorf("unset variable: %v", err)
	}

	for _, bad := range []string{
		"X: {valueFrom: {env: A, file: b}}",
		"X: {value: a, valueFrom: {env: A}}",
		"X: {valueFrom: {vault: x}}",
		"X: {velue: x}",
		"X: [a, b]",
		"X: {}",
	} {
		doc := "apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: v}\nspec:\n  headers:\n    " + bad + "\n"
		rs, err := Parse("bad.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if err := rs[0].Decode(&spec); err == nil || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), "line 6") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestEnviron(t *testing.T) {
	lookup := func(name string) (string, bool) {
		if name == "HOME_REGION" {
			return "eu", true
		}
		return "", false
	}
	got, err := Environ([]string{"HOME_REGION", "UNSET", "MODE=fast", "EMPTY="}, lookup)
	if err != nil || !slices.Equal(got, []string{"HOME_REGION=eu", "MODE=fast", "EMPTY="}) {
		t.Fatalf("got %q %v", got, err)
	}
	if _, err := Environ([]string{"=x"}, lookup); err == nil {
		t.Error("empty name accepted")
	}
}
