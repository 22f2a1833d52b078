package rl

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// biLevelGolden mirrors testdata/bilevel_golden.json, written by
// bilevel_golden.py from PyTorch (autograd, float64).
type biLevelGolden struct {
	Rewards          []float64   `json:"rewards"`
	GroupSize        int         `json:"group_size"`
	ValueCoef        float64     `json:"value_coef"`
	ValueLossCoef    float64     `json:"value_loss_coef"`
	KLCoef           float64     `json:"kl_coef"`
	ZMask            [][]float32 `json:"z_mask"`
	ZLogProbs        [][]float32 `json:"z_logprobs"`
	YMask            [][]float32 `json:"y_mask"`
	YLogProbs        [][]float32 `json:"y_logprobs"`
	GMask            [][]float32 `json:"g_mask"`
	GLogProbs        [][]float32 `json:"g_logprobs"`
	GRefLogProbs     [][]float32 `json:"g_ref_logprobs"`
	GValues          [][]float32 `json:"g_values"`
	LastValues       []float64   `json:"last_values"`
	SolverAdvantages []float64   `json:"solver_advantages"`
	Solver           map[string]struct {
		Loss   float64     `json:"loss"` // the surrogate's value at ratio 1
		DLogpZ [][]float32 `json:"dlogp_z"`
		DLogpY [][]float32 `json:"dlogp_y"`
	} `json:"solver"`
	ValueLoss          float64     `json:"value_loss"`
	DValues            [][]float32 `json:"dvalues"`
	ShapedRewards      []float64   `json:"shaped_rewards"`
	FeedbackAdvantages []float64   `json:"feedback_advantages"`
	FeedbackPGKLLoss   float64     `json:"feedback_pg_kl_loss"`
	FeedbackLoss       float64     `json:"feedback_loss"`
	FeedbackDLogProbs  [][]float32 `json:"feedback_dlogprobs"`
	FeedbackDValues    [][]float32 `json:"feedback_dvalues"`
}

func loadBiLevelGolden(t *testing.T) *biLevelGolden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "bilevel_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g biLevelGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// The solver's loss −(R − V_L)(log π(z) + log π(ŷ)) is PolicyLoss on
// BaselineAdvantages, both turns as sequences of one batch: on-policy its
// gradient is REINFORCE's (the reference's autograd of that form), its
// value the surrogate's, −A per token.
func TestBiLevelSolverLossGolden(t *testing.T) {
	g := loadBiLevelGolden(t)
	v, err := LastValues(g.GValues, g.GMask)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "last values", v, g.LastValues, 1e-7)
	adv, err := BaselineAdvantages(g.Rewards, v)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "solver advantages", adv, g.SolverAdvantages, 1e-7)

	logp := append(append([][]float32{}, g.ZLogProbs...), g.YLogProbs...)
	mask := append(append([][]float32{}, g.ZMask...), g.YMask...)
	seqAdv := append(append([]float64{}, adv...), adv...)
	tokAdv, err := TokenAdvantages(seqAdv, mask)
	if err != nil {
		t.Fatal(err)
	}
	for _, agg := range []Aggregation{SeqMeanTokenSumNorm, TokenMean} {
		t.Run(string(agg), func(t *testing.T) {
			want := g.Solver[string(agg)]
			norm := CountNorm(mask)
			norm.Const = 1
			res, err := PolicyLoss(PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, Aggregation: agg},
				PolicyBatch{LogProbs: logp, OldLogProbs: logp, Advantages: tokAdv, Mask: mask}, norm)
			if err != nil {
				t.Fatal(err)
			}
			if !near(res.Loss, want.Loss, goldenLossTol) {
				t.Errorf("loss %.12g, torch %.12g", res.Loss, want.Loss)
			}
			n := len(g.ZMask)
			assertTokens(t, "dlogp z", res.DLogProbs[:n], want.DLogpZ, goldenGradTol)
			assertTokens(t, "dlogp ŷ", res.DLogProbs[n:], want.DLogpY, goldenGradTol)
		})
	}
}

func TestSquaredValueLossGolden(t *testing.T) {
	g := loadBiLevelGolden(t)
	// Two micro-batches add up to the batch's loss and gradient.
	norm := CountNorm(g.GMask)
	var loss float64
	var dv [][]float32
	for _, r := range [][2]int{{0, 4}, {4, len(g.GMask)}} {
		res, err := SquaredValueLoss(g.GValues[r[0]:r[1]], g.Rewards[r[0]:r[1]], g.GMask[r[0]:r[1]], norm)
		if err != nil {
			t.Fatal(err)
		}
		loss += res.Loss
		dv = append(dv, res.DValues...)
	}
	if !near(loss, g.ValueLoss, goldenLossTol) {
		t.Errorf("loss %.12g, torch %.12g", loss, g.ValueLoss)
	}
	assertTokens(t, "dvalues", dv, g.DValues, goldenGradTol)
}

// The feedback policy: GRPO on R + c·V_L, its own KL term, plus the
// weighted value loss, as the learner adds them.
func TestBiLevelFeedbackLossGolden(t *testing.T) {
	g := loadBiLevelGolden(t)
	shaped, err := ShapedRewards(g.Rewards, g.LastValues, g.ValueCoef)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "shaped rewards", shaped, g.ShapedRewards, 1e-7)
	adv, err := GRPOAdvantages(shaped, g.GroupSize)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "feedback advantages", adv, g.FeedbackAdvantages, 1e-6)
	tokAdv, err := TokenAdvantages(adv, g.GMask)
	if err != nil {
		t.Fatal(err)
	}
	norm := CountNorm(g.GMask)
	pl, err := PolicyLoss(PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, KLCoef: g.KLCoef, KL: K3, Aggregation: TokenMean},
		PolicyBatch{LogProbs: g.GLogProbs, OldLogProbs: g.GLogProbs, RefLogProbs: g.GRefLogProbs, Advantages: tokAdv, Mask: g.GMask}, norm)
	if err != nil {
		t.Fatal(err)
	}
	if !near(pl.Loss, g.FeedbackPGKLLoss, goldenLossTol) {
		t.Errorf("policy+KL loss %.12g, torch %.12g", pl.Loss, g.FeedbackPGKLLoss)
	}
	vl, err := SquaredValueLoss(g.GValues, g.Rewards, g.GMask, norm)
	if err != nil {
		t.Fatal(err)
	}
	if total := pl.Loss + g.ValueLossCoef*vl.Loss; !near(total, g.FeedbackLoss, goldenLossTol) {
		t.Errorf("loss %.12g, torch %.12g", total, g.FeedbackLoss)
	}
	assertTokens(t, "dlogprobs", pl.DLogProbs, g.FeedbackDLogProbs, goldenGradTol)
	for _, d := range vl.DValues {
		for i := range d {
			d[i] *= float32(g.ValueLossCoef)
		}
	}
	assertTokens(t, "dvalues", vl.DValues, g.FeedbackDValues, goldenGradTol)
}

// A sequence without loss tokens has value 0 and no value loss.
func TestSquaredValueLossSkipsEmpty(t *testing.T) {
	mask := [][]float32{{0, 0}, {1, 1, 0}}
	vals := [][]float32{{7, 7}, {0.5, 0.25, 9}}
	v, err := LastValues(vals, mask)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "values", v, []float64{0, 0.25}, 0)
	res, err := SquaredValueLoss(vals, []float64{1, 1}, mask, CountNorm(mask))
	if err != nil {
		t.Fatal(err)
	}
	if !near(res.Loss, 0.5625, 1e-12) {
		t.Errorf("loss %v, want 0.5625", res.Loss)
	}
	assertTokens(t, "dvalues", res.DValues, [][]float32{{0, 0}, {0, -1.5, 0}}, 0)
}

func TestBiLevelRefusals(t *testing.T) {
	mask := ones(2, 3)
	vals := [][]float32{{1, 2}, {3, 4, 5}}
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"shapes", func() error { _, err := LastValues([][]float32{{1}}, [][]float32{{0, 1}}); return err }(), "values[0] has 1 tokens"},
		{"lengths", func() error { _, err := BaselineAdvantages([]float64{1}, []float64{1, 2}); return err }(), "1 rewards, 2 values"},
		{"nan value", func() error { _, err := BaselineAdvantages([]float64{1}, []float64{math.NaN()}); return err }(), "values[0]"},
		{"inf coef", func() error { _, err := ShapedRewards([]float64{1}, []float64{0}, math.Inf(1)); return err }(), "coefficient"},
		{"rewards", func() error { _, err := SquaredValueLoss(vals, []float64{1}, mask, Norm{Seqs: 2}); return err }(), "1 rewards for 2 sequences"},
		{"norm", func() error { _, err := SquaredValueLoss(vals, []float64{1, 0}, mask, Norm{Seqs: 1}); return err }(), "norm seqs 1 for a micro-batch of 2"},
	} {
		t.Run(c.name, func(t *testing.T) { assertErr(t, c.err, c.want) })
	}
}
