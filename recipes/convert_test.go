package recipes

import (
	"math"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/rollout/task"
)

func TestConversions(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	l, err := Load("quickstart", []string{"algorithm.schedule=cosine", "algorithm.warmup=10", "algorithm.min_lr=1e-5",
		"models.policy.lora.rank=4", "algorithm.kl_coef=0.01"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := l.Models.Policy.Init.Config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != model.Qwen2 || cfg.VocabSize != 768 || cfg.HiddenSize != 128 || cfg.NumLayers != 2 ||
		cfg.NumHeads != 4 || cfg.NumKVHeads != 2 || cfg.MaxPositions != 64 || !cfg.TieWordEmbeddings || cfg.HeadDim != 32 {
		t.Errorf("model config = %+v", cfg)
	}
	lc := l.Models.Policy.LoRA.Config(7)
	if lc.Rank != 4 || lc.Alpha != 16 || len(lc.TargetModules) != 7 || lc.Seed != 7 {
		t.Errorf("LoRA config = %+v", lc)
	}
	pl := l.Algorithm.PolicyLossConfig()
	if pl.ClipLow != 0.2 || pl.ClipHigh != 0.28 || pl.KLCoef != 0.01 || pl.KL != rl.K3 || pl.Aggregation != rl.TokenMean {
		t.Errorf("policy loss config = %+v", pl)
	}
	if err := pl.Validate(); err != nil {
		t.Error(err)
	}
	sp := l.Algorithm.Sampling()
	if sp.N != 8 || sp.MaxTokens != 8 || sp.Temperature != 1 || sp.TopP != 1 {
		t.Errorf("sampling = %+v", sp)
	}
	s := l.Algorithm.LRSchedule(l.Schedule.Steps)
	if got, want := s.LR(0), l.Algorithm.LR/10; math.Abs(got-want) > 1e-12 {
		t.Errorf("LR(0) = %v, want lr/warmup = %v", got, want)
	}
	if got := s.LR(l.Schedule.Steps); got != 1e-5 {
		t.Errorf("LR(last) = %v, want min_lr", got)
	}
	constant := (&Algorithm{LR: 1e-3, Schedule: "constant", MinLR: 0}).LRSchedule(100)
	if constant.LR(50) != 1e-3 || constant.LR(100) != 1e-3 {
		t.Errorf("constant schedule: %v %v", constant.LR(50), constant.LR(100))
	}
	g, err := task.New(l.Data.Task.Config())
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Problem(task.Train, 0)
	if err != nil || p.Kind != task.Arithmetic || p.Level != 1 {
		t.Errorf("task problem = %+v, %v", p, err)
	}
}

// What learner/model refuses in an init section is reported at load time.
func TestModelInitCheckedByModelPackage(t *testing.T) {
	_, err := Parse("base.yaml", []byte(base), "", []string{"models.policy.init.hidden_size=36", "models.policy.init.heads=4"})
	if err == nil || !strings.Contains(err.Error(), "models.policy.init: ") {
		t.Errorf("hidden 36 / 4 heads (head_dim 9): %v", err)
	}
}
