package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// vecLengths covers empty, sub-vector, exact-vector and tailed lengths.
var vecLengths = []int{0, 1, 3, 15, 16, 17, 31, 32, 33, 64, 100, 257}

// withISA runs fn with the loops of level isa selected.
func withISA(isa int, fn func()) {
	saved := vecISA
	vecISA = isa
	defer func() { vecISA = saved }()
	fn()
}

// withGo runs fn with the pure-Go loops selected.
func withGo(fn func()) { withISA(isaGo, fn) }

var isaNames = map[int]string{isaGo: "go", isaAVX2: "avx2", isaAVX512: "avx512"}

// asmISAs are the assembly levels this CPU runs, best first.
func asmISAs() []int {
	var out []int
	for isa := bestVecISA(); isa > isaGo; isa-- {
		out = append(out, isa)
	}
	return out
}

// eachAsm runs fn as a subtest at each assembly level the CPU has.
func eachAsm(t *testing.T, fn func(t *testing.T)) {
	t.Helper()
	levels := asmISAs()
	if len(levels) == 0 {
		t.Skip("no AVX2 or AVX-512 on this CPU: only the pure-Go loops run")
	}
	for _, isa := range levels {
		t.Run(isaNames[isa], func(t *testing.T) { withISA(isa, func() { fn(t) }) })
	}
}

// closeTo reports whether got is within tol relative to want (NaN matches
// NaN, infinities must match exactly).
func closeTo(got, want float32, tol float64) bool {
	g, w := float64(got), float64(want)
	switch {
	case math.IsNaN(w):
		return math.IsNaN(g)
	case math.IsInf(w, 0):
		return g == w
	}
	return math.Abs(g-w) <= tol*math.Max(math.Abs(w), 1e-30)
}

func vecInput(rng *rand.Rand, n int, spread float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * spread)
	}
	return x
}

func TestExpSubMatchesGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for _, n := range vecLengths {
			for _, spread := range []float64{1, 30} {
				src := vecInput(rng, n, spread)
				got, want := make([]float32, n), make([]float32, n)
				sum := expSub(got, src, 0.25)
				var wantSum float32
				withGo(func() { wantSum = expSub(want, src, 0.25) })
				for i := range want {
					if !closeTo(got[i], want[i], 4e-7) && !(want[i] < 1e-37 && got[i] < 1e-37) {
						t.Fatalf("n=%d: exp(%v-0.25) = %v, want %v", n, src[i], got[i], want[i])
					}
				}
				if !closeTo(sum, wantSum, 1e-5) {
					t.Fatalf("n=%d spread %v: sum %v, want %v", n, spread, sum, wantSum)
				}
			}
		}
	})
}

func TestExpSubSpecialValues(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		inf, nan := float32(math.Inf(1)), float32(math.NaN())
		src := []float32{0, -inf, -200, 200, inf, nan, 88.7, -87, 1, -1, 10, -10, 0.5, -0.5, 3, 4, 5}
		got, want := make([]float32, len(src)), make([]float32, len(src))
		expSub(got, src, 0)
		withGo(func() { expSub(want, src, 0) })
		for i := range src {
			if !closeTo(got[i], want[i], 4e-7) {
				t.Errorf("exp(%v) = %v, want %v", src[i], got[i], want[i])
			}
		}
	})
}

func TestExpSubDotMatchesGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(15, 16))
		for _, n := range vecLengths {
			src := vecInput(rng, n, 4)
			got, want := make([]float32, n), make([]float32, n)
			s, d := expSubDot(got, src, 1)
			var ws, wd float32
			withGo(func() { ws, wd = expSubDot(want, src, 1) })
			for i := range want {
				if !closeTo(got[i], want[i], 4e-7) {
					t.Fatalf("n=%d: exp(%v-1) = %v, want %v", n, src[i], got[i], want[i])
				}
			}
			if !closeTo(s, ws, 1e-5) || math.Abs(float64(d-wd)) > 1e-5*(math.Abs(float64(wd))+float64(ws)) {
				t.Fatalf("n=%d: sums %v %v, want %v %v", n, s, d, ws, wd)
			}
		}
	})
}

func TestSoftmaxGradMatchesGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		for _, n := range vecLengths {
			p0, dp0 := vecInput(rng, n, 2), vecInput(rng, n, 1)
			p, dp := append([]float32(nil), p0...), append([]float32(nil), dp0...)
			wp, wdp := append([]float32(nil), p0...), append([]float32(nil), dp0...)
			softmaxGrad(p, dp, 1.5, 0.3)
			withGo(func() { softmaxGrad(wp, wdp, 1.5, 0.3) })
			for i := range p {
				if !closeTo(p[i], wp[i], 4e-7) || !closeTo(dp[i], wdp[i], 1e-6) {
					t.Fatalf("n=%d [%d]: p %v dp %v, want %v %v", n, i, p[i], dp[i], wp[i], wdp[i])
				}
			}
		}
	})
}

func TestSwiGLUMatchesGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 8))
		for _, n := range vecLengths {
			for _, spread := range []float64{1, 40} {
				g, u, dout := vecInput(rng, n, spread), vecInput(rng, n, 1), vecInput(rng, n, 1)
				out, wout := make([]float32, n), make([]float32, n)
				dg, du, wdg, wdu := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
				swiglu(out, g, u)
				swigluBack(dg, du, dout, g, u)
				withGo(func() {
					swiglu(wout, g, u)
					swigluBack(wdg, wdu, dout, g, u)
				})
				for i := range out {
					// 1 + g(1-s) cancels near g ≈ -1.28: bound dg's error by
					// the size of its terms, not of the result.
					s := 1 / (1 + math.Exp(-float64(g[i])))
					dgScale := math.Abs(float64(dout[i])*float64(u[i])*s) * (1 + math.Abs(float64(g[i])))
					if !closeTo(out[i], wout[i], 1e-6) || !closeTo(du[i], wdu[i], 1e-6) || math.Abs(float64(dg[i]-wdg[i])) > 1e-6*dgScale {
						t.Fatalf("n=%d g=%v u=%v: out %v du %v dg %v, want %v %v %v", n, g[i], u[i], out[i], du[i], dg[i], wout[i], wdu[i], wdg[i])
					}
				}
			}
		}
	})
}

func TestReductionsMatchGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, n := range vecLengths {
			a, b := vecInput(rng, n, 3), vecInput(rng, n, 1)
			m, d := maxOf(a), dotf(a, b)
			x := append([]float32(nil), a...)
			scal(x, 0.7)
			var wm, wd float32
			wx := append([]float32(nil), a...)
			withGo(func() {
				wm, wd = maxOf(a), dotf(a, b)
				scal(wx, 0.7)
			})
			if m != wm {
				t.Errorf("n=%d: max %v, want %v", n, m, wm)
			}
			var mag float64
			for i := range a {
				mag += math.Abs(float64(a[i] * b[i]))
			}
			if math.Abs(float64(d-wd)) > 1e-6*(mag+1) {
				t.Errorf("n=%d: dot %v, want %v", n, d, wd)
			}
			for i := range x {
				if x[i] != wx[i] {
					t.Fatalf("n=%d: scale [%d] %v, want %v", n, i, x[i], wx[i])
				}
			}
		}
	})
}

func TestRMSNormRowsMatchGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(13, 14))
		for _, n := range vecLengths {
			x, w, dy := vecInput(rng, n, 2), vecInput(rng, n, 1), vecInput(rng, n, 1)
			dx0, part0 := vecInput(rng, n, 1), vecInput(rng, n, 1)
			out, wout := make([]float32, n), make([]float32, n)
			dx, part := append([]float32(nil), dx0...), append([]float32(nil), part0...)
			wdx, wpart := append([]float32(nil), dx0...), append([]float32(nil), part0...)
			rmsScale(out, x, w, 0.8)
			d := dot3(dy, w, x)
			rmsBack(dx, part, dy, x, w, 0.8, 0.1)
			var wd float32
			withGo(func() {
				rmsScale(wout, x, w, 0.8)
				wd = dot3(dy, w, x)
				rmsBack(wdx, wpart, dy, x, w, 0.8, 0.1)
			})
			var mag float64
			for i := range x {
				mag += math.Abs(float64(dy[i] * w[i] * x[i]))
			}
			if math.Abs(float64(d-wd)) > 1e-6*(mag+1) {
				t.Errorf("n=%d: dot3 %v, want %v", n, d, wd)
			}
			for i := range out {
				if !closeTo(out[i], wout[i], 1e-6) || math.Abs(float64(dx[i]-wdx[i])) > 1e-5 || math.Abs(float64(part[i]-wpart[i])) > 1e-5 {
					t.Fatalf("n=%d [%d]: out %v dx %v part %v, want %v %v %v", n, i, out[i], dx[i], part[i], wout[i], wdx[i], wpart[i])
				}
			}
		}
	})
}

func TestRoPERowMatchesGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(17, 18))
		for _, half := range []int{1, 4, 16, 20, 32, 40} {
			for _, sign := range []float32{1, -1} {
				const heads = 3
				cs, sn := vecInput(rng, half, 1), vecInput(rng, half, 1)
				x := vecInput(rng, heads*2*half, 1)
				want := append([]float32(nil), x...)
				ropeRow(x, cs, sn, heads, sign)
				withGo(func() { ropeRow(want, cs, sn, heads, sign) })
				for i := range x {
					if math.Abs(float64(x[i]-want[i])) > 1e-6*(1+math.Abs(float64(want[i]))) {
						t.Fatalf("half %d sign %v [%d]: %v, want %v", half, sign, i, x[i], want[i])
					}
				}
			}
		}
	})
}

func TestAddToMatchesGo(t *testing.T) {
	eachAsm(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(19, 20))
		for _, n := range append(vecLengths, 48, 95, 96) {
			d0, src := vecInput(rng, n, 1), vecInput(rng, n, 1)
			got, want := append([]float32(nil), d0...), append([]float32(nil), d0...)
			addTo(got, src)
			withGo(func() { addTo(want, src) })
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("n=%d [%d]: %v, want %v", n, i, got[i], want[i])
				}
			}
		}
	})
}

// TestVecNoOverrun checks that the masked tails write nothing past the
// slice: the guard element after each output must survive.
func TestVecNoOverrun(t *testing.T) {
	for _, isa := range append(asmISAs(), isaGo) {
		withISA(isa, func() { checkNoOverrun(t, isaNames[isa]) })
	}
}

func checkNoOverrun(t *testing.T, isa string) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range vecLengths {
		buf := vecInput(rng, 4*n+4, 1)
		guard := float32(12345)
		out, dp := buf[:n:n], buf[n+1:2*n+1:2*n+1]
		buf[n], buf[2*n+1] = guard, guard
		g, u := vecInput(rng, n, 1), vecInput(rng, n, 1)
		expSub(out, g, 0)
		expSubDot(out, g, 0)
		softmaxGrad(out, dp, 0, 0)
		swiglu(out, g, u)
		swigluBack(out, dp, u, g, u)
		scal(out, 2)
		addTo(out, g)
		rmsScale(out, g, u, 2)
		rmsBack(out, dp, g, u, g, 1, 1)
		if buf[n] != guard || buf[2*n+1] != guard {
			t.Fatalf("%s, n=%d: wrote past the end (%v, %v)", isa, n, buf[n], buf[2*n+1])
		}
	}
}

// TestKernelsLesserISAs reruns the kernel tests on the loops of each level
// below the CPU's best (the pure-Go loops always): the paths CPUs with less
// take.
func TestKernelsLesserISAs(t *testing.T) {
	levels := append(asmISAs(), isaGo)[1:]
	if bestVecISA() == isaGo {
		t.Skip("the kernel tests already ran on the pure-Go loops")
	}
	for _, isa := range levels {
		t.Run(isaNames[isa], func(t *testing.T) {
			withISA(isa, func() {
				t.Run("Attention", TestAttentionPackedGQA)
				t.Run("AttentionGroups", TestAttentionGroupsMatchReference)
				t.Run("RowVectors", TestRowVectorOps)
				t.Run("Elementwise", TestElementwiseBackward)
			})
		})
	}
}
