package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every setting has a description, toolsvc help lists it with its
// default, and docs/configuration.md has a row for it with the same
// default.
func TestHelpListsEverySetting(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"toolsvc", "help"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{} // variable → default column
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Z_]+)`(?:, `([A-Z_]+)`)? \\|([^|]*)\\|").FindAllStringSubmatch(string(doc), -1) {
		rows[m[1]] = strings.Trim(strings.TrimSpace(m[3]), "`")
		if m[2] != "" {
			rows[m[2]] = rows[m[1]]
		}
	}
	all := settings()
	if len(all) < 50 {
		t.Fatalf("only %d settings found", len(all))
	}
	for _, s := range all {
		if s.Description == "" {
			t.Errorf("%s has no desc tag in config.go", s.Name)
		}
		line := regexp.MustCompile("(?m)^  " + s.Name + " +(\\S+) +(.*)$").FindStringSubmatch(out.String())
		if line == nil || strings.TrimSpace(line[2]) != s.Description {
			t.Errorf("toolsvc help does not list %s with its description", s.Name)
		} else if s.Default != "" && line[1] != s.Default {
			t.Errorf("toolsvc help lists %s with default %q, want %q", s.Name, line[1], s.Default)
		}
		def, ok := rows[s.Name]
		if !ok {
			t.Errorf("docs/configuration.md has no row for %s", s.Name)
		} else if s.Default != "" && def != s.Default {
			t.Errorf("docs/configuration.md gives %s the default %q; config.go has %q", s.Name, def, s.Default)
		}
	}
}

// toolsvc takes no flags and no arguments: a mistake fails with the usage
// instead of being ignored.
func TestCommandLineMistakes(t *testing.T) {
	cases := [][]string{
		{"toolsvc", "serve", "--port", "9000"},
		{"toolsvc", "--port", "9000"},
		{"toolsvc", "validate", "extra"},
		{"toolsvc", "serv"},
	}
	for _, args := range cases {
		var out bytes.Buffer
		err := run(context.Background(), args, []string{"TOOLSVC_ADDR=127.0.0.1:0"}, &out, &out)
		if err == nil || !strings.Contains(err.Error(), "usage: toolsvc") {
			t.Errorf("%v: %v, want an error with the usage", args, err)
			continue
		}
		if strings.HasPrefix(args[len(args)-2], "--") && !strings.Contains(err.Error(), "unknown flag --port") {
			t.Errorf("%v: %v, want it to name the flag", args, err)
		}
	}
}

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"toolsvc", "version"}, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "toolsvc "+version || !strings.HasPrefix(lines[1], "commit ") || !strings.HasPrefix(lines[2], "go1.") {
		t.Errorf("toolsvc version printed %q", out.String())
	}
}
