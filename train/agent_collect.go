package train

import (
	"context"
	"fmt"

	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/offline"
)

// WarmupCollect is what an agent run plays before it starts for its
// warm-up (recipe sft.collect): Teacher episodes of the built-in
// environment's scripted teacher and Random episodes of random play
// (env.NewPolicy), on its train split.
type WarmupCollect struct {
	Teacher, Random int
}

// collectSamples plays c's episodes in cfg's agent environment: teacher
// episode i with seed Seed+i, random episode j with seed
// Seed+Teacher+j (its draws seeded by Seed). Each step is a sample: the
// step's prompt rendered with tpl's agent template, the action in the
// action format and the end of text as the response, the episode's
// total reward as its reward. A sample longer than the policy's context
// is an error naming the episode and step.
func collectSamples(ctx context.Context, cfg Config, tpl *compiled, pc *policyContext, c WarmupCollect) ([]offline.Sample, error) {
	ac := cfg.Agent
	if ac == nil || ac.Env == EnvHTTP || tpl == nil || tpl.agent == nil {
		return nil, fmt.Errorf("collecting episodes needs an agent run on a built-in environment")
	}
	eos, err := endOfText(pc.tok)
	if err != nil {
		return nil, err
	}
	random, err := env.NewPolicy(env.PolicyRandom, ac.Env, uint64(cfg.Seed))
	if err != nil {
		return nil, err
	}
	var out []offline.Sample
	for i := range c.Teacher + c.Random {
		seed := int64(cfg.Seed) + int64(i)
		kind, pick := "teacher", env.Policy(nil)
		if i >= c.Teacher {
			kind, pick = "random", random()
		}
		steps, total, err := playEpisode(ctx, ac, tpl, seed, pick)
		if err != nil {
			return nil, fmt.Errorf("%s episode %d: %w", kind, i+1, err)
		}
		for k, s := range steps {
			prompt := toInt32(pc.tok.Encode(s.prompt))
			resp := append(toInt32(pc.tok.Encode(s.target)), int32(eos))
			if n := len(prompt) + len(resp); n > pc.positions {
				return nil, fmt.Errorf("%s episode %d (env %s, seed %d) step %d: %d tokens, more than the %d positions of %s", kind, i+1, ac.Env, seed, k, n, pc.positions, pc.field)
			}
			out = append(out, offline.Sample{Prompt: prompt, Response: resp, Mask: fullMask(len(resp)), Reward: total,
				Episode: fmt.Sprintf("%s/%d", kind, i+1), Step: k})
		}
	}
	return out, nil
}

// playEpisode plays one episode of ac's built-in environment on its
// train split with seed: by the environment's teacher when pick is nil,
// else by pick. It returns each step's prompt and action and the
// episode's total reward.
func playEpisode(ctx context.Context, ac *AgentConfig, tpl *compiled, seed int64, pick env.Policy) ([]teacherStep, float64, error) {
	e, err := env.New(ac.Env, ac.MaxSteps)
	if err != nil {
		return nil, 0, err
	}
	obs, err := e.Reset(ctx, seed, env.TaskTrain)
	if err != nil {
		return nil, 0, fmt.Errorf("env %s seed %d: %w", ac.Env, seed, err)
	}
	p := agentPrompter{tpl.agent}
	var steps []teacherStep
	var taken []string
	var total float64
	for k := range ac.MaxSteps {
		var a env.Action
		if pick == nil {
			if a, err = e.Teach(); err != nil {
				return nil, 0, fmt.Errorf("env %s seed %d: teacher at step %d: %w", ac.Env, seed, k, err)
			}
		} else {
			a = pick.Act(obs)
		}
		prompt, err := p.AgentPrompt(episode.AgentView{Step: k, Observation: obs, Taken: taken})
		if err != nil {
			return nil, 0, err
		}
		steps = append(steps, teacherStep{prompt, a.Text()})
		r, err := e.Step(ctx, a)
		if err != nil {
			return nil, 0, fmt.Errorf("env %s seed %d: step %d (%s): %w", ac.Env, seed, k, a, err)
		}
		total += r.Reward
		if r.Done {
			break
		}
		obs, taken = r.Observation, append(taken, a.String())
	}
	return steps, total, nil
}

func fullMask(n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = 1
	}
	return out
}
