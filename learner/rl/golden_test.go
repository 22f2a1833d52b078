package rl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// rlGolden mirrors testdata/rl_golden.json, written by rl_golden.py from
// PyTorch (verl's formulas, autograd gradients, float64).
type rlGolden struct {
	Inputs struct {
		Mask           [][]float32 `json:"mask"`
		LogProbs       [][]float32 `json:"logprobs"`
		OldLogProbs    [][]float32 `json:"old_logprobs"`
		SampleLogProbs [][]float32 `json:"sample_logprobs"`
		RefLogProbs    [][]float32 `json:"ref_logprobs"`
		Entropy        [][]float32 `json:"entropy"`
		Advantages     [][]float32 `json:"advantages"`
		NormTokens     float64     `json:"norm_tokens"`
		NormSeqs       float64     `json:"norm_seqs"`
		NormConst      float64     `json:"norm_const"`
		Values         [][]float32 `json:"values"`
		OldValues      [][]float32 `json:"old_values"`
		Returns        [][]float32 `json:"returns"`
	}
	Policy []struct {
		Name         string
		ClipLow      float64     `json:"clip_low"`
		ClipHigh     float64     `json:"clip_high"`
		DualClip     float64     `json:"dual_clip"`
		TISCap       float64     `json:"tis_cap"`
		KLCoef       float64     `json:"kl_coef"`
		KL           string      `json:"kl"`
		EntropyCoef  float64     `json:"entropy_coef"`
		Aggregation  string      `json:"aggregation"`
		Loss         float64     `json:"loss"`
		DLogProbs    [][]float32 `json:"dlogprobs"`
		DEntropy     [][]float32 `json:"dentropy"`
		ClipFracLow  float64     `json:"clip_frac_low"`
		ClipFracHigh float64     `json:"clip_frac_high"`
		DualClipFrac float64     `json:"dual_clip_frac"`
		MeanRatio    float64     `json:"mean_ratio"`
		ApproxKL     float64     `json:"approx_kl"`
		EntropyMean  float64     `json:"entropy_mean"`
	}
	Value []struct {
		Aggregation string      `json:"aggregation"`
		Clip        float64     `json:"clip"`
		Loss        float64     `json:"loss"`
		DValues     [][]float32 `json:"dvalues"`
		ClipFrac    float64     `json:"clip_frac"`
	}
	Groups struct {
		Rewards   []float64 `json:"rewards"`
		GroupSize int       `json:"group_size"`
		GRPO      []float64 `json:"grpo"`
		DrGRPO    []float64 `json:"drgrpo"`
		RLOO      []float64 `json:"rloo"`
	}
	Token struct {
		Scores        []float64   `json:"scores"`
		Beta          float64     `json:"beta"`
		Gamma         float64     `json:"gamma"`
		Lambda        float64     `json:"lambda"`
		KLK3          [][]float32 `json:"kl_k3"`
		TokenRewards  [][]float32 `json:"token_rewards"`
		RPPReturns    [][]float32 `json:"reinforcepp_returns"`
		RPPAdvantages [][]float32 `json:"reinforcepp_advantages"`
		GAEAdvantages [][]float32 `json:"gae_advantages"`
		GAEReturns    [][]float32 `json:"gae_returns"`
	}
}

func loadRLGolden(t *testing.T) *rlGolden {
	t.Helper()
	path := filepath.Join("testdata", "rl_golden.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g rlGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(g.Policy) == 0 || len(g.Value) == 0 || len(g.Inputs.Mask) == 0 {
		t.Fatalf("%s: empty golden file", path)
	}
	return &g
}

// Tolerances: the reference is float64 on the same float32 inputs; Go
// returns float32 gradients, so they agree to float32 rounding.
const (
	goldenLossTol = 1e-9
	goldenGradTol = 1e-6
)

func TestPolicyLossGolden(t *testing.T) {
	g := loadRLGolden(t)
	in := g.Inputs
	b := PolicyBatch{
		LogProbs: in.LogProbs, OldLogProbs: in.OldLogProbs, SampleLogProbs: in.SampleLogProbs,
		RefLogProbs: in.RefLogProbs, Entropy: in.Entropy, Advantages: in.Advantages, Mask: in.Mask,
	}
	norm := Norm{Tokens: in.NormTokens, Seqs: in.NormSeqs, Const: in.NormConst}
	if got := CountNorm(in.Mask); got.Tokens != norm.Tokens || got.Seqs != norm.Seqs {
		t.Fatalf("CountNorm = %+v, torch counted %+v", got, norm)
	}
	for _, c := range g.Policy {
		t.Run(c.Name, func(t *testing.T) {
			kl, err := ParseKLEstimator(c.KL)
			if err != nil {
				t.Fatal(err)
			}
			agg, err := ParseAggregation(c.Aggregation)
			if err != nil {
				t.Fatal(err)
			}
			cfg := PolicyLossConfig{ClipLow: c.ClipLow, ClipHigh: c.ClipHigh, DualClip: c.DualClip, TISCap: c.TISCap,
				KLCoef: c.KLCoef, KL: kl, EntropyCoef: c.EntropyCoef, Aggregation: agg}
			res, err := PolicyLoss(cfg, b, norm)
			if err != nil {
				t.Fatal(err)
			}
			if !near(res.Loss, c.Loss, goldenLossTol) {
				t.Errorf("loss %.12g, torch %.12g", res.Loss, c.Loss)
			}
			assertTokens(t, "dlogprobs", res.DLogProbs, c.DLogProbs, goldenGradTol)
			if c.DEntropy != nil {
				assertTokens(t, "dentropy", res.DEntropy, c.DEntropy, goldenGradTol)
			}
			s := res.Stats
			for _, st := range []struct {
				name      string
				got, want float64
			}{
				{"clip frac low", s.ClipFracLow(), c.ClipFracLow},
				{"clip frac high", s.ClipFracHigh(), c.ClipFracHigh},
				{"dual clip frac", s.DualClipFrac(), c.DualClipFrac},
				{"mean ratio", s.MeanRatio(), c.MeanRatio},
				{"approx kl", s.ApproxKL(), c.ApproxKL},
				{"entropy mean", s.EntropyMean(), c.EntropyMean},
			} {
				if !near(st.got, st.want, 1e-9) {
					t.Errorf("%s = %.12g, torch %.12g", st.name, st.got, st.want)
				}
			}
		})
	}
}

func TestValueLossGolden(t *testing.T) {
	g := loadRLGolden(t)
	in := g.Inputs
	b := ValueBatch{Values: in.Values, OldValues: in.OldValues, Returns: in.Returns, Mask: in.Mask}
	norm := Norm{Tokens: in.NormTokens, Seqs: in.NormSeqs, Const: in.NormConst}
	for _, c := range g.Value {
		t.Run(c.Aggregation, func(t *testing.T) {
			res, err := ValueLoss(b, c.Clip, Aggregation(c.Aggregation), norm)
			if err != nil {
				t.Fatal(err)
			}
			if !near(res.Loss, c.Loss, goldenLossTol) {
				t.Errorf("loss %.12g, torch %.12g", res.Loss, c.Loss)
			}
			assertTokens(t, "dvalues", res.DValues, c.DValues, goldenGradTol)
			if !near(res.ClipFrac(), c.ClipFrac, 1e-12) {
				t.Errorf("clip frac %v, torch %v", res.ClipFrac(), c.ClipFrac)
			}
		})
	}
}

func TestAdvantagesGolden(t *testing.T) {
	g := loadRLGolden(t)
	gr := g.Groups
	for _, c := range []struct {
		name string
		fn   func([]float64, int) ([]float64, error)
		want []float64
	}{
		{"grpo", GRPOAdvantages, gr.GRPO},
		{"dr.grpo", DrGRPOAdvantages, gr.DrGRPO},
		{"rloo", RLOOAdvantages, gr.RLOO},
	} {
		got, err := c.fn(gr.Rewards, gr.GroupSize)
		if err != nil {
			t.Fatal(err)
		}
		assertFloats(t, c.name, got, c.want, 1e-12)
	}

	in, tk := g.Inputs, g.Token
	kl, err := KLPenalty(K3, in.LogProbs, in.RefLogProbs, in.Mask)
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "k3 penalty", kl, tk.KLK3, 1e-7)
	rew, err := TokenRewards(tk.Scores, kl, in.Mask, tk.Beta)
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "token rewards", rew, tk.TokenRewards, 1e-7)
	// The reference continues from its own float32-rounded token rewards.
	adv, ret, err := ReinforcePPAdvantages(tk.TokenRewards, in.Mask, tk.Gamma)
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "reinforce++ returns", ret, tk.RPPReturns, 1e-6)
	assertTokens(t, "reinforce++ advantages", adv, tk.RPPAdvantages, 1e-5)
	adv, ret, err = GAE(tk.TokenRewards, in.Values, in.Mask, tk.Gamma, tk.Lambda)
	if err != nil {
		t.Fatal(err)
	}
	assertTokens(t, "gae advantages", adv, tk.GAEAdvantages, 1e-6)
	assertTokens(t, "gae returns", ret, tk.GAEReturns, 1e-6)
}
