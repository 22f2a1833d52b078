package train

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/model"
)

// A learner rank reserves what it certainly holds on the CPU backend:
// 4-byte weights, gradients and two AdamW moments (a ZeRO-1 rank its
// slice of the moments), with LoRA the base weights alone, on a GPU none.
func TestLearnerRankMemory(t *testing.T) {
	mc := Quickstart(t.TempDir()).Model
	n := int64(mc.NumParams())
	for _, c := range []struct {
		name string
		edit func(*learner.Config)
		want int64
	}{
		{"full", func(*learner.Config) {}, 16 * n},
		{"zero1 of 4", func(l *learner.Config) { l.Shards, l.ZeROStage = 4, 1 }, 8*n + 8*n/4},
		{"zero0 of 4", func(l *learner.Config) { l.Shards = 4 }, 16 * n},
		{"lora", func(l *learner.Config) { l.LoRA = &model.LoRAConfig{Rank: 4} }, 4 * n},
		{"cuda", func(l *learner.Config) { l.Device = "cuda" }, 0},
		{"kl to a copy", func(l *learner.Config) { l.Loss.KLCoef = 0.1 }, 20 * n},
		{"lora, kl to a copy", func(l *learner.Config) { l.Loss.KLCoef, l.LoRA = 0.1, &model.LoRAConfig{Rank: 4} }, 8 * n},
	} {
		l := learner.Config{Model: mc}
		c.edit(&l)
		got, err := learnerRankMemory(l)
		if err != nil || got != c.want {
			t.Errorf("%s: got %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	if got, _ := engineMemory(learner.Config{Model: mc}, ""); got != 4*n {
		t.Errorf("engine on cpu: got %d, want %d", got, 4*n)
	}
	if got, _ := engineMemory(learner.Config{Model: mc}, "cuda-bf16"); got != 0 {
		t.Errorf("engine on cuda: got %d, want 0", got)
	}
}

// The quickstart with 1024 rollout replicas on an embedded node of
// 256 MiB is refused before any model is built, naming the recipe field
// and the amounts (it used to load 1024 copies of the model).
func TestEmbeddedMemoryRefusesReplicas(t *testing.T) {
	cfg := Quickstart(t.TempDir())
	cfg.Rollout = &Rollout{Replicas: 1024}
	cfg.EmbeddedMemory = 256 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := Run(ctx, cfg)
	if err == nil {
		t.Fatal("run of 1024 replicas on 256 MiB: no error")
	}
	t.Log(err)
	for _, want := range []string{"engines.policy.replicas", "which has 256.0 MiB", "engines.policy.replicas 1024 solver rollout actors", "GiB on the embedded node"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q in it", err, want)
		}
	}
}
