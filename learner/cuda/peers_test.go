package cuda

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestPeerScriptsRun runs the PyTorch peers of the timing benchmarks
// (testdata/torch_step.py, testdata/torch_attention.py), which only a GPU
// host times, on the CPU at small sizes with Debian's PyTorch: each prints
// one JSON line per run with the fields the report is read for, so a
// broken script shows up here rather than on the GPU.
func TestPeerScriptsRun(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import torch").Run(); err != nil {
		t.Skipf("no PyTorch for %s (Debian: python3-torch): %v", py, err)
	}
	lines := func(t *testing.T, args ...string) []map[string]any {
		t.Helper()
		out, err := exec.Command(py, args...).Output()
		if err != nil {
			msg := err.Error()
			if ee, ok := err.(*exec.ExitError); ok {
				msg += ": " + string(ee.Stderr)
			}
			t.Fatalf("%s: %s", strings.Join(args, " "), msg)
		}
		var res []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%s: a line that is not JSON: %q", args[0], l)
			}
			res = append(res, m)
		}
		return res
	}
	positive := func(t *testing.T, m map[string]any, keys ...string) {
		t.Helper()
		for _, k := range keys {
			if v, ok := m[k].(float64); !ok || !(v > 0) {
				t.Errorf("%s = %v, want a positive number (%v)", k, m[k], m)
			}
		}
	}
	t.Run("torch_step", func(t *testing.T) {
		for _, dt := range []string{"fp32", "bf16"} {
			res := lines(t, "testdata/torch_step.py", "--shape", "tiny", "--seq", "16", "--batch", "2", "--dtype", dt, "--steps", "1")
			if len(res) != 1 || res[0]["dtype"] != dt || res[0]["shape"] != "tiny" {
				t.Fatalf("--dtype %s: %v", dt, res)
			}
			positive(t, res[0], "ms_per_step", "tokens_per_s", "tflops", "params", "loss")
		}
	})
	t.Run("torch_attention", func(t *testing.T) {
		res := lines(t, "testdata/torch_attention.py", "--device", "cpu", "--seq", "32", "--batch", "1", "--iters", "1")
		if len(res) != 2 || res[0]["dtype"] != "float32" || res[1]["dtype"] != "bfloat16" {
			t.Fatalf("want a float32 and a bfloat16 line: %v", res)
		}
		for _, m := range res {
			positive(t, m, "ms_per_pass", "seq", "batch")
		}
	})
}
