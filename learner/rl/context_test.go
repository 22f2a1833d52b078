package rl

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// contextGolden mirrors testdata/context_golden.json, written by
// context_golden.py from PyTorch (float64).
type contextGolden struct {
	GroupSize      int         `json:"group_size"`
	ConfidenceCoef float64     `json:"confidence_coef"`
	DependenceCoef float64     `json:"dependence_coef"`
	Success        []float64   `json:"success"`
	AnswerLogProbs [][]float32 `json:"answer_logprobs"`
	WithContext    [][]float32 `json:"with_context"`
	WithoutContext [][]float32 `json:"without_context"`
	Confidence     []float64   `json:"confidence"`
	Dependence     []float64   `json:"dependence"`
	Rewards        []float64   `json:"rewards"`
	Advantages     []float64   `json:"advantages"`
	P              []float64   `json:"p"`
	Q              []float64   `json:"q"`
	KL             float64     `json:"kl"`
}

func loadContextGolden(t *testing.T) contextGolden {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "context_golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g contextGolden
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

func TestContextRewardsGolden(t *testing.T) {
	g := loadContextGolden(t)
	cs, err := ContextRewards(ContextRewardConfig{ConfidenceCoef: g.ConfidenceCoef, DependenceCoef: g.DependenceCoef},
		ContextInputs{Success: g.Success, AnswerLogProbs: g.AnswerLogProbs, WithContext: g.WithContext, WithoutContext: g.WithoutContext})
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "confidence", cs.Confidence, g.Confidence, 1e-12)
	assertFloats(t, "dependence", cs.Dependence, g.Dependence, 1e-12)
	assertFloats(t, "rewards", cs.Rewards, g.Rewards, 1e-12)
	adv, err := GRPOAdvantages(cs.Rewards, g.GroupSize)
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "advantages", adv, g.Advantages, 1e-6)
	// Terms without inputs are not reported; with inputs and coefficients
	// 0 they are reported and leave the reward alone.
	off, err := ContextRewards(ContextRewardConfig{}, ContextInputs{Success: g.Success})
	if err != nil {
		t.Fatal(err)
	}
	if off.Confidence != nil || off.Dependence != nil {
		t.Errorf("no inputs: confidence %v, dependence %v", off.Confidence, off.Dependence)
	}
	assertFloats(t, "rewards without terms", off.Rewards, g.Success, 0)
	measured, err := ContextRewards(ContextRewardConfig{},
		ContextInputs{Success: g.Success, AnswerLogProbs: g.AnswerLogProbs, WithContext: g.WithContext, WithoutContext: g.WithoutContext})
	if err != nil {
		t.Fatal(err)
	}
	assertFloats(t, "measured dependence", measured.Dependence, g.Dependence, 1e-12)
	assertFloats(t, "rewards with coefficients 0", measured.Rewards, g.Success, 0)
}

// The dependence term averaged over answers sampled with the context is
// KL(π(·|x,c) ‖ π(·|x)): torch's exact value for a one-token answer.
func TestContextDependenceEstimatesKL(t *testing.T) {
	g := loadContextGolden(t)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 200000
	in := ContextInputs{Success: make([]float64, n), WithContext: make([][]float32, n), WithoutContext: make([][]float32, n)}
	for i := range n {
		u, y := rng.Float64(), 0
		for acc := math.Exp(g.P[0]); u > acc && y < len(g.P)-1; acc += math.Exp(g.P[y]) {
			y++
		}
		in.WithContext[i], in.WithoutContext[i] = []float32{float32(g.P[y])}, []float32{float32(g.Q[y])}
	}
	cs, err := ContextRewards(ContextRewardConfig{DependenceCoef: 1}, in)
	if err != nil {
		t.Fatal(err)
	}
	var mean float64
	for _, d := range cs.Dependence {
		mean += d / n
	}
	if math.Abs(mean-g.KL) > 0.02 {
		t.Errorf("mean dependence %v over %d samples, exact KL %v", mean, n, g.KL)
	}
}

func TestContextRewardsRefusals(t *testing.T) {
	lp := [][]float32{{-1}, {-2}}
	for _, c := range []struct {
		name string
		cfg  ContextRewardConfig
		in   ContextInputs
		want string
	}{
		{"coef", ContextRewardConfig{ConfidenceCoef: math.NaN()}, ContextInputs{Success: []float64{1, 0}}, "coefficients"},
		{"missing", ContextRewardConfig{ConfidenceCoef: 1}, ContextInputs{Success: []float64{1, 0}}, "answer logprobs: 0 sequences for 2 episodes"},
		{"empty", ContextRewardConfig{DependenceCoef: 1}, ContextInputs{Success: []float64{1, 0}, WithContext: [][]float32{{-1}, {}}, WithoutContext: lp}, "with-context logprobs[1]: no tokens"},
		{"positive", ContextRewardConfig{ConfidenceCoef: 1}, ContextInputs{Success: []float64{1, 0}, AnswerLogProbs: [][]float32{{-1}, {0.5}}}, "answer logprobs[1][0] = 0.5"},
		{"lengths", ContextRewardConfig{DependenceCoef: 1}, ContextInputs{Success: []float64{1, 0}, WithContext: lp, WithoutContext: [][]float32{{-1}, {-1, -2}}}, "episode 1: 1 tokens with the context, 2 without"},
		{"success", ContextRewardConfig{}, ContextInputs{Success: []float64{math.Inf(1)}}, "success[0]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ContextRewards(c.cfg, c.in)
			assertErr(t, err, c.want)
		})
	}
}
