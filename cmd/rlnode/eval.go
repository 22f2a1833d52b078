package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/template"

	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/recipes/driver"
	"github.com/rlnode/rlnode/rollout/engine"
	"github.com/rlnode/rlnode/rollout/native"
	"github.com/rlnode/rlnode/rollout/task"
	"github.com/rlnode/rlnode/rollout/verify"
)

// `rlnode eval` is greedy accuracy of a checkpoint on a recipe's held-out
// problems with the native engine, single-turn episodes only. Not done
// yet: mlmt and score (per-turn accuracy, Δ, flip rates), datasets, vllm.

func init() { commands["eval"] = evalCommand }

const evalUsage = `usage: rlnode eval --model DIR --recipe RECIPE [--set KEY.PATH=VALUE]... [--out FILE]

Greedy accuracy of the model in DIR (a checkpoint: config.json, safetensors,
tokenizer.json, e.g. RUN/checkpoints/step-N) on the recipe's held-out
problems (eval.held_out of them), printed and written as JSON to FILE.

`

// evalResult is what `rlnode eval` prints and writes.
type evalResult struct {
	Model    string  `json:"model"`
	Recipe   string  `json:"recipe"`
	Problems int     `json:"problems"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
}

func evalCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelDir := fs.String("model", "", "checkpoint directory to evaluate")
	recipe := fs.String("recipe", "", "recipe (a built-in name or a file) whose held-out problems, templates and limits are used")
	out := fs.String("out", "", "write the result as JSON to this file")
	var sets repeated
	fs.Var(&sets, "set", "override KEY.PATH=VALUE (repeatable; VALUE is YAML)")
	fs.Usage = func() {
		fmt.Fprint(stderr, evalUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(pos) > 0 || *modelDir == "" || *recipe == "" {
		fmt.Fprintf(stderr, "rlnode eval: want --model DIR and --recipe RECIPE\n\n%s", evalUsage)
		return 2
	}
	l, err := recipes.Load(*recipe, sets)
	if err != nil {
		printRecipeError(stderr, "eval", *recipe, err)
		return 1
	}
	if t := l.Episode.Type; t != "single" {
		fmt.Fprintf(stderr, "rlnode eval: %s: episode.type %s: evaluating %s episodes is not supported yet (single only)\n", *recipe, t, t)
		return 1
	}
	// The driver's mapping gives the templates, the task and the limits,
	// and refuses what single-turn native evaluation cannot do.
	cfg, err := l.DriverConfig(*modelDir)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode eval: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := evaluate(ctx, *modelDir, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode eval: %v\n", err)
		return 1
	}
	res.Recipe = l.Source
	js, _ := json.MarshalIndent(res, "", "  ") // plain values: cannot fail
	js = append(js, '\n')
	if *out != "" {
		if err := os.WriteFile(*out, js, 0o644); err != nil {
			fmt.Fprintf(stderr, "rlnode eval: %v\n", err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "accuracy %.3f (%d/%d held-out problems, greedy)\n", res.Accuracy, res.Correct, res.Problems)
	_, _ = stdout.Write(js)
	return 0
}

// evaluate runs the model in dir greedily on cfg's held-out problems —
// the same distinct problems, in the same order, as the driver's
// evaluation — and scores them with the math verifier.
func evaluate(ctx context.Context, dir string, cfg driver.Config) (evalResult, error) {
	gen, err := task.New(cfg.Task)
	if err != nil {
		return evalResult{}, fmt.Errorf("task: %w", err)
	}
	var probs []task.Problem
	seen := map[string]bool{}
	for i := 0; i < 50*cfg.EvalProblems && len(probs) < cfg.EvalProblems; i++ {
		p, err := gen.Problem(task.HeldOut, i)
		if err != nil {
			return evalResult{}, fmt.Errorf("held-out problem %d: %w", i, err)
		}
		if !seen[p.Question] {
			seen[p.Question] = true
			probs = append(probs, p)
		}
	}
	if len(probs) == 0 {
		return evalResult{}, fmt.Errorf("the task has no held-out problems")
	}
	tpl, err := template.New("prompt").Option("missingkey=error").Parse(cfg.PromptTemplate)
	if err != nil {
		return evalResult{}, fmt.Errorf("prompt template: %w", err)
	}
	eng, err := native.Load(dir, native.Config{MaxBatch: cfg.EngineBatch})
	if err != nil {
		return evalResult{}, fmt.Errorf("load model %s: %w", dir, err)
	}
	defer eng.Close()
	tok := eng.Tokenizer()
	reqs := make([]engine.Request, len(probs))
	for i, p := range probs {
		var sb strings.Builder
		if err := tpl.Execute(&sb, driver.TemplateData{Question: p.Question}); err != nil {
			return evalResult{}, fmt.Errorf("prompt template: %w", err)
		}
		reqs[i] = engine.Request{ID: "eval-" + p.ID, Prompt: tok.Encode(sb.String()), Params: engine.SamplingParams{N: 1, MaxTokens: cfg.MaxTokens}}
	}
	out, err := eng.Generate(ctx, reqs)
	if err != nil {
		return evalResult{}, fmt.Errorf("generate: %w", err)
	}
	res := evalResult{Model: dir, Problems: len(probs)}
	var sum float64
	for i, p := range probs {
		r := verify.Math{}.Verify(ctx, out[i].Samples[0].Text, verify.Reference{Answer: p.Answer}).Reward
		sum += r
		if r == 1 {
			res.Correct++
		}
	}
	res.Accuracy = sum / float64(res.Problems) // the driver's eval_accuracy
	return res, nil
}
