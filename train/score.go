package train

import (
	"fmt"
	"math"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/rollout/data"
)

// SCoRe's two stages (Kumar et al., 2024). Stage I, the first
// ScoreStage1Steps RL steps: the second attempt trains on its own reward
// r2 and the first is held to the KL reference by the KL alone, at
// ScoreStage1KLCoef (β2); stage II: both attempts train, the second on
// r2 + α(r2 − r1), with Loss.KLCoef (β1) on both. The episode shapes
// the second turn's reward as stage II wants; stage I takes the unshaped
// r2 back from its FinalReward.

// validateScoreStages checks the stage-I settings of a score run.
func (c *Config) validateScoreStages() error {
	switch s := c.ScoreStage1Steps; {
	case s == 0 && c.ScoreStage1KLCoef == 0:
		return nil
	case s < 0:
		return fmt.Errorf("train config: score_stage1_steps %d: want ≥ 0", s)
	case !(c.ScoreStage1KLCoef > 0) || math.IsInf(c.ScoreStage1KLCoef, 0):
		return fmt.Errorf("train config: score_stage1_kl_coef %v: want finite and > 0 with score_stage1_steps %d", c.ScoreStage1KLCoef, s)
	case !(c.Learner.Loss.KLCoef > 0):
		return fmt.Errorf("train config: score_stage1_steps %d: the learner's KL coefficient is %v; both stages need one > 0 (stage II's β1)", s, c.Learner.Loss.KLCoef)
	case c.Learner.KLInReward:
		return fmt.Errorf("train config: score_stage1_steps %d: the KL is in the reward (kl_in_reward); stage I weighs it in the loss", s)
	}
	return nil
}

// scoreStage1 turns sb, the solver's batch of a step's turns (its rows in
// trajectoryRows's order for solverTurns), into stage I's: first attempts
// get PG weight 0 and KL weight beta2/beta1, second attempts (turn second:
// 1 in a score episode, 2 — the refine turn — in RL-guided SCoRe's mlmt
// episode) their unshaped reward r2 and weights 1.
func scoreStage1(sb *learner.Batch, turns []data.Turn, solver string, solverTurns func(data.Turn) bool, second int32, beta1, beta2 float64) error {
	rows, _, err := trajectoryRows(solver, turns, solverTurns)
	if err != nil {
		return err
	}
	if len(rows) != len(sb.Responses) || len(sb.Rewards) != len(rows) {
		return fmt.Errorf("score stage I: %d solver turns for a batch of %d (%d rewards)", len(rows), len(sb.Responses), len(sb.Rewards))
	}
	if !(beta1 > 0) {
		return fmt.Errorf("score stage I: KL coefficient %v, want > 0", beta1)
	}
	sb.PGWeights, sb.KLWeights = make([]float64, len(rows)), make([]float64, len(rows))
	for k, i := range rows {
		switch t := turns[i]; t.Turn {
		case 0:
			sb.KLWeights[k] = beta2 / beta1
		case second:
			sb.PGWeights[k], sb.KLWeights[k] = 1, 1
			sb.Rewards[k] = t.FinalReward
		default:
			return fmt.Errorf("score stage I: episode %s has a solver turn %d (want the attempts 0 and %d)", t.EpisodeID, t.Turn, second)
		}
	}
	return nil
}
