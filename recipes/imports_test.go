package recipes

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// leaves are the packages of this module recipes may import: each
// imports nothing of the module itself.
var leaves = []string{"../internal/tmpl", "../internal/bytesize"}

// recipes is a leaf: none of its files, tests included, imports a package
// of this module (train, learner, cluster and rollout import it) other
// than the leaves.
func TestImportsNothingOfTheModule(t *testing.T) {
	for _, dir := range append([]string{"."}, leaves...) {
		checkImportsNothing(t, dir, dir == ".")
	}
}

func checkImportsNothing(t *testing.T, dir string, leavesOK bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no Go files: %v", dir, err)
	}
	for _, f := range files {
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			leaf := slices.Contains(leaves, "../"+strings.TrimPrefix(p, "github.com/rlnode/rlnode/"))
			if strings.HasPrefix(p, "github.com/rlnode/rlnode/") && !(leavesOK && leaf) {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}
