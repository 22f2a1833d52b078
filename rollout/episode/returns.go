package episode

import (
	"fmt"
	"math"

	"github.com/rlnode/rlnode/rollout/data"
)

// Returns is the discounted return of each step of one episode from its
// rewards: G_t = r_t + γ·G_{t+1}, the last step's return its reward.
// gamma must be in [0, 1]; γ = 1 gives every step the rest of the
// episode's total.
func Returns(rewards []float64, gamma float64) ([]float64, error) {
	if math.IsNaN(gamma) || gamma < 0 || gamma > 1 {
		return nil, fmt.Errorf("returns: gamma %v outside [0, 1]", gamma)
	}
	out := make([]float64, len(rewards))
	var g float64
	for t := len(rewards) - 1; t >= 0; t-- {
		if math.IsNaN(rewards[t]) || math.IsInf(rewards[t], 0) {
			return nil, fmt.Errorf("returns: reward %v at step %d", rewards[t], t)
		}
		g = rewards[t] + gamma*g
		out[t] = g
	}
	return out, nil
}

// TurnReturns is Returns over the turns of episodes as a Runner returns
// them (each episode's turns together, in Turn order): per turn, its
// discounted return within its episode.
func TurnReturns(turns []data.Turn, gamma float64) ([]float64, error) {
	out := make([]float64, 0, len(turns))
	seen := map[string]bool{}
	for start := 0; start < len(turns); {
		id := turns[start].EpisodeID
		if seen[id] {
			return nil, fmt.Errorf("returns: episode %q: turns not together (again at row %d)", id, start)
		}
		seen[id] = true
		end := start
		var rewards []float64
		for ; end < len(turns) && turns[end].EpisodeID == id; end++ {
			if int(turns[end].Turn) != end-start {
				return nil, fmt.Errorf("returns: episode %q: row %d is turn %d, want %d", id, end, turns[end].Turn, end-start)
			}
			rewards = append(rewards, turns[end].Reward)
		}
		g, err := Returns(rewards, gamma)
		if err != nil {
			return nil, fmt.Errorf("episode %q: %w", id, err)
		}
		out = append(out, g...)
		start = end
	}
	return out, nil
}
