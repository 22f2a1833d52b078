package learner

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/safetensors"
)

// An optimizer state whose moments are NaN, infinite or (the second)
// negative is refused at Load, naming the file, tensor and element.
// Before, a negative second moment loaded, and the first step after it
// wrote NaN into the weight it updated while its loss, computed before
// the update, looked fine: the step's checkpoint held a NaN weight, and
// the step after failed on NaN logprobs.
func TestLoadRefusesBadOptimizerState(t *testing.T) {
	c := tinyConfig(GRPO)
	a := newLearner(t, c)
	b := groupBatch()
	for range 2 {
		if _, err := a.Train(b); err != nil {
			t.Fatal(err)
		}
	}
	src := t.TempDir()
	if err := a.Save(src); err != nil {
		t.Fatal(err)
	}
	for _, c2 := range []struct {
		prefix string
		x      float32
		want   string
	}{
		{optim.ExpAvgSqPrefix, float32(math.NaN()), "NaN at index 1"},
		{optim.ExpAvgPrefix, float32(math.Inf(1)), "+Inf at index 1"},
		{optim.ExpAvgSqPrefix, -1, "-1 at index 1, below 0"},
	} {
		dir := t.TempDir()
		copyDir(t, src, dir)
		p := filepath.Join(dir, OptimizerFile)
		f, err := safetensors.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var name string
		tensors := append([]safetensors.Tensor(nil), f.Tensors...)
		for i, tn := range tensors {
			if strings.HasPrefix(tn.Name, c2.prefix) {
				v, _ := tn.Float32()
				v[1] = c2.x
				if tensors[i], err = safetensors.FromFloat32(tn.Name, tn.DType, tn.Shape, v); err != nil {
					t.Fatal(err)
				}
				name = tn.Name
				break
			}
		}
		if err := safetensors.WriteFile(p, tensors, f.Metadata); err != nil {
			t.Fatal(err)
		}
		err = newLearner(t, c).Load(dir)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), `tensor "`+name+`"`) || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("%s[1] = %v: %v; want an error naming %s, the tensor and %q", name, c2.x, err, p, c2.want)
		}
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := os.MkdirAll(filepath.Join(to, e.Name()), 0o755); err != nil {
				t.Fatal(err)
			}
			copyDir(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
