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

// testOnly are the packages only tests may import: this one and
// wiretest, the wire-format packages' test helpers.
var testOnly = []string{
	"github.com/vmbusd/vmbusd/internal/testutil",
	"github.com/vmbusd/vmbusd/internal/wiretest",
}

// importers returns the non-test Go files under root that import one of
// the testOnly packages, skipping testdata and hidden directories.
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
			if p, _ := strconv.Unquote(im.Path.Value); slices.Contains(testOnly, p) {
				rel, _ := filepath.Rel(root, path)
				found = append(found, rel)
			}
		}
		return nil
	})
	return found, err
}

// TestOnlyTestsImportTestutil keeps the testOnly packages out of the
// binaries.
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
		t.Errorf("%s imports a test-only package (%s) outside a test", f, strings.Join(testOnly, ", "))
	}
}

// The check finds the offenders, one a package, and lets a test file
// through.
func TestImportersFindsANonTestImporter(t *testing.T) {
	found, err := importers(filepath.Join("testdata", "tree"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join("prod", "prod.go"), filepath.Join("wireprod", "wireprod.go")}
	if !slices.Equal(found, want) {
		t.Fatalf("found %q, want %q", found, want)
	}
}
