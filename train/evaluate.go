package train

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/rollout/native"
)

// SingleEval is a single-turn evaluation on held-out problems.
type SingleEval struct {
	// Accuracy is the mean reward over Problems held-out problems (the
	// driver's eval_accuracy; sampled: over all their answers, mean@n);
	// Correct counts the answers with reward 1.
	Accuracy          float64
	Correct, Problems int
	// Sampled is a sampled evaluation's pass@k and maj@n (nil: greedy).
	Sampled *SampledEval
}

// EvaluateSingleCheckpoint evaluates the checkpoint in dir as the driver
// evaluates a single-turn run of cfg: greedy or sampled per
// cfg.EvalSampling (the same seeds), on the same held-out problems (the task's, or the dataset's eval file or held-out rows),
// scored by cfg's verifier (math, gsm8k, or code in the sandbox).
func EvaluateSingleCheckpoint(ctx context.Context, cfg Config, dir string) (SingleEval, error) {
	if cfg.multiTurn() {
		return SingleEval{}, fmt.Errorf("driver: evaluate %s: episode %q is multi-turn (EvaluateCheckpoint)", dir, cfg.Episode)
	}
	cfg.Out = dir // validate wants a run directory; nothing is written
	tpl, err := cfg.validate()
	if err != nil {
		return SingleEval{}, err
	}
	if cfg.EvalProblems <= 0 {
		return SingleEval{}, fmt.Errorf("driver: evaluate %s: eval_problems %d: want > 0", dir, cfg.EvalProblems)
	}
	cfg.EvalEvery = max(cfg.EvalEvery, 1) // the source holds out EvalProblems
	src, err := newSource(cfg)
	if err != nil {
		return SingleEval{}, err
	}
	probs, err := src.heldOut(cfg.EvalProblems)
	if err != nil {
		return SingleEval{}, fmt.Errorf("driver: %w", err)
	}
	v, err := newVerifier(cfg)
	if err != nil {
		return SingleEval{}, err
	}
	py, err := newPython(cfg)
	if err != nil {
		return SingleEval{}, err
	}
	batch := cfg.EngineBatch
	if batch == 0 {
		batch = 256
	}
	eng, err := native.Load(dir, native.Config{MaxBatch: batch})
	if err != nil {
		return SingleEval{}, fmt.Errorf("driver: load model %s: %w", dir, err)
	}
	defer eng.Close()
	r := &run{cfg: cfg, tpl: tpl, src: src, verifier: v, python: py, eval: probs,
		solver: &policy{id: "solver", eng: &policyEngine{Engine: eng, tok: eng.Tokenizer()}, tok: eng.Tokenizer()}}
	out, err := r.evaluate(ctx)
	if err != nil {
		return SingleEval{}, fmt.Errorf("driver: evaluate %s: %w", dir, err)
	}
	return out, nil
}
