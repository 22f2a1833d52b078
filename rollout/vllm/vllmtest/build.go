package vllmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildFakeVLLM builds fakevllm, the stand-in for `vllm serve`, into a
// temporary folder of t and returns its path.
func BuildFakeVLLM(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fakevllm")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/rlnode/rlnode/rollout/vllm/vllmtest/fakevllm")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build fakevllm: %v\n%s", err, out)
	}
	return bin
}
