package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/offline"
)

func init() { commands["env"] = envCommand }

const envUsage = `usage:
  rlnode env rollout ENV --policy scripted|random --out FILE.jsonl
                [--episodes 100] [--task train] [--seed 1] [--max-steps 8]
                [--url URL] [--timeout 30s]
      play a policy without a model in environment ENV (equations, or http
      with --url: a server speaking OpenEnv's reset/step protocol) and
      write the episodes as JSONL trajectories (docs/environments-io.md):
      chat messages with each step's action and reward. scripted is the
      environment's teacher; random draws an offered action. Episode k
      plays seed SEED+k.
`

func envCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, envUsage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] != "rollout" {
		fmt.Fprintf(stderr, "rlnode env: unknown subcommand %q\n\n%s", args[0], envUsage)
		return 2
	}
	args = args[1:]
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("rlnode env rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, envUsage) }
	policy := fs.String("policy", "", "scripted or random")
	out := fs.String("out", "", "JSONL file to write")
	episodes := fs.Int("episodes", 100, "episodes to play")
	task := fs.String("task", env.TaskTrain, "the environment's task (equations: train, heldout or an equation like \"3x + 5 = 14\")")
	seed := fs.Int64("seed", 1, "seed of the first episode (and of random play)")
	maxSteps := fs.Int("max-steps", 8, "steps per episode at most")
	url := fs.String("url", "", "http: the environment server's URL")
	timeout := fs.Duration("timeout", 30*time.Second, "http: per request")
	err := parseFlags(fs, args, "policy", "out")
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil && name == "" {
		err = usageError{errors.New("ENV is required")}
	}
	if err == nil && (*episodes < 1 || *episodes > offline.MaxEpisodes) {
		err = usageError{fmt.Errorf("--episodes %d: want 1 to %d", *episodes, offline.MaxEpisodes)}
	}
	if err == nil && (*maxSteps < 1 || *maxSteps > offline.MaxMessages/2-1) {
		err = usageError{fmt.Errorf("--max-steps %d: want 1 to %d", *maxSteps, offline.MaxMessages/2-1)}
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "rlnode env rollout: %v\n\n%s", err, envUsage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "rlnode env rollout: %v\n", err)
		return 1
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "rlnode env rollout: %v\n", err)
		return 1
	}
	mkEnv, err := env.Open(env.Spec{Name: name, URL: *url, Timeout: *timeout})
	if err != nil {
		return fail(err)
	}
	mkPol, err := env.NewPolicy(*policy, name, uint64(*seed))
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	eps, err := offline.Collect(ctx, offline.CollectConfig{Env: name, NewEnv: mkEnv, Policy: *policy, NewPolicy: mkPol,
		Task: *task, Episodes: *episodes, Seed: *seed, MaxSteps: *maxSteps})
	if err != nil {
		return fail(err)
	}
	f, err := os.Create(*out)
	if err != nil {
		return fail(err)
	}
	err = offline.WriteJSONL(f, eps)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(fmt.Errorf("write %s: %w", *out, err))
	}
	var total float64
	steps, done := 0, map[string]int{}
	for _, ep := range eps {
		total += ep.Total
		steps += len(ep.Steps)
		done[ep.Outcome]++
	}
	n := float64(len(eps))
	fmt.Fprintf(stdout, "%d episodes of %s (task %s, policy %s) written to %s: mean return %.3f, %.2f steps per episode, outcomes %v\n",
		len(eps), name, *task, *policy, *out, total/n, float64(steps)/n, done)
	return 0
}
