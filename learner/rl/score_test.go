package rl

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// scoreGolden mirrors testdata/score_golden.json, written by
// score_golden.py from PyTorch (autograd, float64).
type scoreGolden struct {
	GroupSize   int         `json:"group_size"`
	Beta1       float64     `json:"beta1"`
	Beta2       float64     `json:"beta2"`
	Alpha       float64     `json:"alpha"`
	ClipLow     float64     `json:"clip_low"`
	ClipHigh    float64     `json:"clip_high"`
	R1          []float64   `json:"r1"`
	R2          []float64   `json:"r2"`
	Shaped      []float64   `json:"shaped"`
	Mask        [][]float32 `json:"mask"`
	LogProbs    [][]float32 `json:"logprobs"`
	OldLogProbs [][]float32 `json:"old_logprobs"`
	RefLogProbs [][]float32 `json:"ref_logprobs"`
	Cases       []struct {
		Name        string      `json:"name"`
		Aggregation string      `json:"aggregation"`
		Advantages  []float64   `json:"advantages"`
		PGWeights   []float64   `json:"pg_weights"`
		KLWeights   []float64   `json:"kl_weights"`
		Loss        float64     `json:"loss"`
		DLogProbs   [][]float32 `json:"dlogprobs"`
	} `json:"cases"`
}

// SCoRe's stage I (first attempt KL-only at β2, second on r2) and stage II
// (both attempts, the second on r2 + α(r2 − r1)) through PolicyLoss with
// per-sequence weights, against torch.
func TestSCoReStagesGolden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "score_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g scoreGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) != 4 {
		t.Fatalf("%d cases in the golden file, want 4", len(g.Cases))
	}
	n := len(g.R1)
	a1, err := GRPOAdvantages(g.R1, g.GroupSize)
	if err != nil {
		t.Fatal(err)
	}
	a2, err := GRPOAdvantages(g.R2, g.GroupSize)
	if err != nil {
		t.Fatal(err)
	}
	shaped := make([]float64, n)
	for i := range shaped {
		shaped[i] = g.R2[i] + g.Alpha*(g.R2[i]-g.R1[i])
	}
	assertFloats(t, "shaped", shaped, g.Shaped, 1e-12)
	aShaped, err := GRPOAdvantages(shaped, g.GroupSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range g.Cases {
		t.Run(c.Name, func(t *testing.T) {
			adv := append(append([]float64{}, a1...), a2...)
			if c.PGWeights == nil {
				adv = append(append([]float64{}, a1...), aShaped...)
			}
			assertFloats(t, "advantages", adv, c.Advantages, 1e-6)
			tok, err := TokenAdvantages(adv, g.Mask)
			if err != nil {
				t.Fatal(err)
			}
			cfg := PolicyLossConfig{ClipLow: g.ClipLow, ClipHigh: g.ClipHigh, KLCoef: g.Beta1, KL: K3, Aggregation: Aggregation(c.Aggregation)}
			b := PolicyBatch{LogProbs: g.LogProbs, OldLogProbs: g.OldLogProbs, RefLogProbs: g.RefLogProbs,
				Advantages: tok, Mask: g.Mask, PGWeights: c.PGWeights, KLWeights: c.KLWeights}
			// Two micro-batches (an attempt each) add up to the batch's loss.
			norm := CountNorm(g.Mask)
			var loss float64
			var grads [][]float32
			for _, r := range [][2]int{{0, n}, {n, 2 * n}} {
				mb := PolicyBatch{LogProbs: b.LogProbs[r[0]:r[1]], OldLogProbs: b.OldLogProbs[r[0]:r[1]], RefLogProbs: b.RefLogProbs[r[0]:r[1]],
					Advantages: b.Advantages[r[0]:r[1]], Mask: b.Mask[r[0]:r[1]]}
				if b.PGWeights != nil {
					mb.PGWeights, mb.KLWeights = b.PGWeights[r[0]:r[1]], b.KLWeights[r[0]:r[1]]
				}
				res, err := PolicyLoss(cfg, mb, norm)
				if err != nil {
					t.Fatal(err)
				}
				loss += res.Loss
				grads = append(grads, res.DLogProbs...)
			}
			if !near(loss, c.Loss, goldenLossTol) {
				t.Errorf("loss %.12g, torch %.12g", loss, c.Loss)
			}
			assertTokens(t, "dlogprobs", grads, c.DLogProbs, goldenGradTol)
			if c.PGWeights != nil {
				// Stage I: the first attempt's rows get the KL's gradient
				// only, β2 strong.
				for i := range n {
					for tk, d := range grads[i] {
						if g.Mask[i][tk] == 0 && d != 0 {
							t.Errorf("dlogprobs[%d][%d] = %v at a masked token", i, tk, d)
						}
					}
				}
			}
		})
	}
}

// Weights of 1 are the unweighted loss; the weights' shape and values are
// checked.
func TestPolicyLossSeqWeights(t *testing.T) {
	mask := ones(3, 3)
	lp := [][]float32{{-1, -2, -0.5}, {-0.3, -1.2, -0.9}}
	ref := [][]float32{{-1.1, -1.7, -0.4}, {-0.2, -1.5, -0.6}}
	adv := [][]float32{{1, 1, 1}, {-0.5, -0.5, -0.5}}
	cfg := PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.2, KLCoef: 0.1, KL: K3, Aggregation: TokenMean}
	b := PolicyBatch{LogProbs: lp, OldLogProbs: lp, RefLogProbs: ref, Advantages: adv, Mask: mask}
	plain, err := PolicyLoss(cfg, b, CountNorm(mask))
	if err != nil {
		t.Fatal(err)
	}
	b.PGWeights, b.KLWeights = []float64{1, 1}, []float64{1, 1}
	same, err := PolicyLoss(cfg, b, CountNorm(mask))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Loss != same.Loss {
		t.Errorf("weights 1: loss %v, unweighted %v", same.Loss, plain.Loss)
	}
	assertTokens(t, "dlogprobs", same.DLogProbs, plain.DLogProbs, 0)
	for _, c := range []struct {
		pg, kl []float64
		want   string
	}{
		{[]float64{1}, nil, "pg weights: 1 for 2 sequences"},
		{nil, []float64{1, -1}, "kl weights[1] = -1"},
		{[]float64{math.NaN(), 1}, nil, "pg weights[0] = NaN"},
		{nil, []float64{math.Inf(1), 1}, "kl weights[0] = +Inf"},
	} {
		b.PGWeights, b.KLWeights = c.pg, c.kl
		_, err := PolicyLoss(cfg, b, CountNorm(mask))
		assertErr(t, err, c.want)
	}
}
