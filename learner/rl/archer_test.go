package rl

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// archerGolden mirrors testdata/archer_golden.json, written by
// archer_golden.py from PyTorch (autograd, float64).
type archerGolden struct {
	Gamma          float64     `json:"gamma"`
	Tau            float64     `json:"tau"`
	Rewards        []float64   `json:"rewards"`
	Done           []bool      `json:"done"`
	NextValues     []float64   `json:"next_values"`
	TargetQ        []float64   `json:"target_q"`
	Q              []float64   `json:"q"`
	V              []float64   `json:"v"`
	QTargets       []float64   `json:"q_targets"`
	VTargets       []float64   `json:"v_targets"`
	QLoss          float64     `json:"q_loss"`
	VLoss          float64     `json:"v_loss"`
	Loss           float64     `json:"loss"`
	DQ             []float64   `json:"dq"`
	DV             []float64   `json:"dv"`
	Online         []float64   `json:"online"`
	Target         []float64   `json:"target"`
	Polyak         []float64   `json:"polyak"`
	Advantages     []float64   `json:"advantages"`
	Mask           [][]float32 `json:"mask"`
	LogProbs       [][]float32 `json:"logprobs"`
	ActorSurrogate float64     `json:"actor_surrogate_loss"`
	ActorDLogProbs [][]float32 `json:"actor_dlogprobs"`
}

func loadArcherGolden(t *testing.T) *archerGolden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "archer_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g archerGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func TestArcherCriticGolden(t *testing.T) {
	g := loadArcherGolden(t)
	yq, err := TDTargets(g.Rewards, g.NextValues, g.Done, g.Gamma)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "q targets", yq, g.QTargets, 1e-12)
	res, err := CriticLoss(g.Q, g.V, yq, g.TargetQ)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "losses", []float64{res.QLoss, res.VLoss, res.Loss}, []float64{g.QLoss, g.VLoss, g.Loss}, 1e-12)
	assertFloats(t, "dQ", res.DQ, g.DQ, 1e-12)
	assertFloats(t, "dV", res.DV, g.DV, 1e-12)

	target, online := make([]float32, len(g.Target)), make([]float32, len(g.Online))
	for i := range target {
		target[i], online[i] = float32(g.Target[i]), float32(g.Online[i])
	}
	if err := Polyak(target, online, g.Tau); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, len(target))
	for i, w := range target {
		got[i] = float64(w)
	}
	assertFloats(t, "polyak", got, g.Polyak, 1e-6) // float32 weights
}

// The actor's loss −mean_i A_i·Σ_t log π(a_it) is PolicyLoss on the
// broadcast advantages with seq-mean-token-sum-norm (const 1), on-policy.
func TestArcherActorGolden(t *testing.T) {
	g := loadArcherGolden(t)
	adv, err := UtteranceAdvantages(g.Q, g.V)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "advantages", adv, g.Advantages, 1e-12)
	tok, err := TokenAdvantages(adv, g.Mask)
	if err != nil {
		t.Fatal(err)
	}
	norm := CountNorm(g.Mask)
	norm.Const = 1
	cfg := PolicyLossConfig{ClipLow: 0.2, ClipHigh: 0.28, Aggregation: SeqMeanTokenSumNorm}
	res, err := PolicyLoss(cfg, PolicyBatch{LogProbs: g.LogProbs, OldLogProbs: g.LogProbs, Advantages: tok, Mask: g.Mask}, norm)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "actor loss", []float64{res.Loss}, []float64{g.ActorSurrogate}, 1e-6)
	assertTokens(t, "actor dlogprobs", res.DLogProbs, g.ActorDLogProbs, 1e-7)
}

func TestArcherRefusals(t *testing.T) {
	_, err := TDTargets([]float64{1}, []float64{0}, []bool{false}, 1.5)
	assertErr(t, err, "gamma 1.5")
	_, err = TDTargets([]float64{1, 0}, []float64{0}, []bool{false, true}, 0.9)
	assertErr(t, err, "2 rewards, 1 next values")
	nan := func() float64 { z := 0.0; return z / z }()
	_, err = TDTargets([]float64{1}, []float64{nan}, []bool{false}, 0.9)
	assertErr(t, err, "next value 0 is NaN")
	if y, err := TDTargets([]float64{1}, []float64{nan}, []bool{true}, 0.9); err != nil || y[0] != 1 {
		t.Fatalf("a done transition ignores its next value: %v, %v", y, err)
	}
	_, err = CriticLoss(nil, nil, nil, nil)
	assertErr(t, err, "want the same number > 0")
	_, err = CriticLoss([]float64{1}, []float64{nan}, []float64{0}, []float64{0})
	assertErr(t, err, "v")
	assertErr(t, Polyak(make([]float32, 2), make([]float32, 2), -0.1), "tau -0.1")
	assertErr(t, Polyak(make([]float32, 2), make([]float32, 3), 0.1), "2 target weights, 3 online")
}
