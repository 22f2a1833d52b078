package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// TestEveryValidRecipeRuns: whatever validation accepts, a run does. Every
// built-in recipe, with every episode type the schema has and every
// engine kind (the in-process native engine, two rollout actors, vLLM
// servers: here fakes), shrunk to one warm-up and two RL steps, either is
// refused by Check (the check validate and sbatch run) or runs to its
// last step and writes its metrics.
func TestEveryValidRecipeRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every valid combination: not in -short")
	}
	shrink := []string{"sft.steps=1", "sft.batch_size=4", "schedule.steps=2", "schedule.eval_every=2", "schedule.checkpoint_every=0",
		"eval.held_out=4", "algorithm.batch_prompts=2", "algorithm.group_size=2"}
	engines := []string{"native", "actors", "vllm"}
	ran := map[string]int{} // recipe → combinations run
	for _, name := range recipes.BuiltinNames() {
		for _, ep := range recipes.EpisodeTypes {
			for _, eng := range engines {
				t.Run(fmt.Sprintf("%s/%s/%s", name, ep, eng), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					sets := append([]string{"episode.type=" + ep}, shrink...)
					var servers []*vllmtest.Server
					serve := func() string {
						s := vllmtest.New(vllmtest.Options{Model: "served", Vocab: 768})
						t.Cleanup(s.Close)
						servers = append(servers, s)
						return s.URL()
					}
					base, err := recipes.Load(name, nil)
					if err != nil {
						t.Fatal(err)
					}
					if base.Algorithm.Name == "archer" { // a critic of one small update per step
						sets = append(sets, "algorithm.archer.critic_updates_per_step=1", "algorithm.archer.critic_batch_size=4")
					}
					if base.SFT.BaseSteps > 0 { // base steps need warm-up steps after them
						sets = append(sets, "sft.steps=2", "sft.base_steps=1")
					}
					switch eng {
					case "actors":
						sets = append(sets, "engines.policy.replicas=2")
					case "vllm":
						sets = append(sets, "deterministic=false", "engines.policy.kind=vllm",
							fmt.Sprintf("engines.policy.vllm={servers: [%q], model: served}", serve()))
						if base.Engines.Feedback != nil {
							sets = append(sets, "engines.feedback.kind=vllm",
								fmt.Sprintf("engines.feedback.vllm={servers: [%q], model: served}", serve()))
						}
					}
					l, err := recipes.Load(name, sets)
					if err == nil {
						err = Check(l)
					}
					if err != nil {
						if !errors.Is(err, recipes.ErrInvalid) {
							t.Fatalf("refused without a recipe error: %v", err)
						}
						t.Skipf("refused by validation: %v", firstLine(err))
					}
					out := t.TempDir()
					cfg, err := FromRecipe(l, out)
					if err != nil {
						t.Fatalf("Check accepted the recipe, FromRecipe refused it: %v", err)
					}
					res, err := Run(ctx, cfg)
					if err != nil {
						t.Fatalf("validates, then the run fails: %v", err)
					}
					if res.Steps != cfg.WarmupSteps+cfg.Steps {
						t.Errorf("ran %d steps, want %d", res.Steps, cfg.WarmupSteps+cfg.Steps)
					}
					js, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
					if err != nil {
						t.Fatal(err)
					}
					if n := strings.Count(string(js), "\n"); n != res.Steps {
						t.Errorf("metrics.jsonl has %d lines for %d steps", n, res.Steps)
					}
					for _, s := range servers {
						if s.Generated() == 0 {
							t.Errorf("vLLM server %s answered nothing", s.URL())
						}
					}
					ran[name]++
				})
			}
		}
	}
	// Each built-in recipe runs at least as shipped (its own episode type,
	// in process): a matrix of refusals alone would pass above.
	for _, name := range recipes.BuiltinNames() {
		if ran[name] == 0 {
			t.Errorf("%s: no combination ran", name)
		}
	}
	t.Logf("combinations run per recipe: %v", ran)
}

func firstLine(err error) string {
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
