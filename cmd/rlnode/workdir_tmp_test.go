package main

import (
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/jobs"
)

// A submit packs its working dir in the temporary folder TMPDIR names,
// says where, and refuses to pack, naming that folder and TMPDIR, when
// the space there would run under packReserve: before it starts, or
// while it packs.
func TestSubmitWorkingDirPacksWhereTMPDIRSays(t *testing.T) {
	proj, tmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	rows := strings.Repeat("{\"prompt\": \"1+1\", \"answer\": \"2\"}\n", 32)
	blob := make([]byte, 256<<10) // packs to about its size
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range blob {
		blob[i] = byte(rng.Uint32())
	}
	writeFiles(t, proj, map[string]string{
		"recipe.yaml": "name: ok\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: train.jsonl}}\neval: {held_out: 4}\n",
		"train.jsonl": rows,
		"blob.bin":    string(blob),
	})
	defer func(f func(string) (int64, bool), c int64) { tempFree, packChunk = f, c }(tempFree, packChunk)
	packChunk = 64 << 10
	var looked []string
	for _, c := range []struct {
		name string
		free func(calls int) int64 // the free space at the calls-th look
		want string                // "" : packed
	}{
		{"room", func(int) int64 { return 1 << 40 }, ""},
		{"full before packing", func(int) int64 { return packReserve }, "set TMPDIR to a folder with room"},
		{"full while packing", func(calls int) int64 {
			if calls == 0 {
				return 1 << 40
			}
			return packReserve + packChunk - 1
		}, "set TMPDIR to a folder with room"},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			tempFree = func(dir string) (int64, bool) {
				looked = append(looked, dir)
				calls++
				return c.free(calls - 1), true
			}
			var req jobs.SubmitRequest
			var out strings.Builder
			w, err := prepareWorkingDir(proj, nil, filepath.Join(proj, "recipe.yaml"), nil, &req, &out)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				defer w.remove()
				if !strings.Contains(out.String(), "in "+tmp) || filepath.Dir(w.file.Name()) != tmp {
					t.Errorf("packed into %s, saying %q: want TMPDIR %s", w.file.Name(), out.String(), tmp)
				}
				if n, _ := io.Copy(io.Discard, io.NewSectionReader(w.file, 0, 1<<30)); n != w.stats.Packed {
					t.Errorf("the package file holds %d bytes, packed %d", n, w.stats.Packed)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), tmp) {
				t.Fatalf("err %v, want it to name %s and say %q", err, tmp, c.want)
			}
			if left, _ := os.ReadDir(tmp); len(left) != 0 {
				t.Errorf("left in %s: %v", tmp, left)
			}
		})
	}
	for _, d := range looked {
		if d != tmp {
			t.Errorf("free space read in %s, want %s", d, tmp)
		}
	}
}
