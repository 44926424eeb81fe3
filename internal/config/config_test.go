package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type toolSpec struct {
	Tier    string `yaml:"tier"`
	Exports []struct {
		Name string `yaml:"name"`
	} `yaml:"exports"`
}

const twoDocs = `# leading comment
apiVersion: toolsvc/v1
kind: Tool
metadata:
  name: one

spec:
  tier: read_only
  exports:
    - name: a
---
apiVersion: toolsvc/v1
kind: Policy
metadata: {name: two}
spec:

  tier: side_effecting
  exports:
    - name: b
      bogus: true
`

func TestParseAndDecode(t *testing.T) {
	rs, err := Parse("x.yaml", []byte(twoDocs))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Kind != KindTool || rs[1].Metadata.Name != "two" {
		t.Fatalf("resources: %+v", rs)
	}
	if rs[0].Source() != "x.yaml:2" || rs[1].Source() != "x.yaml:12" {
		t.Errorf("sources: %s %s", rs[0].Source(), rs[1].Source())
	}
	var s toolSpec
	if err := rs[0].Decode(&s); err != nil {
		t.Fatal(err)
	}
	if s.Tier != "read_only" || len(s.Exports) != 1 || s.Exports[0].Name != "a" {
		t.Errorf("spec: %+v", s)
	}
	err = rs[1].Decode(&s)
	if err == nil || !strings.Contains(err.Error(), "line 20") || !strings.Contains(err.Error(), "bogus") || !strings.HasPrefix(err.Error(), "x.yaml") {
		t.Errorf("unknown field error = %v, want x.yaml … line 20 … bogus", err)
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"apiVersion: v2\nkind: Tool\nmetadata: {name: a}\nspec: {}\n":         `apiVersion must be "toolsvc/v1"`,
		"apiVersion: toolsvc/v1\nkind: Nope\nmetadata: {name: a}\nspec: {}\n": `unknown kind "Nope"`,
		"apiVersion: toolsvc/v1\nkind: Tool\nspec: {}\n":                      "has no metadata.name",
		"apiVersion: toolsvc/v1\nkind: Tool\nmetadata: {name: a}\nextra: 1\n": `f.yaml:4: unknown field "extra"`,
		"- a\n- b\n":      "must be a mapping",
		"apiVersion: [\n": "f.yaml",
	}
	for in, want := range cases {
		_, err := Parse("f.yaml", []byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	doc := "apiVersion: toolsvc/v1\nkind: Caller\nmetadata: {name: %s}\nspec: {}\n"
	for _, n := range []string{"b", "a"} {
		if err := os.WriteFile(filepath.Join(dir, n+".yaml"), []byte(strings.Replace(doc, "%s", n, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "ignored.txt"), []byte("not yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Metadata.Name != "a" || rs[1].Metadata.Name != "b" {
		t.Fatalf("got %d resources, want a then b", len(rs))
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing path: no error")
	}
}

// TestLoadConfigMapMount loads a directory laid out as Kubernetes mounts a
// ConfigMap: the files live in a hidden timestamped directory, reached
// through the ..data symlink, with a symlink per key at the top. Each
// resource must be read once.
func TestLoadConfigMapMount(t *testing.T) {
	dir := t.TempDir()
	stamp := filepath.Join(dir, "..2026_11_21_02_00_00.123456789")
	if err := os.Mkdir(stamp, 0o755); err != nil {
		t.Fatal(err)
	}
	doc := "apiVersion: toolsvc/v1\nkind: Policy\nmetadata: {name: default}\nspec: {}\n"
	if err := os.WriteFile(filepath.Join(stamp, "policy.yaml"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Base(stamp), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "policy.yaml"), filepath.Join(dir, "policy.yaml")); err != nil {
		t.Fatal(err)
	}
	rs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].File != filepath.Join(dir, "policy.yaml") {
		var files []string
		for _, r := range rs {
			files = append(files, r.Source())
		}
		t.Fatalf("resources read from %v, want once from policy.yaml", files)
	}
}
