package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
	"github.com/rlnode/rlnode/learner/cpu"
)

// The kernel tests run each kernel on every launcher (the CPU emulation,
// and the GPU where there is one) and compare its outputs with the CPU
// backend's on the same inputs, in fp32 and in bf16 (inputs rounded to
// bf16 on both sides). Shapes are small and deliberately not multiples of
// the block size.

const block = 64 // threads per block in the tests: two warps

// input returns a copy of x for a dtype: fp32 as is, or bf16 bits of x
// after rounding x itself to bf16 so that the CPU reference sees the same
// values.
func input(dt string, x []float32) any {
	if dt == "f32" {
		return clone(x)
	}
	return toBF16(roundBF16(x))
}

// output reads a kernel's output back as fp32.
func output(a any) []float32 {
	if h, ok := a.([]uint16); ok {
		return fromBF16(h)
	}
	return a.([]float32)
}

func tolFor(dt string) tol {
	if dt == "f32" {
		return tolF32
	}
	return tolBF16
}

func TestRMSNorm(t *testing.T) {
	const rows, cols, eps = 5, 96, 1e-6
	for name, l := range launchers(t) {
		for _, dt := range dtypes {
			t.Run(name+"/"+dt, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, 2))
				x, w, dy := randn(rng, rows*cols, 1), randn(rng, cols, 1), randn(rng, rows*cols, 1)
				dx0, dw0 := randn(rng, rows*cols, 1), randn(rng, cols, 1)
				xa, wa, dya, dxa := input(dt, x), input(dt, w), input(dt, dy), input(dt, dx0)
				out := input(dt, make([]float32, rows*cols))
				rstd, dw := make([]float32, rows), clone(dw0)
				must(t, l.Launch(kname("rmsnorm_fwd", dt), D1(rows), D1(block), out, rstd, xa, wa, int32(rows), int32(cols), float32(eps)))
				must(t, l.Launch(kname("rmsnorm_bwd_dx", dt), D1(rows), D1(block), dxa, dya, xa, wa, rstd, int32(rows), int32(cols)))
				// dw in two passes, chunks of 2 rows: three partial rows.
				part := make([]float32, 3*cols)
				must(t, l.Launch(kname("rmsnorm_bwd_dw_part", dt), D1(3*((cols+block-1)/block)), D1(block), part, dya, xa, rstd, int32(rows), int32(cols), int32(2)))
				must(t, l.Launch("sum_rows_finish_f32", blocks(cols, block), D1(block), dw, part, int32(3), int32(cols)))

				b := cpu.New()
				cOut, cRstd := cpu.Tensor(make([]float32, rows*cols)), cpu.Tensor(make([]float32, rows))
				cDx, cDw := cpu.Tensor(output(input(dt, clone(dx0)))), cpu.Tensor(clone(dw0))
				b.RMSNorm(cOut, cRstd, cpu.Tensor(x), cpu.Tensor(w), rows, cols, eps)
				b.RMSNormBackward(cDx, cDw, cpu.Tensor(dy), cpu.Tensor(x), cpu.Tensor(w), cRstd, rows, cols)
				tl := tolFor(dt)
				near(t, "out", output(out), cOut, tl)
				near(t, "rstd", rstd, cRstd, tolF32)
				near(t, "dx", output(dxa), cDx, tl)
				near(t, "dw", dw, cDw, tolF32)
			})
		}
	}
}

func TestRoPE(t *testing.T) {
	const rows, heads, headDim, theta = 6, 3, 16, 1e6
	for name, l := range launchers(t) {
		for _, dt := range dtypes {
			t.Run(name+"/"+dt, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, 4))
				x := randn(rng, rows*heads*headDim, 1)
				pos := make([]int32, rows)
				for i := range pos {
					pos[i] = int32(rng.IntN(4000))
				}
				xa := input(dt, x)
				n := rows * heads * headDim / 2
				must(t, l.Launch(kname("rope", dt), blocks(n, block), D1(block), xa, pos, int32(rows), int32(heads), int32(headDim), float64(theta), float32(1)))
				b := cpu.New()
				want := cpu.Tensor(clone(x))
				b.RoPE(want, pos, rows, heads, headDim, theta)
				near(t, "rope", output(xa), want, tolFor(dt))

				// The backward pass is the inverse rotation.
				ga := input(dt, clone(x))
				must(t, l.Launch(kname("rope", dt), blocks(n, block), D1(block), ga, pos, int32(rows), int32(heads), int32(headDim), float64(theta), float32(-1)))
				wantG := cpu.Tensor(clone(x))
				b.RoPEBackward(wantG, pos, rows, heads, headDim, theta)
				near(t, "rope backward", output(ga), wantG, tolFor(dt))
			})
		}
	}
}

func TestSwiGLU(t *testing.T) {
	const n = 1000
	for name, l := range launchers(t) {
		for _, dt := range dtypes {
			t.Run(name+"/"+dt, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(5, 6))
				g, u, d := randn(rng, n, 3), randn(rng, n, 1), randn(rng, n, 1)
				ga, ua, da := input(dt, g), input(dt, u), input(dt, d)
				out, dg, du := input(dt, make([]float32, n)), input(dt, make([]float32, n)), input(dt, make([]float32, n))
				// Fewer blocks than elements: the grid-stride loop covers the rest.
				must(t, l.Launch(kname("swiglu_fwd", dt), D1(3), D1(block), out, ga, ua, int64(n)))
				must(t, l.Launch(kname("swiglu_bwd", dt), D1(3), D1(block), dg, du, da, ga, ua, int64(n)))
				b := cpu.New()
				cOut, cDg, cDu := make(cpu.Tensor, n), make(cpu.Tensor, n), make(cpu.Tensor, n)
				b.SwiGLU(cOut, cpu.Tensor(g), cpu.Tensor(u), n)
				b.SwiGLUBackward(cDg, cDu, cpu.Tensor(d), cpu.Tensor(g), cpu.Tensor(u), n)
				tl := tolFor(dt)
				near(t, "out", output(out), cOut, tl)
				near(t, "dgate", output(dg), cDg, tl)
				near(t, "dup", output(du), cDu, tl)
			})
		}
	}
}

func TestSoftmax(t *testing.T) {
	const rows, cols = 4, 300
	for name, l := range launchers(t) {
		for _, dt := range dtypes {
			t.Run(name+"/"+dt, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 8))
				x := randn(rng, rows*cols, 4)
				out := input(dt, make([]float32, rows*cols))
				must(t, l.Launch(kname("softmax", dt), D1(rows), D1(block), out, input(dt, x), int32(rows), int32(cols)))
				want := make(cpu.Tensor, rows*cols)
				cpu.New().Softmax(want, cpu.Tensor(x), rows, cols)
				near(t, "softmax", output(out), want, tolFor(dt))
			})
		}
	}
}

func TestLogProbs(t *testing.T) {
	const rows, vocab = 4, 1000
	for name, l := range launchers(t) {
		for _, dt := range dtypes {
			t.Run(name+"/"+dt, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(9, 10))
				z := randn(rng, rows*vocab, 3)
				targets := []int32{0, 999, 17, 500}
				za := input(dt, z)
				logp, ent, lse := make([]float32, rows), make([]float32, rows), make([]float32, rows)
				must(t, l.Launch(kname("logprobs_fwd", dt), D1(rows), D1(block), logp, ent, lse, za, targets, int32(rows), int32(vocab)))
				b := cpu.New()
				cLogp, cEnt, cLse := make(cpu.Tensor, rows), make(cpu.Tensor, rows), make(cpu.Tensor, rows)
				b.LogProbs(cLogp, cEnt, cLse, cpu.Tensor(z), targets, rows, vocab)
				near(t, "logp", logp, cLogp, tolF32)
				near(t, "entropy", ent, cEnt, tol{rel: 1e-5, abs: 1e-5})
				near(t, "lse", lse, cLse, tolF32)

				dLogp := randn(rng, rows, 1)
				// Row 1 has no entropy gradient: the kernel skips the entropy pass there.
				dEnt := []float32{0.5, 0, -0.25, 1}
				for _, withEnt := range []bool{true, false} {
					dz := input(dt, make([]float32, rows*vocab))
					var dEntArg any = Null{}
					var cDEnt backend.Tensor // nil: no entropy gradient
					if withEnt {
						dEntArg, cDEnt = dEnt, cpu.Tensor(dEnt)
					}
					must(t, l.Launch(kname("logprobs_bwd", dt), D1(rows), D1(block), dz, za, lse, dLogp, dEntArg, targets, int32(rows), int32(vocab)))
					cDz := make(cpu.Tensor, rows*vocab)
					b.LogProbsBackward(cDz, cpu.Tensor(z), cLse, cpu.Tensor(dLogp), cDEnt, targets, rows, vocab)
					// dz is small everywhere but at the target: bound by the row scale.
					near(t, "dlogits", output(dz), cDz, tol{rel: tolFor(dt).rel, abs: 1e-4 + tolFor(dt).abs})
				}
			})
		}
	}
}

func TestCasts(t *testing.T) {
	x := []float32{0, -0, 1, -1, 1.00390625, 1.01171875, 3.4e38, -3.4e38, 1e-40, -1e-40, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 65504, 1.0 / 3}
	rng := rand.New(rand.NewPCG(11, 12))
	x = append(x, randn(rng, 200, 100)...)
	for name, l := range launchers(t) {
		t.Run(name, func(t *testing.T) {
			h := make([]uint16, len(x))
			must(t, l.Launch("cast_f32_bf16", D1(2), D1(block), h, x, int64(len(x))))
			want := toBF16(x)
			for i := range h {
				if h[i] != want[i] {
					t.Errorf("bf16(%g) = %#04x, want %#04x", x[i], h[i], want[i])
				}
			}
			back := make([]float32, len(x))
			must(t, l.Launch("cast_bf16_f32", D1(2), D1(block), back, h, int64(len(x))))
			wantBack := fromBF16(want)
			for i := range back {
				if math.Float32bits(back[i]) != math.Float32bits(wantBack[i]) {
					t.Errorf("f32(%#04x) = %g, want %g", h[i], back[i], wantBack[i])
				}
			}
		})
	}
}
