package ctxopt

import (
	"fmt"

	"github.com/rlnode/rlnode/rollout/task"
)

// Questions draws perType problems of every kind × level from split of the
// built-in task generator; a question's Type is "kind/level".
func Questions(seed uint64, split task.Split, kinds []string, levels []int, perType int) ([]Question, error) {
	var out []Question
	for _, k := range kinds {
		for _, l := range levels {
			g, err := task.New(task.Config{Seed: seed, Kinds: []string{k}, Level: l})
			if err != nil {
				return nil, fmt.Errorf("questions: %w", err)
			}
			ps, err := g.Generate(split, perType)
			if err != nil {
				return nil, fmt.Errorf("questions: %w", err)
			}
			for _, p := range ps {
				out = append(out, Question{ID: p.ID, Text: p.Question, Answer: p.Answer, Type: fmt.Sprintf("%s/%d", k, l)})
			}
		}
	}
	// Interleave types so that any prefix covers them all.
	n := len(kinds) * len(levels)
	mixed := make([]Question, 0, len(out))
	for i := range perType {
		for t := range n {
			mixed = append(mixed, out[t*perType+i])
		}
	}
	return mixed, nil
}
