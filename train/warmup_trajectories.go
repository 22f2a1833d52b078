package train

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/rollout/offline"
)

// WarmupTrajectories makes the SFT warm-up train on supplied trajectories
// (recipe sft.trajectories) instead of reference answers: Path is a JSONL
// file of agent episodes or a run's Arrow trajectory file (package
// rollout/offline), or Collect the episodes an agent run plays before it
// starts (agent_collect.go). Weighting is none (plain SFT), exp (each
// sample weighted by exp(return/Beta), normalized to mean 1 over the
// batch) or filter (only the samples whose return is at least
// Threshold). The first BaseSteps warm-up steps are plain SFT on every
// sample whatever the weighting (with learner LoRAWarmupAfter, of every
// weight: the base the adapters adapt).
type WarmupTrajectories struct {
	Path      string
	Collect   *WarmupCollect
	Weighting string
	Beta      float64
	Threshold float64
	BaseSteps int
}

func (w *WarmupTrajectories) check() error {
	switch {
	case w.Path == "" && w.Collect == nil:
		return fmt.Errorf("train config: warmup_trajectories: no file and nothing to collect")
	case w.Path != "" && w.Collect != nil:
		return fmt.Errorf("train config: warmup_trajectories: both a file (%s) and episodes to collect", w.Path)
	case w.Collect != nil && (w.Collect.Teacher < 0 || w.Collect.Random < 0 || w.Collect.Teacher+w.Collect.Random == 0):
		return fmt.Errorf("train config: warmup_trajectories: collect %d teacher and %d random episodes: want ≥ 0 each, > 0 in all", w.Collect.Teacher, w.Collect.Random)
	case w.BaseSteps < 0:
		return fmt.Errorf("train config: warmup_trajectories: base_steps %d: want ≥ 0", w.BaseSteps)
	case !slices.Contains([]string{"none", "exp", "filter"}, w.Weighting):
		return fmt.Errorf("train config: warmup_trajectories: weighting %q: want none, exp or filter", w.Weighting)
	case w.Weighting == "exp" && !(w.Beta > 0):
		return fmt.Errorf("train config: warmup_trajectories: beta %v: want > 0", w.Beta)
	}
	return nil
}

// trajectorySamples are a run's loaded warm-up trajectories.
type trajectorySamples struct {
	samples []offline.Sample
	perm    []int // the order of the current pass
	pass    int
	// base are the base steps' samples (every one, filter or not); nil
	// without base steps.
	base *trajectorySamples
}

// loadTrajectories reads the warm-up's samples (readTrajectories).
func (r *run) loadTrajectories(ctx context.Context, w *WarmupTrajectories) (*trajectorySamples, error) {
	t, err := readTrajectories(ctx, r.cfg, r.tpl, w)
	if err != nil {
		if w.Collect != nil {
			return nil, fmt.Errorf("sft.collect: %w", err)
		}
		return nil, fmt.Errorf("sft.trajectories: %w", err)
	}
	return t, nil
}

// readTrajectories reads w's samples with the solver's tokenizer (or
// collects them: agent runs' Collect, prompts from tpl), each within its
// context, and keeps those that filter weighting keeps.
func readTrajectories(ctx context.Context, cfg Config, tpl *compiled, w *WarmupTrajectories) (*trajectorySamples, error) {
	sl := cfg.Learner
	sl.Model, sl.ModelDir = cfg.Model, cfg.ModelDir
	pc, err := contextOf(sl, "models.policy")
	if err != nil {
		return nil, err
	}
	var s []offline.Sample
	if w.Collect != nil {
		s, err = collectSamples(ctx, cfg, tpl, pc, *w.Collect)
	} else {
		s, err = offline.ReadSamples(w.Path, pc.tok, pc.positions)
	}
	if err != nil {
		return nil, err
	}
	var base *trajectorySamples
	if w.BaseSteps > 0 && len(s) > 0 {
		base = &trajectorySamples{samples: s, pass: -1}
	}
	if w.Weighting == "filter" {
		n := len(s)
		if s = offline.Filter(s, w.Threshold); len(s) == 0 {
			return nil, fmt.Errorf("%s: none of its %d samples has a return of at least %v (sft.threshold)", w.Path, n, w.Threshold)
		}
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("%s holds no samples", w.Path)
	}
	return &trajectorySamples{samples: s, pass: -1, base: base}, nil
}

// at is the sample drawn j-th: passes over the samples in an order
// shuffled from seed and the pass, so that a step's batch follows from
// its number alone (a resumed run draws the same).
func (t *trajectorySamples) at(seed uint64, j int) offline.Sample {
	n := len(t.samples)
	if pass := j / n; pass != t.pass {
		t.perm = rand.New(rand.NewPCG(seed, 0x74726a00+uint64(pass))).Perm(n)
		t.pass = pass
	}
	return t.samples[t.perm[j%n]]
}

// warmupStepTrajectories is one warm-up step on supplied trajectories.
func (r *run) warmupStepTrajectories(ctx context.Context, traj *trajectorySamples) (Metrics, error) {
	cfg := r.cfg
	t0 := time.Now()
	var b learner.Batch
	var rewards []float64
	base := r.step < cfg.WarmupTrajectories.BaseSteps
	from := traj
	if base {
		from = traj.base
	}
	for i := range cfg.WarmupBatch {
		s := from.at(cfg.Seed, r.step*cfg.WarmupBatch+i)
		b.Prompts = append(b.Prompts, s.Prompt)
		b.Responses = append(b.Responses, s.Response)
		b.Masks = append(b.Masks, s.Mask)
		rewards = append(rewards, s.Reward)
	}
	if cfg.WarmupTrajectories.Weighting == "exp" && !base {
		w, err := rl.RewardWeights(rewards, cfg.WarmupTrajectories.Beta)
		if err != nil {
			return Metrics{}, fmt.Errorf("warm-up step %d: %w", r.step+1, err)
		}
		b.Weights = w
	}
	return r.warmupTrain(ctx, b, t0)
}
