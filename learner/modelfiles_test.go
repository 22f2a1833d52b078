package learner

import (
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/safetensors"
)

// ScoreSequences with grad on the golden checkpoints reproduces PyTorch's log probs
// and d sum(logprobs)/d params (learner/model/testdata/make_golden.py).
func TestScoreSequencesMatchesPyTorch(t *testing.T) {
	for _, name := range []string{"qwen2", "llama"} {
		t.Run(name, func(t *testing.T) {
			src := filepath.Join("model", "testdata")
			res := filepath.Join(t.TempDir(), "out.safetensors")
			seqs, tokens, err := ScoreSequences(filepath.Join(src, name), filepath.Join(src, "golden_input.json"), res, true, "")
			if err != nil {
				t.Fatal(err)
			}
			if seqs != 5 || tokens != 20 {
				t.Errorf("%d sequences, %d response tokens; want 5 and 20", seqs, tokens)
			}
			got, err := safetensors.ReadFile(res)
			if err != nil {
				t.Fatal(err)
			}
			gold, err := safetensors.ReadFile(filepath.Join(src, name, "golden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			want, _, _ := gold.Float32("logprobs")
			var all []float32
			for i := 0; i < 5; i++ {
				v, _, err := got.Float32("logprobs." + strconv.Itoa(i))
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, v...)
			}
			for i := range want {
				if math.Abs(float64(all[i]-want[i])) > 1e-4 {
					t.Errorf("logprob %d = %v, torch %v", i, all[i], want[i])
				}
			}
			n := 0
			for _, gn := range gold.Names() {
				pname, ok := strings.CutPrefix(gn, "sum_logprobs_grad.")
				if !ok {
					continue
				}
				w, _, _ := gold.Float32(gn)
				g, _, err := got.Float32("grad." + pname)
				if err != nil {
					t.Fatal(err)
				}
				var scale float64
				for _, x := range w {
					scale = max(scale, math.Abs(float64(x)))
				}
				for i := range w {
					if math.Abs(float64(g[i]-w[i])) > 1e-5+1e-4*scale {
						t.Errorf("grad.%s[%d] = %v, torch %v", pname, i, g[i], w[i])
						break
					}
				}
				n++
			}
			if n == 0 || n != len(got.Tensors)-5 {
				t.Errorf("compared %d gradients, output has %d tensors", n, len(got.Tensors))
			}
		})
	}
}

// compare_forward.py, which checks `rlnode model forward` against PyTorch
// on a GPU host, passes on the golden checkpoints with Debian's PyTorch,
// and fails when its tolerance is below the difference it measures.
func TestCompareForwardScript(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		t.Skipf("no PyTorch for %s (Debian: python3-torch): %v", py, err)
	}
	src := filepath.Join("model", "testdata")
	in := filepath.Join(src, "golden_input.json")
	for _, name := range []string{"qwen2", "llama"} {
		t.Run(name, func(t *testing.T) {
			res := filepath.Join(t.TempDir(), "out.safetensors")
			if _, _, err := ScoreSequences(filepath.Join(src, name), in, res, true, ""); err != nil {
				t.Fatal(err)
			}
			script := []string{filepath.Join(src, "compare_forward.py"), "--model", filepath.Join(src, name), "--input", in, "--scores", res, "--grad"}
			out, err := exec.Command(py, script...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "compare_forward: ok") {
				t.Fatalf("compare_forward.py: %v\n%s", err, out)
			}
			out, err = exec.Command(py, append(script, "--tol-logp", "1e-12", "--tol-grad", "1e-12")...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "compare_forward: DIFFERENT") {
				t.Errorf("compare_forward.py with tolerances of 1e-12: %v\n%s", err, out)
			}
		})
	}
}
