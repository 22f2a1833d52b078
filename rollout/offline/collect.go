package offline

import (
	"context"
	"errors"
	"fmt"

	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode"
)

// CollectConfig is what Collect plays: Episodes episodes of Task, episode
// k with seed Seed+k, each with a fresh environment and policy, up to
// MaxSteps steps (0: 8, the agent episode's default). Env and Policy name
// them in the file.
type CollectConfig struct {
	Env       string
	NewEnv    func() env.Env
	Policy    string
	NewPolicy func() env.Policy
	Task      string
	Episodes  int
	Seed      int64
	MaxSteps  int
	System    string // the system message; empty: none
}

// Collect plays the episodes of c in order and returns them in the JSONL
// format. The chats read as the agent episode's: the observation as its
// user message (episode.ObservationMessage), the action in the action
// format as the assistant's. An environment error stops the collection
// with an error naming the episode.
func Collect(ctx context.Context, c CollectConfig) ([]Episode, error) {
	if c.NewEnv == nil || c.NewPolicy == nil {
		return nil, errors.New("collect: needs an environment and a policy")
	}
	if c.Episodes <= 0 {
		return nil, fmt.Errorf("collect: %d episodes: want at least 1", c.Episodes)
	}
	maxSteps := c.MaxSteps
	if maxSteps <= 0 {
		maxSteps = 8
	}
	out := make([]Episode, 0, c.Episodes)
	for k := range c.Episodes {
		ep, err := collectOne(ctx, c, c.Seed+int64(k), maxSteps)
		if err != nil {
			return nil, fmt.Errorf("collect: %s episode %d (task %q, seed %d): %w", c.Env, k, c.Task, c.Seed+int64(k), err)
		}
		out = append(out, ep)
	}
	return out, nil
}

func collectOne(ctx context.Context, c CollectConfig, seed int64, maxSteps int) (Episode, error) {
	e, pol := env.Checked(c.NewEnv()), c.NewPolicy()
	obs, err := e.Reset(ctx, seed, c.Task)
	if err != nil {
		return Episode{}, err
	}
	ep := Episode{Env: c.Env, Task: c.Task, Seed: seed, Policy: c.Policy}
	if c.System != "" {
		ep.Messages = append(ep.Messages, tokenizer.Message{Role: "system", Content: c.System})
	}
	ep.Messages = append(ep.Messages, tokenizer.Message{Role: "user", Content: episode.ObservationMessage(obs)})
	for range maxSteps {
		a := pol.Act(obs)
		said := a.Text()
		if a.Name == "" {
			said = "I do not know which action to take."
		}
		r, err := e.Step(ctx, a)
		if err != nil {
			return Episode{}, err
		}
		ep.Steps = append(ep.Steps, Step{Action: a.String(), Reward: r.Reward, Invalid: r.Invalid})
		ep.Total += r.Reward
		ep.Messages = append(ep.Messages,
			tokenizer.Message{Role: "assistant", Content: said},
			tokenizer.Message{Role: "user", Content: episode.ObservationMessage(r.Observation)})
		obs = r.Observation
		if r.Done {
			ep.Outcome = r.Info["outcome"]
			break
		}
	}
	return ep, nil
}
