package ctxopt

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/rlnode/rlnode/learner/optim"
)

// TestPPOGolden checks one PPO update against PyTorch
// (testdata/ppo_golden.py): the loss and every gradient on a batch with
// action masks, an inactive head, clipped ratios and GAE over multi-step
// episodes, then the weights after the gradient-norm clip and AdamW step.
func TestPPOGolden(t *testing.T) {
	b, err := os.ReadFile("testdata/ppo_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Obs    int
		Hidden []int
		Heads  []int
		Cfg    struct {
			LR          float64 `json:"lr"`
			EntropyCoef float64 `json:"entropy_coef"`
			Clip        float64 `json:"clip"`
			ValueCoef   float64 `json:"value_coef"`
			Gamma       float64 `json:"gamma"`
			MaxGradNorm float64 `json:"max_grad_norm"`
		}
		Params   map[string][]float64
		Episodes [][]struct {
			Obs        []float32
			Mask       [][]bool
			Active     []bool
			Actions    []int
			OldLogprob float64 `json:"old_logprob"`
			OldValue   float64 `json:"old_value"`
			Reward     float64
		}
		Loss      float64
		Grads     map[string][]float64
		AfterStep map[string][]float64 `json:"after_step"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	cfg := PPOConfig{LR: g.Cfg.LR, EntropyCoef: g.Cfg.EntropyCoef, Clip: g.Cfg.Clip, Epochs: 1, MaxGradNorm: g.Cfg.MaxGradNorm,
		ValueCoef: g.Cfg.ValueCoef, Gamma: g.Cfg.Gamma, Lambda: 1, Hidden: g.Hidden}
	l, err := NewLearner("g", cfg, g.Obs, g.Heads, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	params := l.Params()
	for _, p := range params {
		v, ok := g.Params[p.Name]
		if !ok || len(v) != len(p.Data) {
			t.Fatalf("%s: golden has %d values, want %d", p.Name, len(v), len(p.Data))
		}
		for i := range v {
			p.Data[i] = float32(v[i])
		}
	}
	var eps [][]Step
	for _, ge := range g.Episodes {
		var ep []Step
		for _, s := range ge {
			ep = append(ep, Step{Obs: s.Obs, Act: Act{Mask: s.Mask, Active: s.Active}, Actions: s.Actions, LogProb: s.OldLogprob, Value: s.OldValue, Reward: s.Reward})
		}
		eps = append(eps, ep)
	}
	bt, err := l.prepare(eps)
	if err != nil {
		t.Fatal(err)
	}
	optim.ZeroGrad(params)
	st, loss, err := l.loss(bt)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClipFrac == 0 {
		t.Fatal("no ratio was clipped: the golden batch does not test the clip")
	}
	close := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol*(1+math.Abs(want)) {
			t.Errorf("%s: %.9g, torch %.9g", what, got, want)
		}
	}
	close("loss", loss, g.Loss, 1e-6)
	for _, p := range params {
		for i, w := range g.Grads[p.Name] {
			close(p.Name+" gradient", float64(p.Grad[i]), w, 1e-5)
		}
	}
	if _, err := l.Update(eps); err != nil {
		t.Fatal(err)
	}
	for _, p := range params {
		for i, w := range g.AfterStep[p.Name] {
			close(p.Name+" after the step", float64(p.Data[i]), w, 1e-6)
		}
	}
}
