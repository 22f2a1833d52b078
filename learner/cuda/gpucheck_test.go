package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestGPUCheckStopsWithoutBackend: scripts/gpu-check.sh run, on a host
// where rlnode finds no CUDA backend (here: RLNODE_CUDA_DRIVER naming a
// missing file), stops after its header with the reason and fails,
// instead of running every section to its failure; it needs no HOME.
func TestGPUCheckStopsWithoutBackend(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds rlnode")
	}
	script, err := filepath.Abs("../../scripts/gpu-check.sh")
	if err != nil {
		t.Fatal(err)
	}
	gobin, err := exec.LookPath("go")
	if _, serr := os.Stat(script); serr != nil || err != nil {
		t.Skip("needs the repository's scripts and the go command (not on a GPU host's copy)")
	}
	dir := t.TempDir()
	build := exec.Command(gobin, "build", "-o", filepath.Join(dir, "bin", "rlnode"), "github.com/rlnode/rlnode/cmd/rlnode")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "out")
	cmd := exec.Command("bash", script, "run", dir)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "RLNODE_CUDA_DRIVER=/nonexistent/libcuda.so.1", "GPU_CHECK_OUT=" + out, "GPU_CHECK_BUDGET=300"}
	b, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("gpu-check.sh run: %v, want exit status 1\n%s", err, b)
	}
	report, err := os.ReadFile(filepath.Join(out, "report.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CUDA backend: unavailable", "/nonexistent/libcuda.so.1", "== NO CUDA BACKEND", "== result: FAIL"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(string(report), "== tests:") {
		t.Errorf("a section ran without the backend:\n%s", report)
	}
}
