package cuda

import (
	"flag"
	"os"
	"testing"
)

// requireGPU is set on GPU hosts (scripts/gpu-check.sh): there every test
// that would skip for a missing tool or device fails instead.
var requireGPU = os.Getenv("RLNODE_REQUIRE_GPU") == "1"

// skipOrFail skips the test with why, or fails it under RLNODE_REQUIRE_GPU=1.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if requireGPU {
		t.Fatalf("RLNODE_REQUIRE_GPU=1: %s", why)
	}
	t.Skip(why)
}

// fakeDir holds the stand-in libraries built for the process's tests.
var fakeDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rlnode-fakecuda-")
	if err != nil {
		panic(err)
	}
	fakeDir = dir
	// Every device backend of these tests (and of the emulated-GPU
	// children, which inherit it) checks each reused bf16 cast against
	// its operand cast on the host; not when benchmarks run, which it
	// would slow.
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Setenv("RLNODE_CUDA_CHECK_KEPT", "1")
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
