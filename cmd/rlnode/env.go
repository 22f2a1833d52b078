package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rlnode/rlnode/internal/atomicfile"
	"github.com/rlnode/rlnode/internal/outpath"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/env"
	"github.com/rlnode/rlnode/rollout/episode"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/offline"
	"github.com/rlnode/rlnode/train"
)

func init() { commands["env"] = envCommand }

const envUsage = `usage:
  rlnode env rollout ENV --policy scripted|random|MODEL --out FILE
                [--episodes 100] [--task train] [--seed 1] [--max-steps 8]
                [--url URL] [--timeout 30s] [--temperature 1] [--max-tokens 64]
                [--recipe RECIPE]
      play a policy in environment ENV (equations, calculator, multiply,
      guess, or http with --url: a server speaking OpenEnv's reset/step
      protocol) and write the episodes (docs/environments-io.md). scripted
      is the built-in environment's teacher, random draws an offered
      action, MODEL (a checkpoint directory, a run folder: its newest
      complete checkpoint, or a hub id) plays through the native engine as
      a run's agent episode does, sampling at --temperature. FILE is JSONL
      (.jsonl: chat messages with each step's action and reward) or, for
      MODEL, also an Arrow trajectory file (.arrow: token ids and log
      probs). Episode k plays seed SEED+k.

      MODEL plays on the prompts of an agent recipe when there is one: the
      run's recipe.yaml when MODEL is a run folder or one of its
      checkpoints, or --recipe RECIPE (a built-in name or a file), which
      overrides it. Each step's prompt is then the recipe's
      episode.agent.template, and --max-steps, --max-tokens and
      --temperature default to its episode.agent.max_steps and
      algorithm.max_tokens and temperature; ENV may be left out to play
      the recipe's environment (an http one at its url). Without a recipe
      the prompts are chat messages.
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
	policy := fs.String("policy", "", "scripted, random or a model (checkpoint directory or hub id)")
	out := fs.String("out", "", "file to write (.jsonl; .arrow for a model)")
	episodes := fs.Int("episodes", 100, "episodes to play")
	task := fs.String("task", env.TaskTrain, "the environment's task (equations: train, heldout or an equation like \"3x + 5 = 14\")")
	seed := fs.Int64("seed", 1, "seed of the first episode (and of random play)")
	maxSteps := fs.Int("max-steps", 8, "steps per episode at most")
	url := fs.String("url", "", "http: the environment server's URL")
	timeout := fs.Duration("timeout", 30*time.Second, "http: per request")
	temperature := fs.Float64("temperature", 1, "MODEL: sampling temperature (0: greedy)")
	maxTokens := fs.Int("max-tokens", 64, "MODEL: tokens per turn at most")
	recipeFlag := fs.String("recipe", "", "MODEL: the agent recipe (a built-in name or a file) whose step template, max_steps and sampling it plays with (default: the run's recipe.yaml when MODEL is a run folder or one of its checkpoints)")
	err := parseFlags(fs, args, "policy", "out")
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	model := *policy != env.PolicyScripted && *policy != env.PolicyRandom
	if err == nil && !model && *recipeFlag != "" {
		err = usageError{fmt.Errorf("--recipe: for a model's play (--policy MODEL), not --policy %s", *policy)}
	}
	var agentCfg *train.Config
	var recipeFile string
	if err == nil && model {
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		if agentCfg, recipeFile, err = rolloutRecipe(policy, *recipeFlag, stderr); err == nil && agentCfg != nil {
			ac := agentCfg.Agent
			if name == "" {
				name = ac.Env
				if ac.Env == train.EnvHTTP && !given["url"] {
					*url = ac.URL
				}
				if ac.Env == train.EnvHTTP && !given["timeout"] && ac.Timeout > 0 {
					*timeout = ac.Timeout
				}
			}
			if !given["max-steps"] {
				*maxSteps = ac.MaxSteps
			}
			if !given["max-tokens"] {
				*maxTokens = agentCfg.MaxTokens
			}
			if !given["temperature"] {
				*temperature = agentCfg.Temperature
			}
			fmt.Fprintf(stderr, "rlnode env rollout: prompts of %s (episode.agent.template of env %s); env %s, --max-steps %d, --max-tokens %d, --temperature %g\n",
				recipeFile, ac.Env, name, *maxSteps, *maxTokens, *temperature)
		}
	}
	if err == nil && name == "" {
		err = usageError{errors.New("ENV is required")}
	}
	if err == nil && name == train.EnvHTTP && *url == "" {
		err = usageError{errors.New("ENV http needs --url URL, the environment server's address")}
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
	// A symbolic link is written through, not replaced by the file.
	dest, err := outpath.File(*out)
	if err != nil {
		return fail(fmt.Errorf("--out: %w", err))
	}
	*out = dest
	mkEnv, err := env.Open(env.Spec{Name: name, URL: *url, Timeout: *timeout})
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *policy != env.PolicyScripted && *policy != env.PolicyRandom {
		if !strings.HasSuffix(*out, ".arrow") && !strings.HasSuffix(*out, ".jsonl") {
			return fail(fmt.Errorf("--out %s: a model's episodes go to a JSONL file (.jsonl) or an Arrow trajectory file (.arrow)", *out))
		}
		if !(*temperature >= 0) || *maxTokens < 1 {
			return fail(fmt.Errorf("--temperature %v, --max-tokens %d: want ≥ 0 and ≥ 1", *temperature, *maxTokens))
		}
		if agentCfg != nil && strings.HasSuffix(*out, ".jsonl") {
			fmt.Fprintf(stderr, "rlnode env rollout: %s holds the episodes as chat messages, not the template's prompts the model was given (an .arrow file holds those)\n", *out)
		}
		return modelRollout(ctx, stdout, modelRolloutConfig{env: name, newEnv: mkEnv, model: *policy, task: *task, episodes: *episodes,
			seed: *seed, maxSteps: *maxSteps, temperature: *temperature, maxTokens: *maxTokens, out: *out, recipe: agentCfg, recipeFile: recipeFile}, fail)
	}
	if !strings.HasSuffix(*out, ".arrow") && !strings.HasSuffix(*out, ".jsonl") {
		// The name picks the format: any other was written as JSONL.
		return fail(fmt.Errorf("--out %s: %s episodes go to a JSONL file (.jsonl)", *out, *policy))
	}
	if strings.HasSuffix(*out, ".arrow") {
		// An Arrow trajectory file holds token ids, which only a model's
		// episodes have; JSONL under that name would be read as Arrow.
		return fail(fmt.Errorf("--out %s: %s episodes have no token ids for an Arrow trajectory file: write them as JSONL (.jsonl)", *out, *policy))
	}
	mkPol, err := env.NewPolicy(*policy, name, uint64(*seed))
	if err != nil {
		return fail(err)
	}
	eps, err := offline.Collect(ctx, offline.CollectConfig{Env: name, NewEnv: mkEnv, Policy: *policy, NewPolicy: mkPol,
		Task: *task, Episodes: *episodes, Seed: *seed, MaxSteps: *maxSteps})
	if err != nil {
		return fail(err)
	}
	if err := writeEpisodes(*out, eps); err != nil {
		return fail(err)
	}
	var total float64
	steps, done := 0, map[string]int{}
	for _, ep := range eps {
		total += ep.Total
		steps += len(ep.Steps)
		done[ep.Outcome]++
	}
	n := float64(len(eps))
	fmt.Fprintf(stdout, "%d episodes of %s (task %s, policy %s) written to %s: mean return %.3f, %.2f steps per episode, outcomes: %s\n",
		len(eps), name, *task, *policy, *out, total/n, float64(steps)/n, outcomeCounts(done))
	return 0
}

type modelRolloutConfig struct {
	env, model, task, out string
	newEnv                func() env.Env
	episodes, maxSteps    int
	seed                  int64
	temperature           float64
	maxTokens             int
	recipe                *train.Config // an agent recipe's: its step template; nil: chat prompts
	recipeFile            string        // where recipe came from
}

// rolloutRecipe resolves --policy and --recipe of a model's play: a run
// folder becomes its newest complete checkpoint, and the recipe is
// recipeFlag, else the run's recipe.yaml when the model is a run folder or
// a checkpoint in one (RUN/checkpoints/step-N), else none (nil). A
// recipe found in the run folder that is no agent recipe is passed over,
// saying so; one given by --recipe must be an agent recipe.
func rolloutRecipe(policy *string, recipeFlag string, stderr io.Writer) (*train.Config, string, error) {
	dir, err := recipes.ModelDir(*policy)
	if err != nil {
		return nil, "", fmt.Errorf("--policy: %w", err)
	}
	runRecipe := ""
	_, cfgErr := os.Stat(filepath.Join(dir, "config.json"))
	if st, err := os.Stat(filepath.Join(dir, "checkpoints")); err == nil && st.IsDir() && cfgErr != nil {
		ck, skipped, _, err := train.NewestIntact(dir)
		for _, s := range skipped {
			fmt.Fprintf(stderr, "rlnode env rollout: --policy %s: skipping %v\n", *policy, s)
		}
		if err != nil {
			return nil, "", fmt.Errorf("--policy %s (a run folder): %w", dir, err)
		}
		runRecipe, *policy = filepath.Join(dir, recipes.ResolvedFile), ck
	} else if parent := filepath.Dir(filepath.Clean(dir)); filepath.Base(parent) == "checkpoints" {
		if p := filepath.Join(filepath.Dir(parent), recipes.ResolvedFile); regularFile(p) {
			runRecipe = p
		}
	}
	file := recipeFlag
	if file == "" {
		file = runRecipe
	}
	if file == "" {
		return nil, "", nil
	}
	what := "--recipe " + file
	if recipeFlag == "" {
		what = "the run's recipe " + file
	}
	l, err := loadCheckedHere(file, nil)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	cfg, err := train.FromRecipe(l, "")
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", what, err)
	}
	if cfg.Episode != train.EpisodeAgent {
		if cfg.Episode == "" {
			cfg.Episode = train.EpisodeSingle
		}
		if recipeFlag != "" {
			return nil, "", fmt.Errorf("--recipe %s: episode.type %s, not agent: it plays no environment", file, cfg.Episode)
		}
		fmt.Fprintf(stderr, "rlnode env rollout: %s is a %s recipe, not an agent one: its prompts are passed over, and the model plays on chat prompts (its tokenizer's chat template)\n", file, cfg.Episode)
		return nil, "", nil
	}
	return &cfg, file, nil
}

func regularFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// modelRollout plays a checkpoint through the agent episode on the native
// engine (chat prompts) and writes its turns as an Arrow trajectory file,
// or its chats as JSONL episodes.
func modelRollout(ctx context.Context, stdout io.Writer, c modelRolloutConfig, fail func(error) int) int {
	if err := verifyModel("--policy", c.model); err != nil {
		if !strings.ContainsRune(c.model, '/') {
			// A word, not a path: most likely scripted or random mistyped.
			err = fmt.Errorf("%w; the built-in policies are %s and %s", err, env.PolicyScripted, env.PolicyRandom)
		}
		return fail(err)
	}
	dir, err := recipes.ModelDir(c.model)
	if err != nil {
		return fail(fmt.Errorf("--policy: %w", err))
	}
	e, err := native.LoadContext(ctx, dir, native.Config{})
	if err != nil {
		return fail(err)
	}
	defer e.Close()
	pol := episode.Policy{ID: "policy", Engine: e, Tokenizer: e.Tokenizer(), Model: dir, Params: engine.SamplingParams{Temperature: c.temperature, TopP: 1, MaxTokens: c.maxTokens}}
	ag := &episode.Agent{Policy: pol, NewEnv: c.newEnv}
	if c.recipe != nil {
		if c.recipe.TopP > 0 {
			pol.Params.TopP = c.recipe.TopP // as the run sampled
		}
		// The recipe's prompts (episode.agent.template) and limits, as
		// its run played them.
		if ag, err = train.AgentEpisode(*c.recipe, pol, c.newEnv); err != nil {
			return fail(fmt.Errorf("--recipe %s: %w", c.recipeFile, err))
		}
	}
	ag.MaxSteps, ag.Seed = c.maxSteps, c.seed
	var chats offline.Chats
	jsonl := strings.HasSuffix(c.out, ".jsonl")
	if jsonl {
		ag.Chats = chats.Record
	}
	examples := make([]data.Example, c.episodes)
	for k := range examples {
		examples[k] = data.Example{ID: fmt.Sprintf("%s-%d", c.env, k), Prompt: c.task}
	}
	seeds := func(stage, index int) *int64 {
		s := c.seed*1_000_003 + int64(stage)*65_537 + int64(index)
		return &s
	}
	turns, err := ag.Run(ctx, episode.Batch{Examples: examples, N: 1, Seeds: seeds})
	if err != nil {
		return fail(err)
	}
	// A turn the engine or the environment failed has no episode to
	// write: refuse the file, as the JSONL episodes do, rather than write
	// failed turns as if they were played.
	for _, t := range turns {
		if t.FinishReason == "error" {
			return fail(fmt.Errorf("episode %s turn %d failed: %s", t.EpisodeID, t.Turn, t.Note))
		}
	}
	if jsonl {
		eps, err := chats.Episodes(c.env, c.task, c.model, func(g int64) int64 { return c.seed + g }, turns)
		if err == nil {
			err = writeEpisodes(c.out, eps)
		}
		if err != nil {
			return fail(err)
		}
	} else if err := data.WriteTrajectoryFile(c.out, turns); err != nil {
		return fail(err)
	}
	var total float64
	for _, t := range turns {
		if t.Turn == 0 {
			total += t.FinalReward
		}
	}
	fmt.Fprintf(stdout, "%d episodes of %s (task %s, policy %s) written to %s: mean return %.3f, %.2f steps per episode, outcomes: %s\n",
		c.episodes, c.env, c.task, c.model, c.out, total/float64(c.episodes), float64(len(turns))/float64(c.episodes), outcomeCounts(turnOutcomes(turns)))
	return 0
}

// turnOutcomes counts how a model's episodes ended: the environment's
// outcome where it ended one, max_steps where the episode ran out of
// steps first (every episode of a policy that never finishes, which the
// summary called "none recorded").
func turnOutcomes(turns []data.Turn) map[string]int {
	outcomes := map[string]int{}
	for _, t := range turns {
		s := episode.AgentStepOf(t)
		switch {
		case s.Outcome != "":
			outcomes[s.Outcome]++
		case strings.Contains(t.Note, "stopped after "):
			outcomes["max_steps"]++
		}
	}
	return outcomes
}

// writeEpisodes writes eps as a JSONL trajectory file at path, replacing
// it atomically: a write that fails midway (an episode JSON cannot hold, a
// full disk, a crash) leaves the previous file, or none, never the
// episodes before the failure, which sft.trajectories would read as a
// whole collection.
func writeEpisodes(path string, eps []offline.Episode) error {
	return atomicfile.Write(path, 0o644, func(w io.Writer) error { return offline.WriteJSONL(w, eps) })
}

// outcomeCounts is how many episodes ended each way, by outcome name
// ("solved 18, step_limit 2"), or "none recorded".
func outcomeCounts(n map[string]int) string {
	names := make([]string, 0, len(n))
	for k := range n {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s %d", k, n[k])
	}
	if len(parts) == 0 {
		return "none recorded"
	}
	return strings.Join(parts, ", ")
}
