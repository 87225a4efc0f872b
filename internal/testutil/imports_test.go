package testutil

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const importPath = "github.com/vmbusd/vmbusd/internal/testutil"

// importers returns the non-test Go files under root that import this
// package, skipping testdata and hidden directories.
func importers(root string) ([]string, error) {
	var found []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == importPath {
				rel, _ := filepath.Rel(root, path)
				found = append(found, rel)
			}
		}
		return nil
	})
	return found, err
}

// TestOnlyTestsImportTestutil keeps this package out of the binaries.
func TestOnlyTestsImportTestutil(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	found, err := importers(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s imports %s outside a test", f, importPath)
	}
}

// The check finds an offender, and lets a test file through.
func TestImportersFindsANonTestImporter(t *testing.T) {
	found, err := importers(filepath.Join("testdata", "tree"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(found, []string{filepath.Join("prod", "prod.go")}) {
		t.Fatalf("found %q, want only prod/prod.go", found)
	}
}
