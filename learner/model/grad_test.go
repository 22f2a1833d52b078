package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// weightedLoss is sum(wl*logp + we*ent) accumulated in float64.
func weightedLoss(t *testing.T, m *Model, bt *Batch, wl, we []float32) float64 {
	t.Helper()
	logp, ent, err := m.Forward(bt)
	if err != nil {
		t.Fatal(err)
	}
	var s float64
	for i := range logp {
		s += float64(wl[i])*float64(logp[i]) + float64(we[i])*float64(ent[i])
	}
	return s
}

// gradCheck compares Backward's gradient of every trainable parameter
// with central finite differences at a few random elements each.
func gradCheck(t *testing.T, m *Model, bt *Batch, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 2))
	wl, we := randomWeights(rng, len(bt.Outputs)), randomWeights(rng, len(bt.Outputs))
	weightedLoss(t, m, bt, wl, we)
	m.ZeroGrad()
	if err := m.Backward(wl, we); err != nil {
		t.Fatal(err)
	}
	grads := m.Grads()
	const h = 1e-2
	checked := 0
	for _, p := range m.TrainableParams() {
		w := m.download(p.W)
		g := grads[p.Name]
		var gmax float64
		for _, v := range g {
			gmax = max(gmax, math.Abs(float64(v)))
		}
		for k := 0; k < 4; k++ {
			i := rng.IntN(len(w))
			orig := w[i]
			w[i] = orig + h
			m.B.Upload(p.W, w)
			lp := weightedLoss(t, m, bt, wl, we)
			w[i] = orig - h
			m.B.Upload(p.W, w)
			lm := weightedLoss(t, m, bt, wl, we)
			w[i] = orig
			m.B.Upload(p.W, w)
			fd := (lp - lm) / (2 * h)
			// float32 forward passes: the difference quotient carries
			// ~1e-6*|loss|/h of rounding noise, plus O(h²) truncation.
			tol := 2e-3 + 2e-2*max(math.Abs(fd), 0.1*gmax)
			if d := math.Abs(fd - float64(g[i])); d > tol {
				t.Errorf("%s[%d]: backward %.6f, finite difference %.6f", p.Name, i, g[i], fd)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("nothing checked")
	}
}

func TestFiniteDifferenceGradients(t *testing.T) {
	for _, arch := range []string{Qwen2, Llama} {
		for _, pack := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pack=%v", arch, pack), func(t *testing.T) {
				m := tinyModel(t, tinyConfig(arch), 7)
				seqs := randomSequences(rand.New(rand.NewPCG(3, 3)), 4, 32)
				seqLen := 0
				if pack {
					seqLen = 12
				}
				bt, err := NewBatch(seqs, seqLen, pack, 32)
				if err != nil {
					t.Fatal(err)
				}
				gradCheck(t, m, bt, 11)
			})
		}
	}
}

// Two micro-batches accumulate the same gradient as one batch holding both.
func TestGradientAccumulation(t *testing.T) {
	m := tinyModel(t, tinyConfig(Qwen2), 5)
	rng := rand.New(rand.NewPCG(9, 9))
	seqs := randomSequences(rng, 6, 32)
	all, _ := NewBatch(seqs, 0, false, 32)
	a, _ := NewBatch(seqs[:2], 0, false, 32)
	b, _ := NewBatch(seqs[2:], 10, true, 32)
	wl := randomWeights(rng, len(all.Outputs))
	m.ZeroGrad()
	if _, _, err := m.Forward(all); err != nil {
		t.Fatal(err)
	}
	if err := m.Backward(wl, nil); err != nil {
		t.Fatal(err)
	}
	want := m.Grads()
	m.ZeroGrad()
	per := all.Split(wl)
	for _, part := range []struct {
		bt   *Batch
		seqs [][]float32
	}{{a, per[:2]}, {b, per[2:]}} {
		if _, _, err := m.Forward(part.bt); err != nil {
			t.Fatal(err)
		}
		d, err := part.bt.Join(part.seqs)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(d, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := m.Grads()
	for name, w := range want {
		for i := range w {
			if math.Abs(float64(got[name][i]-w[i])) > 1e-5+1e-4*math.Abs(float64(w[i])) {
				t.Errorf("%s[%d] = %v accumulated, %v in one batch", name, i, got[name][i], w[i])
				break
			}
		}
	}
}
