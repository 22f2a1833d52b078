package train

import (
	"github.com/rlnode/rlnode/recipes"
	"reflect"
	"testing"
)

// eval.samples, eval.temperature and eval.pass_k map onto the driver's
// EvalSampling (sampled evaluation runs: the refusal is gone); a greedy
// recipe leaves it zero, the driver's greedy evaluation.
func TestFromRecipeSampledEval(t *testing.T) {
	for _, c := range []struct {
		recipe string
		sets   []string
		want   EvalSampling
	}{
		{"quickstart", nil, EvalSampling{}},
		{"quickstart", []string{"eval.samples=8", "eval.temperature=0.7"}, EvalSampling{Samples: 8, Temperature: 0.7}},
		{"quickstart", []string{"eval.samples=8", "eval.temperature=1", "eval.pass_k=[1, 4, 8]"}, EvalSampling{Samples: 8, Temperature: 1, PassK: []int{1, 4, 8}}},
		{"quickstart", []string{"eval.temperature=0.5"}, EvalSampling{Samples: 1, Temperature: 0.5}},
		{"mlmt_math", []string{"eval.samples=4", "eval.temperature=1", "eval.pass_k=[2]"}, EvalSampling{Samples: 4, Temperature: 1, PassK: []int{2}}},
		{"score_math", []string{"eval.samples=2", "eval.temperature=0.8"}, EvalSampling{Samples: 2, Temperature: 0.8}},
	} {
		l, err := recipes.Load(c.recipe, c.sets)
		if err != nil {
			t.Errorf("%s %v: load: %v", c.recipe, c.sets, err)
			continue
		}
		cfg, err := FromRecipe(l, t.TempDir())
		if err != nil {
			t.Errorf("%s %v: %v", c.recipe, c.sets, err)
			continue
		}
		if !reflect.DeepEqual(cfg.EvalSampling, c.want) {
			t.Errorf("%s %v: EvalSampling %+v, want %+v", c.recipe, c.sets, cfg.EvalSampling, c.want)
		}
	}
}
