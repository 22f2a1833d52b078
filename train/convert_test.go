package train

import (
	"maps"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
)

func TestConversions(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	l, err := recipes.Load("quickstart", []string{"algorithm.schedule=cosine", "algorithm.warmup=10", "algorithm.min_lr=1e-5",
		"models.policy.lora.rank=4", "algorithm.kl_coef=0.01"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := modelConfig(l.Models.Policy.Init)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Architecture != model.Qwen2 || cfg.VocabSize != 768 || cfg.HiddenSize != 128 || cfg.NumLayers != 2 ||
		cfg.NumHeads != 4 || cfg.NumKVHeads != 2 || cfg.MaxPositions != 64 || !cfg.TieWordEmbeddings || cfg.HeadDim != 32 {
		t.Errorf("model config = %+v", cfg)
	}
	lc := loraConfig(l.Models.Policy.LoRA, 7)
	if lc.Rank != 4 || lc.Alpha != 16 || len(lc.TargetModules) != 7 || lc.Seed != 7 {
		t.Errorf("LoRA config = %+v", lc)
	}
	pl := policyLossConfig(&l.Algorithm)
	if pl.ClipLow != 0.2 || pl.ClipHigh != 0.28 || pl.KLCoef != 0.01 || pl.KL != rl.K3 || pl.Aggregation != rl.TokenMean {
		t.Errorf("policy loss config = %+v", pl)
	}
	if err := pl.Validate(); err != nil {
		t.Error(err)
	}
	s := lrSchedule(&l.Algorithm, l.Schedule.Steps)
	if got, want := s.LR(0), l.Algorithm.LR/10; math.Abs(got-want) > 1e-12 {
		t.Errorf("LR(0) = %v, want lr/warmup = %v", got, want)
	}
	if got := s.LR(l.Schedule.Steps); got != 1e-5 {
		t.Errorf("LR(last) = %v, want min_lr", got)
	}
	constant := lrSchedule(&recipes.Algorithm{LR: 1e-3, Schedule: "constant", MinLR: 0}, 100)
	if constant.LR(50) != 1e-3 || constant.LR(100) != 1e-3 {
		t.Errorf("constant schedule: %v %v", constant.LR(50), constant.LR(100))
	}
	g, err := task.New(taskConfig(l.Data.Task))
	if err != nil {
		t.Fatal(err)
	}
	p, err := g.Problem(task.Train, 0)
	if err != nil || p.Kind != task.Arithmetic || p.Level != 1 {
		t.Errorf("task problem = %+v, %v", p, err)
	}
}

// The names recipes repeats (it imports none of these packages) are the
// packages' own.
func TestRecipeNamesAgree(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"TaskKinds", recipes.TaskKinds, task.Kinds},
		{"HiddenTaskKinds", recipes.HiddenTaskKinds, task.HiddenKinds},
		{"MaxTaskLevel", recipes.MaxTaskLevel, task.MaxLevel},
		{"MinBuiltinVocab", recipes.MinBuiltinVocab, tokenizer.BuiltinMinVocabSize},
		{"Aggregations", recipes.Aggregations, []string{string(rl.TokenMean), string(rl.SeqMeanTokenMean), string(rl.SeqMeanTokenSumNorm)}},
		{"KLEstimators", recipes.KLEstimators, []string{string(rl.K1), string(rl.K2), string(rl.K3)}},
		{"DefaultTemplates", episodeTemplates(recipes.DefaultTemplates()), episode.DefaultTemplates()},
		{"Algorithms", slices.Sorted(slices.Values(recipes.Algorithms)), slices.Sorted(maps.Keys(learnerAlgorithms))},
		{"Architectures", slices.Sorted(slices.Values(recipes.Architectures)), slices.Sorted(maps.Keys(architectureNames))},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("recipes.%s = %v, its package's %v", c.name, c.got, c.want)
		}
	}
	for _, k := range recipes.KLEstimators {
		if _, err := rl.ParseKLEstimator(k); err != nil {
			t.Error(err)
		}
	}
	for _, a := range recipes.Aggregations {
		if _, err := rl.ParseAggregation(a); err != nil {
			t.Error(err)
		}
	}
	// Empty recipe templates take the defaults, as empty episode ones do.
	if got, want := episodeTemplates(recipes.Templates{}.WithDefaults()), (episode.Templates{}).WithDefaults(); got != want {
		t.Errorf("recipes' WithDefaults %+v, episode's %+v", got, want)
	}
}

// The built-in recipes' data files are written under cluster.Home, and
// the dataset loader reads them with the recipe's columns.
func TestBuiltinDataUnderHome(t *testing.T) {
	t.Setenv("RLNODE_HOME", t.TempDir())
	for _, name := range recipes.BuiltinNames() {
		l, err := recipes.Load(name, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ds := l.Data.Dataset
		if ds == nil {
			continue
		}
		if !strings.HasPrefix(ds.Train, filepath.Join(cluster.Home(), "recipes")+string(filepath.Separator)) {
			t.Errorf("%s: data.dataset.train %s is not under %s", name, ds.Train, cluster.Home())
		}
		ex, err := data.Load(ds.Train, columnsMapping(ds.Columns))
		if err != nil {
			t.Fatalf("%s: dataset: %v", name, err)
		}
		if len(ex) < l.Eval.HeldOut*2 {
			t.Errorf("%s: dataset has %d examples; eval.held_out %d leaves too few to train", name, len(ex), l.Eval.HeldOut)
		}
	}
}
