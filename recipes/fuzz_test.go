package recipes

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: no recipe text, however malformed, panics or hangs the
// loader; it loads or it returns Errors. Run: go test ./recipes -fuzz FuzzParse
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	builtins, _ := filepath.Glob("builtin/*.yaml")
	for _, p := range append(files, builtins...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "algorithm.lr=1e-4")
	}
	f.Add([]byte("models: &m {policy: *m}\n"), "")
	f.Add([]byte("a: &a [*a, *a]\n"), "a.0=1")
	f.Add([]byte(base), "models.policy.init.heads=[1, {x: 2}]")
	f.Fuzz(func(t *testing.T, src []byte, set string) {
		var sets []string
		if set != "" {
			sets = []string{set}
		}
		l, err := Parse("fuzz.yaml", src, "", sets)
		if err == nil && l == nil {
			t.Fatal("no recipe and no error")
		}
	})
}
