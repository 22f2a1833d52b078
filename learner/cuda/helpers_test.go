package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/rlnode/rlnode/learner/safetensors"
)

var (
	emuOnce sync.Once
	emuBin  string
	emuErr  error
)

// launchers are what the kernel tests run on: the CPU emulation where a
// C++ compiler is installed, and the GPU where Available says it can run
// (on CPU-only hosts it never is).
func launchers(t *testing.T) map[string]Launcher {
	t.Helper()
	out := map[string]Launcher{}
	if e := emulator(t); e != nil {
		out["emulation"] = e
	}
	if d := testDevice(t); d != nil {
		out["gpu"] = d
	}
	if len(out) == 0 {
		skipOrFail(t, "neither a C++ compiler for the emulation nor a GPU")
	}
	return out
}

// emulator starts the emulation program (built once per process, cached
// on disk by content), or returns nil without a C++ compiler.
func emulator(t *testing.T) *Emulator {
	t.Helper()
	emuOnce.Do(func() {
		var dir string
		if dir, emuErr = EmulationCacheDir(); emuErr == nil {
			emuBin, emuErr = EmulatorBinary(dir)
		}
	})
	if errors.Is(emuErr, ErrNoCompiler) {
		// launchers fails under RLNODE_REQUIRE_GPU=1 when the GPU is
		// missing too; the emulation alone is optional on a GPU host.
		t.Logf("no emulation: %v", emuErr)
		return nil
	}
	if emuErr != nil { // the kernels do not build: a failure, not a skip
		t.Fatal(emuErr)
	}
	e, err := StartEmulator(emuBin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func randn(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

func toBF16(x []float32) []uint16 {
	out := make([]uint16, len(x))
	for i, v := range x {
		out[i] = safetensors.F32ToBF16(v)
	}
	return out
}

func fromBF16(x []uint16) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = math.Float32frombits(uint32(v) << 16)
	}
	return out
}

// roundBF16 rounds every value to the nearest bf16, in place, and returns x.
func roundBF16(x []float32) []float32 {
	for i, v := range x {
		x[i] = math.Float32frombits(uint32(safetensors.F32ToBF16(v)) << 16)
	}
	return x
}

func clone[T any](x []T) []T { return append([]T(nil), x...) }

// tol is an error bound: |got - want| ≤ rel·|want| + abs·max|want|.
type tol struct{ rel, abs float64 }

var (
	// fp32 kernels against the CPU backend: the same math summed in
	// another order.
	tolF32 = tol{rel: 1e-5, abs: 2e-6}
	// bf16 kernels: inputs are bf16 on both sides and the kernel rounds
	// its outputs to bf16 (relative step 2⁻⁸).
	tolBF16 = tol{rel: 8e-3, abs: 2e-3}
)

// near checks got against want within tl, reporting the worst element.
func near(t *testing.T, what string, got, want []float32, tl tol) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	worst, wi := 0.0, -1
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		bound := tl.rel*math.Abs(w) + tl.abs*scale
		d := math.Abs(g - w)
		if math.IsNaN(g) != math.IsNaN(w) || d > bound || math.IsNaN(d) && !math.IsNaN(w) {
			if excess := d / math.Max(bound, 1e-30); wi < 0 || excess > worst || math.IsNaN(d) {
				worst, wi = excess, i
			}
		}
	}
	if wi >= 0 {
		t.Errorf("%s: element %d is %g, want %g (tolerance rel %g, abs %g·%g)", what, wi, got[wi], want[wi], tl.rel, tl.abs, scale)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// dtypes are the two element types a kernel test runs in.
var dtypes = []string{"f32", "bf16"}

func kname(base, dt string) string { return fmt.Sprintf("%s_%s", base, dt) }

var (
	deviceOnce sync.Once
	device     *Device
	deviceErr  error
)

// testDevice opens GPU 0 once per process, or returns nil where the backend
// cannot run (failing under RLNODE_REQUIRE_GPU=1).
func testDevice(t *testing.T) *Device {
	t.Helper()
	deviceOnce.Do(func() { device, deviceErr = OpenDevice(0) })
	if deviceErr != nil {
		if requireGPU {
			t.Fatalf("RLNODE_REQUIRE_GPU=1: %v", deviceErr)
		}
		return nil
	}
	return device
}
