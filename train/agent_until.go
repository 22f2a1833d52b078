package train

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/task"
)

// WarmupUntil ends an agent run's SFT warm-up before WarmupSteps: every
// Every warm-up steps the policy plays Episodes training tasks greedily
// (training problems 0..Episodes−1: the environment's train split, never
// the held-out one), and the first step at which at least Completion of
// them end solved is the warm-up's last. RL then runs its Steps as
// always; without such a step the warm-up runs all WarmupSteps.
type WarmupUntil struct {
	Completion float64
	Every      int
	Episodes   int
}

func (u *WarmupUntil) check(c *Config) error {
	switch {
	case c.Episode != EpisodeAgent:
		return fmt.Errorf("train config: warmup_until: set, but the episode type is %q, not agent", c.Episode)
	case c.WarmupSteps <= 0:
		return fmt.Errorf("train config: warmup_until: set, but warmup_steps is %d", c.WarmupSteps)
	case !(u.Completion > 0 && u.Completion <= 1):
		return fmt.Errorf("train config: warmup_until: completion %v: want (0, 1]", u.Completion)
	case u.Every <= 0:
		return fmt.Errorf("train config: warmup_until: every %d: want > 0", u.Every)
	case u.Episodes <= 0:
		return fmt.Errorf("train config: warmup_until: episodes %d: want > 0", u.Episodes)
	}
	return nil
}

// probeEvery is the planner's Schedule.ProbeEvery: 0 without WarmupUntil.
func (c *Config) probeEvery() int {
	if c.WarmupUntil == nil {
		return 0
	}
	return c.WarmupUntil.Every
}

// probeTrain is the greedy completion rate of the pushed policy on the
// first n training problems.
func (r *run) probeTrain(ctx context.Context, n int) (float64, error) {
	probs := make([]task.Problem, n)
	for j := range probs {
		p, err := r.src.train(j)
		if err != nil {
			return 0, fmt.Errorf("warm-up probe at step %d: training problem %d: %w", r.step, j, err)
		}
		probs[j] = p
	}
	b := episode.Batch{Examples: examplesOf(r.src, probs), N: 1}
	run := r.player().runner(*episodePolicy(r.solver.id, r.solver.eng, engine.SamplingParams{MaxTokens: r.cfg.MaxTokens}), nil)
	turns, err := run.Run(ctx, b)
	if err == nil {
		err = failedTurns(turns)
	}
	if err != nil {
		return 0, fmt.Errorf("warm-up probe at step %d: %w", r.step, err)
	}
	return agentStats(turns, envActions(r.cfg.Agent.Env)).CompletionRate, nil
}

// probeWarmup carries out plan p's probe (after its push): it records the
// training tasks' completion rate in m and, when it reaches the
// threshold, makes p's step the warm-up's last — the planner's schedule
// follows r.cfg.WarmupSteps, and p evaluates and checkpoints as the
// warm-up's last step does.
func (r *run) probeWarmup(ctx context.Context, m *Metrics, p *StepPlan) error {
	u := r.cfg.WarmupUntil
	c, err := r.probeTrain(ctx, u.Episodes)
	if err != nil {
		return err
	}
	m.WarmupProbe = &c
	if c < u.Completion {
		return nil
	}
	r.log.Info("warm-up ends early: training tasks' completion reached the threshold", "step", p.Step, "completion", c, "threshold", u.Completion, "planned", r.cfg.WarmupSteps)
	r.cfg.WarmupSteps = p.Step
	end := p.Step
	r.warmupEnded = &end
	p.Eval = r.cfg.EvalEvery > 0
	p.PostWarmup = p.Eval
	p.Checkpoint = true
	return nil
}

// resumeWarmupEnd sets the warm-up's length from a checkpoint's driver
// state (read from path): the one a probe decided, or the configured one.
func (r *run) resumeWarmupEnd(ds driverState, path string) error {
	if ds.WarmupSteps == nil {
		r.cfg.WarmupSteps, r.warmupEnded = r.warmupPlanned, nil
		return nil
	}
	w := *ds.WarmupSteps
	switch {
	case r.cfg.WarmupUntil == nil:
		return fmt.Errorf("resume: %s: warm-up ended early at step %d, but the run has no warm-up probe (sft.until)", path, w)
	case w <= 0 || w > r.warmupPlanned || w > ds.Step:
		return fmt.Errorf("resume: %s: warm-up ended at step %d: want 1..%d and at most the checkpoint's step %d", path, w, r.warmupPlanned, ds.Step)
	}
	r.cfg.WarmupSteps, r.warmupEnded = w, &w
	return nil
}

// EndedWarmup is the warm-up length a probe decided (sft.until), read
// from checkpoint dir's driver state; false when none did or the state
// cannot be read (Run reports that).
func EndedWarmup(dir string) (int, bool) {
	js, err := os.ReadFile(filepath.Join(dir, DriverStateFile))
	if err != nil {
		return 0, false
	}
	var ds driverState
	if json.Unmarshal(js, &ds) != nil || ds.WarmupSteps == nil {
		return 0, false
	}
	return *ds.WarmupSteps, true
}
