package learner

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/internal/mpcheck"
	"github.com/vmihailenco/msgpack/v5"
)

// FuzzCheckManifest feeds arbitrary manifests, as a peer's folder server
// or staged learner would send them, to CheckManifest: what it passes
// names only plain files, each once, that stay inside the folder they
// are fetched into, with sizes that sum without overflow.
func FuzzCheckManifest(f *testing.F) {
	sum := strings.Repeat("ab", 32)
	for _, m := range []FolderManifest{
		{Dir: "/run/model", Files: []FolderFile{{Name: "config.json", Size: 10, SHA256: sum}, {Name: "model.safetensors", Size: 1 << 30, SHA256: sum}}},
		{Dir: "/run/model", Files: []FolderFile{{Name: "../../etc/passwd", Size: 1, SHA256: sum}}},
		{Dir: "/x", Files: []FolderFile{{Name: "a", Size: 1 << 62, SHA256: sum}, {Name: "b", Size: 1 << 62, SHA256: sum}}},
	} {
		b, err := msgpack.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m FolderManifest
		if mpcheck.Check(b) != nil { // as every message from the wire is
			return
		}
		if err := msgpack.Unmarshal(b, &m); err != nil || CheckManifest(m) != nil {
			return
		}
		dst := "/staging/in-1"
		seen := map[string]bool{}
		var total int64
		for _, f := range m.Files {
			p := filepath.Join(dst, f.Name)
			if filepath.Dir(p) != dst || seen[f.Name] || f.Size < 0 || total+f.Size < total {
				t.Fatalf("passed file %q (%d bytes) of %+v", f.Name, f.Size, m)
			}
			seen[f.Name] = true
			total += f.Size
		}
	})
}
