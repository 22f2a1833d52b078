package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/cuda"
)

func TestGPUCommandReports(t *testing.T) {
	var out, errb bytes.Buffer
	if code := runMain([]string{"gpu"}, &out, &errb); code != 0 {
		t.Fatalf("rlnode gpu: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "CUDA backend: ") || !strings.Contains(out.String(), "driver:") {
		t.Errorf("rlnode gpu printed:\n%s", out.String())
	}
	out.Reset()
	code := runMain([]string{"gpu", "--require"}, &out, &errb)
	if want := map[bool]int{true: 0, false: 1}[cuda.Available().Err() == nil]; code != want {
		t.Errorf("rlnode gpu --require: exit %d, want %d:\n%s", code, want, out.String())
	}
	if code := runMain([]string{"gpu", "extra"}, &out, &errb); code != 2 {
		t.Errorf("rlnode gpu extra: exit %d, want 2", code)
	}
}

// TestGPUEmulated: rlnode gpu --emulated prints the environment naming the
// emulated GPU's library, and under it rlnode gpu finds that GPU.
func TestGPUEmulated(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++ for the emulated GPU")
	}
	if _, err := cuda.OpenNVRTC(); err != nil {
		t.Skipf("no NVRTC for the emulated GPU's modules: %v", err)
	}
	var out, errb bytes.Buffer
	if code := runMain([]string{"gpu", "--emulated"}, &out, &errb); code != 0 {
		t.Fatalf("rlnode gpu --emulated: exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], cuda.EnvDriver+"=") || !strings.HasPrefix(lines[1], cuda.EnvCublasLt+"=") {
		t.Fatalf("rlnode gpu --emulated printed:\n%s", out.String())
	}
	lib := strings.TrimPrefix(lines[0], cuda.EnvDriver+"=")
	if _, err := os.Stat(lib); err != nil {
		t.Fatalf("the emulated GPU's library: %v", err)
	}
	// In a process of its own: the backend probes the libraries once.
	cmd := exec.Command(os.Args[0], "-test.run", "^TestGPUEmulatedReport$")
	cmd.Env = append(append(os.Environ(), lines...), "RLNODE_GPU_EMULATED_REPORT=1")
	rep, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(rep), "rlnode emulated GPU (CPU)") || !strings.Contains(string(rep), "CUDA backend: available") {
		t.Errorf("rlnode gpu on the emulated GPU: %v\n%s", err, rep)
	}
}

// TestGPUEmulatedReport is TestGPUEmulated's child: rlnode gpu --require.
func TestGPUEmulatedReport(t *testing.T) {
	if os.Getenv("RLNODE_GPU_EMULATED_REPORT") != "1" {
		t.Skip("run by TestGPUEmulated")
	}
	var out, errb bytes.Buffer
	code := runMain([]string{"gpu", "--require"}, &out, &errb)
	fmt.Print(out.String())
	if code != 0 {
		t.Fatalf("rlnode gpu --require: exit %d", code)
	}
}
