package store_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The stores import only the core and the shared store package, never the
// HTTP layer, the tools, policy or config.
func TestImportDirection(t *testing.T) {
	const internal = "github.com/toolsvc/toolsvc/internal/"
	allowed := map[string]bool{internal + "registry": true, internal + "store": true}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasPrefix(p, internal) && !allowed[p] {
				t.Errorf("%s imports %s; store packages may import only registry and store", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
