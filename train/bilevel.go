package train

import (
	"fmt"

	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/rl"
	"github.com/rlnode/rlnode/rollout/data"
)

// biLevelAdvantages sets the advantages of sb, the solver's batch of
// turns (the rows solverTurns admits), to bi-level MLMT's R − V_L: R the
// episode's final reward, V_L the value the feedback learner gave the
// episode's feedback turn before its step (values, in the feedback
// batch's row order). Every token of a row gets its episode's advantage.
func biLevelAdvantages(sb *learner.Batch, turns []data.Turn, solver, feedback string, solverTurns func(data.Turn) bool, values []float64) error {
	fbRows, _, err := trajectoryRows(feedback, turns, nil)
	if err != nil {
		return err
	}
	if len(values) != len(fbRows) {
		return fmt.Errorf("bi-level: the feedback learner returned %d values for %d feedback turns", len(values), len(fbRows))
	}
	value := make(map[string]float64, len(fbRows))
	for k, i := range fbRows {
		value[turns[i].EpisodeID] = values[k]
	}
	rows, _, err := trajectoryRows(solver, turns, solverTurns)
	if err != nil {
		return err
	}
	if len(rows) != len(sb.Responses) {
		return fmt.Errorf("bi-level: %d solver turns for a batch of %d", len(rows), len(sb.Responses))
	}
	rewards, baselines := make([]float64, len(rows)), make([]float64, len(rows))
	for k, i := range rows {
		t := turns[i]
		v, ok := value[t.EpisodeID]
		if !ok {
			return fmt.Errorf("bi-level: episode %s has no feedback turn", t.EpisodeID)
		}
		rewards[k], baselines[k] = t.FinalReward, v
	}
	adv, err := rl.BaselineAdvantages(rewards, baselines)
	if err != nil {
		return fmt.Errorf("bi-level: %w", err)
	}
	sb.Advantages = make([][]float32, len(rows))
	for k := range rows {
		a := make([]float32, len(sb.Responses[k]))
		for j := range a {
			a[j] = float32(adv[k])
		}
		sb.Advantages[k] = a
	}
	return nil
}
