package train

import (
	"encoding/json"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/optim"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
)

// The conversions below turn recipe sections into the library packages'
// own configurations; Check runs the packages' own checks on them.

var architectureNames = map[string]string{"qwen2": model.Qwen2, "llama": model.Llama}

// initConfigJSON is a model's init section as a Hugging Face config.json
// (float32).
func initConfigJSON(m *recipes.ModelInit) []byte {
	b, _ := json.MarshalIndent(map[string]any{ // plain values: cannot fail
		"architectures":           []string{architectureNames[m.Architecture]},
		"model_type":              m.Architecture,
		"vocab_size":              m.VocabSize,
		"hidden_size":             m.HiddenSize,
		"intermediate_size":       m.IntermediateSize,
		"num_hidden_layers":       m.Layers,
		"num_attention_heads":     m.Heads,
		"num_key_value_heads":     m.KVHeads,
		"max_position_embeddings": m.MaxPositions,
		"tie_word_embeddings":     m.TieWordEmbeddings,
		"rms_norm_eps":            1e-6,
		"rope_theta":              10000.0,
		"hidden_act":              "silu",
		"torch_dtype":             "float32",
	}, "", "  ")
	return b
}

// modelConfig is a model's init section parsed and checked by
// learner/model.
func modelConfig(m *recipes.ModelInit) (*model.Config, error) {
	return model.ParseConfig("init", initConfigJSON(m))
}

// loraConfig is a LoRA section for learner/model; seed seeds the
// adapters' initialization.
func loraConfig(l *recipes.LoRA, seed uint64) model.LoRAConfig {
	return model.LoRAConfig{Rank: l.Rank, Alpha: l.Alpha, Dropout: l.Dropout, TargetModules: append([]string{}, l.Targets...), Seed: seed}
}

// policyLossConfig is the algorithm's clipped surrogate for learner/rl.
func policyLossConfig(a *recipes.Algorithm) rl.PolicyLossConfig {
	est, _ := rl.ParseKLEstimator(a.KLEstimator)
	return rl.PolicyLossConfig{
		ClipLow: a.ClipLow, ClipHigh: a.ClipHigh, DualClip: a.DualClip, TISCap: a.TISCap,
		KLCoef: a.KLCoef, KL: est, EntropyCoef: a.EntropyCoef, Aggregation: rl.Aggregation(a.Aggregation),
	}
}

// lrSchedule is the learning rate over steps RL steps: a linear warm-up,
// then constant or a cosine decay to MinLR at the last step.
func lrSchedule(a *recipes.Algorithm, steps int) optim.WarmupCosine {
	s := optim.WarmupCosine{Base: a.LR, Min: a.LR, Warmup: a.Warmup, Total: steps}
	if a.Schedule == "cosine" {
		s.Min = a.MinLR
	}
	return s
}

// taskConfig is a task section for rollout/task.
func taskConfig(t *recipes.Task) task.Config {
	return task.Config{Seed: t.Seed, Kinds: append([]string{}, t.Kinds...), Level: t.Level, HeldOutPercent: t.HeldOutPercent}
}

// columnsMapping is a dataset's columns section for rollout/data.
func columnsMapping(c recipes.Columns) data.Mapping {
	return data.Mapping{Prompt: c.Prompt, Answer: c.Answer, Tests: c.Tests, Setup: c.Setup, ID: c.ID}
}

// evalColumns are an eval file's columns: each field of eval that is set,
// else the training file's.
func evalColumns(train, eval recipes.Columns) recipes.Columns {
	pick := func(e, t string) string {
		if e != "" {
			return e
		}
		return t
	}
	return recipes.Columns{Prompt: pick(eval.Prompt, train.Prompt), Answer: pick(eval.Answer, train.Answer),
		Tests: pick(eval.Tests, train.Tests), Setup: pick(eval.Setup, train.Setup), ID: pick(eval.ID, train.ID), Hint: pick(eval.Hint, train.Hint)}
}

// episodeTemplates are the recipe's templates for rollout/episode.
func episodeTemplates(t recipes.Templates) episode.Templates { return episode.Templates(t) }
