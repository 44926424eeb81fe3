package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolsvc/toolsvc/internal/registry"
)

// The glob syntax of doublestar, which the tools used before they compiled
// globs to RE2: each case was checked against doublestar.Match, which
// agrees with all but one (marked).
func TestGlobMatches(t *testing.T) {
	cases := []struct {
		glob string
		yes  []string
		no   []string
	}{
		{"*.go", []string{"a.go", ".go", "x.test.go"}, []string{"a.go/b", "a.goo", "d/a.go"}},
		{"?", []string{"a", "é"}, []string{"", "ab", "/"}},
		{"a?c", []string{"abc", "a.c"}, []string{"a/c", "ac"}},
		{"**", []string{"a", "a/b", "a/b/c"}, nil},
		{"**/*.go", []string{"a.go", "x/a.go", "x/y/a.go"}, []string{"a.txt", "x/a.go/b"}},
		{"src/**/*_test.go", []string{"src/x_test.go", "src/util/x_test.go", "src/a/b/x_test.go"}, []string{"x_test.go", "src/x.go", "lib/src/x_test.go"}},
		{"a/**", []string{"a", "a/b", "a/b/c"}, []string{"b", "ab", "b/a"}},
		{"a/**/b", []string{"a/b", "a/x/b", "a/x/y/b"}, []string{"a/xb", "ab", "a/b/c"}},
		{"a/**/", []string{"a"}, []string{"a/b", "b"}},
		{"**/b", []string{"b", "a/b", "a/c/b"}, []string{"ab", "b/a"}},
		// "**" within a segment is "*".
		{"a**b", []string{"ab", "axyb"}, []string{"a/b"}},
		{"**.txt", []string{"a.txt"}, []string{"d/a.txt"}},
		{"a/**b", []string{"a/b", "a/xb"}, []string{"a/x/b"}},
		{"***", []string{"abc"}, []string{"a/b"}},
		{"[a-c]x", []string{"ax", "cx"}, []string{"dx", "x"}},
		{"[!a-c]x", []string{"dx", "/x"}, []string{"ax"}},
		{"[^a]", []string{"b"}, []string{"a"}},
		{"[ab-]", []string{"a", "-"}, []string{"c"}},
		{`[\]]`, []string{"]"}, []string{`\`}},
		{"[z-a]", []string{"z"}, []string{"a", "m"}},
		{"x]", []string{"x]"}, nil},
		{"{a,b}.go", []string{"a.go", "b.go"}, []string{"c.go", "ab.go"}},
		{"{a,b{c,d}}", []string{"a", "bc", "bd"}, []string{"b", "bcd"}},
		{"x{,y}", []string{"x", "xy"}, []string{"y"}},
		{"x{}", []string{"x"}, nil},
		{"a,b", []string{"a,b"}, []string{"a"}},
		{`\*`, []string{"*"}, []string{"a"}},
		{`\{a\}`, []string{"{a}"}, []string{"a"}},
		{`a\/b`, []string{"a/b"}, nil},
		{"{src,lib}/**/*.go", []string{"src/a.go", "lib/x/a.go"}, []string{"a.go", "doc/a.go"}},
		{"**/{a,b}/**", []string{"a", "x/b", "x/a/y"}, []string{"c", "xa"}},
		// A "/" beside braces goes with a "**" in them, as in their expansion.
		{"{x,**}/c", []string{"x/c", "c", "a/b/c"}, []string{"xc", "y/cc"}},
		// doublestar does not match "a" here, though it does for "a/**".
		{"a/{**,x}", []string{"a", "a/b/c", "a/x"}, []string{"b"}},
		{"{a/,b/}**/c", []string{"a/c", "b/x/c"}, []string{"c", "a/xc"}},
		{"a.\n", []string{"a.\n"}, []string{"ab\n"}},
		{"*", []string{"a\nb"}, nil},
	}
	for _, c := range cases {
		g, err := newGlob(c.glob)
		if err != nil {
			t.Errorf("%q: %v", c.glob, err)
			continue
		}
		for _, name := range c.yes {
			if !g.re.MatchString(name) {
				t.Errorf("%q does not match %q (%s)", c.glob, name, g.re)
			}
		}
		for _, name := range c.no {
			if g.re.MatchString(name) {
				t.Errorf("%q matches %q (%s)", c.glob, name, g.re)
			}
		}
	}
}

func TestGlobRefusesBadPatterns(t *testing.T) {
	for glob, why := range map[string]string{
		"[a-":           `"[" is not closed`,
		"[]":            "empty class",
		"[!]":           "empty class",
		"a[b":           `"[" is not closed`,
		"{a,b":          `"{" is not closed`,
		"a}":            `"}" without a "{"`,
		"{a}}":          `"}" without a "{"`,
		`a\`:            "lone backslash",
		`[a\`:           `"[" is not closed`,
		"{{{{{{{{{{a,b": `"{" is not closed`,
	} {
		_, err := newGlob(glob)
		re, ok := err.(*registry.Error)
		if !ok || re.Code != registry.CodeInvalidArguments || !strings.Contains(re.Message, why) {
			t.Errorf("%q: %v, want %q", glob, err, why)
		}
	}
	// A glob beyond the compiled size limit (longer than the schema
	// allows, so only a direct call can send it) is refused.
	_, err := newGlob(strings.Repeat("**/", 400))
	if re, ok := err.(*registry.Error); !ok || re.Code != registry.CodeInvalidArguments || !strings.Contains(re.Message, "too complex") {
		t.Errorf("complex glob: %v", err)
	}
}

// Globs that a backtracking matcher takes exponential time on: the call
// answers at once, where it used to time out and keep matching on.
func TestGlobTakesLinearTime(t *testing.T) {
	e := newEnv(t, Options{Timeout: 20 * time.Second}, 1<<20)
	d := e.dir("")
	mustWrite(t, filepath.Join(d, "h", strings.Repeat("a", 250)), "x")
	mustWrite(t, filepath.Join(d, "h", "README.md"), "x")
	mustWrite(t, filepath.Join(d, "h", "sub", strings.Repeat("a", 200), "README.md"), "x")
	for _, glob := range []string{
		strings.Repeat("{a,a}", 40) + "b",
		strings.Repeat("{,?}", 26) + "Z",
		strings.Repeat("**/", 40) + "{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}{,?}Z",
	} {
		start := time.Now()
		var r listResult
		e.ok("", "fs__list", map[string]any{"path": "h", "recursive": true, "glob": glob}, &r)
		if len(r.Entries) != 0 {
			t.Errorf("%.20q matched %+v", glob, r.Entries)
		}
		var s searchResult
		e.ok("", "fs__search", map[string]any{"pattern": "x", "path": "h", "glob": glob}, &s)
		// Milliseconds; generous for a loaded machine.
		if el := time.Since(start); el > 5*time.Second {
			t.Errorf("%.20q took %v", glob, el)
		}
	}
}

// A walk reads directories down to maxWalkDepth levels below its start
// and says that it went no deeper.
func TestWalkDepthIsBounded(t *testing.T) {
	e := newEnv(t, Options{}, 1<<20)
	d := e.dir("")
	deep := maxWalkDepth + 20
	parts := make([]string, deep)
	for i := range parts {
		parts[i] = "d"
	}
	dir := filepath.Join(append([]string{d}, parts...)...)
	mustWrite(t, filepath.Join(dir, "needle.txt"), "needle\n")
	mustWrite(t, filepath.Join(d, "d", "top.txt"), "needle\n")

	var r listResult
	e.ok("", "fs__list", map[string]any{"recursive": true, "maxEntries": 1000}, &r)
	if !r.Truncated || !strings.Contains(r.Reason, fmt.Sprint(maxWalkDepth)) || len(r.Entries) != maxWalkDepth+1 {
		t.Fatalf("%d entries, truncated %v, reason %q", len(r.Entries), r.Truncated, r.Reason)
	}
	levels := 0
	for _, en := range r.Entries {
		levels = max(levels, strings.Count(en.Path, "/")+1)
	}
	if levels != maxWalkDepth {
		t.Errorf("the deepest entry is %d levels down", levels)
	}
	var s searchResult
	e.ok("", "fs__search", map[string]any{"pattern": "needle"}, &s)
	if len(s.Matches) != 1 || s.Matches[0].Path != "d/top.txt" || !s.Truncated || !strings.Contains(s.Reason, "not searched") {
		t.Errorf("search: %+v", s)
	}
	// Starting deeper reaches the rest.
	start := strings.Join(parts[:100], "/")
	e.ok("", "fs__search", map[string]any{"pattern": "needle", "path": start}, &s)
	if len(s.Matches) != 1 || !strings.HasSuffix(s.Matches[0].Path, "/needle.txt") || s.Truncated {
		t.Errorf("search from %d levels down: %+v", 100, s)
	}
	if _, err := os.Stat(filepath.Join(dir, "needle.txt")); err != nil {
		t.Fatal(err)
	}
}
