// Package toolsvc_test pins the shape of the code base: which internal
// packages may import which, where net/http and the environment may be
// used, and that every package is documented.
package toolsvc_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/toolsvc/toolsvc/"

// allowed lists, per package pattern (path.Match against the directory),
// the project packages it may import. The first matching pattern applies.
func allowed() []struct {
	pattern string
	imports []string
} {
	return []struct {
		pattern string
		imports []string
	}{
		{"cmd/*", []string{"*"}},
		{"examples/*", []string{}},
		{"examples/*/*", []string{}},
		{"bench/*", []string{"internal/registry", "internal/http"}},
		{"api", nil},
		{"internal/registry", nil},
		{"internal/config", nil},
		{"internal/sandbox", nil},
		{"internal/ratelimit", nil},
		{"internal/policy", []string{"internal/registry"}},
		{"internal/store", []string{"internal/registry"}},
		{"internal/store/*", []string{"internal/registry", "internal/store", "internal/store/storetest"}},
		{"internal/telemetry", []string{"internal/registry"}},
		{"internal/http", []string{"internal/registry", "internal/http/ui", "internal/ratelimit"}},
		{"internal/http/*", []string{"internal/registry"}},
		{"internal/notify", []string{"internal/registry"}},
		{"internal/tools/workspace", nil},
		{"internal/tools/rematch", nil},
		{"internal/logtest", nil},
		{"internal/tools/stream", []string{"internal/registry", "internal/sandbox"}},
		{"internal/tools/*", []string{"internal/registry", "internal/tools/workspace", "internal/tools/rematch", "internal/tools/stream", "internal/sandbox", "internal/config"}},
	}
}

// httpUsers may import net/http and chi (the HTTP adapter, the program,
// and the tools that are HTTP clients).
func httpUsers() []string {
	return []string{"cmd/*", "examples/*", "bench/*", "internal/http", "internal/http/*", "internal/notify", "internal/telemetry", "internal/tools/httpfetch", "internal/tools/custom", "internal/tools/mcpbridge"}
}

type pkg struct {
	dir     string
	imports map[string]string // import path → file
	doc     bool
	getenv  []string
}

func loadPackages(t *testing.T) map[string]*pkg {
	t.Helper()
	pkgs := map[string]*pkg{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && p != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(p))
		k := pkgs[dir]
		if k == nil {
			k = &pkg{dir: dir, imports: map[string]string{}}
			pkgs[dir] = k
		}
		if f.Doc != nil && strings.HasPrefix(f.Doc.Text(), "Package "+f.Name.Name+" ") || f.Doc != nil && f.Name.Name == "main" && strings.HasPrefix(f.Doc.Text(), "Command ") {
			k.doc = true
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			k.imports[ip] = p
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" && slices.Contains([]string{"Getenv", "LookupEnv", "Environ", "Setenv"}, sel.Sel.Name) {
				k.getenv = append(k.getenv, p)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

func matchAny(patterns []string, dir string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, dir); ok || p == dir {
			return true
		}
	}
	return false
}

func TestImportDirection(t *testing.T) {
	for dir, k := range loadPackages(t) {
		if dir == "." {
			continue
		}
		rule := -1
		for i, r := range allowed() {
			if ok, _ := path.Match(r.pattern, dir); ok {
				rule = i
				break
			}
		}
		if rule < 0 {
			t.Errorf("package %s has no import rule in arch_test.go; add one", dir)
			continue
		}
		r := allowed()[rule]
		for ip, file := range k.imports {
			if !strings.HasPrefix(ip, module) {
				continue
			}
			target := strings.TrimPrefix(ip, module)
			if !slices.Contains(r.imports, "*") && !matchAny(r.imports, target) {
				t.Errorf("%s imports %s; %s may import only %v", file, target, dir, r.imports)
			}
		}
	}
}

func TestNetHTTPOnlyWhereAllowed(t *testing.T) {
	for dir, k := range loadPackages(t) {
		for ip, file := range k.imports {
			if (ip == "net/http" || strings.HasPrefix(ip, "github.com/go-chi/chi")) && !matchAny(httpUsers(), dir) {
				t.Errorf("%s imports %s; only %v may", file, ip, httpUsers())
			}
		}
	}
}

func TestEnvironmentReadOnlyInCmd(t *testing.T) {
	// The sandboxed child, and the reaper that starts it, hand the
	// environment their parent prepared (already scrubbed) on to the
	// program; that is not configuration.
	exempt := map[string]bool{"internal/sandbox/child_linux.go": true, "internal/sandbox/reaper_linux.go": true}
	for dir, k := range loadPackages(t) {
		if strings.HasPrefix(dir, "cmd/") || strings.HasPrefix(dir, "examples/") {
			continue
		}
		for _, file := range k.getenv {
			if exempt[filepath.ToSlash(file)] {
				continue
			}
			t.Errorf("%s reads the process environment; configuration comes from cmd/toolsvc", file)
		}
	}
}

func TestEveryPackageIsDocumented(t *testing.T) {
	for dir, k := range loadPackages(t) {
		if dir != "." && !k.doc {
			t.Errorf("package %s has no \"// Package ...\" (or \"// Command ...\") comment", dir)
		}
	}
}

// TestDesignDocNamesEveryPackage keeps docs/design.md in step with the
// code: it names every package, and the row of each package that may
// import no other package of this module says so.
func TestDesignDocNamesEveryPackage(t *testing.T) {
	b, err := os.ReadFile("docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for dir := range loadPackages(t) {
		if dir == "." || strings.HasPrefix(dir, "examples/") {
			continue
		}
		name := "`" + dir + "`"
		if after, ok := strings.CutPrefix(dir, "internal/tools/"); ok && !strings.Contains(doc, name) {
			name = "`" + after + "`"
		}
		if !strings.Contains(doc, name) {
			t.Errorf("docs/design.md does not name package %s", dir)
		}
	}
	for _, r := range allowed() {
		if r.imports == nil && !strings.Contains(r.pattern, "*") {
			row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(r.pattern) + "` \\|.*\\| nothing \\|$")
			if !row.MatchString(doc) {
				t.Errorf("docs/design.md: the row of %s must say it may import nothing", r.pattern)
			}
		}
	}
}
