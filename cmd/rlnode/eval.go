package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/rlnode/rlnode/internal/outpath"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/train"
)

// `rlnode eval` is the accuracy of a checkpoint on a recipe's held-out
// problems with the native engine, greedy or sampled as the recipe's eval
// section says (eval.samples answers at eval.temperature: mean accuracy,
// pass@k, maj@n, with the seeds the run's evaluations use, so the figures
// equal the run's): single-turn, and for mlmt and score episodes per turn
// (first and final answer, Δ, flip rates; for mlmt with a feedback policy
// also the final turn with the static feedback text).
// An mlmt checkpoint keeps the solver in step-N/ and the feedback policy
// in step-N/feedback/ (train.FeedbackDir). A LoRA checkpoint (the frozen
// base plus a PEFT adapter) is evaluated with the adapter merged into the
// base (driver's evaluation loads it through native.Load): no
// merged copy is written into checkpoints. Recipes with a dataset are
// evaluated on its held-out rows with the recipe's verifier. Not done yet:
// evaluation on vLLM servers (eval always uses the native engine).

func init() { commands["eval"] = evalCommand }

const evalUsage = `usage: rlnode eval --model DIR [--recipe RECIPE] [--data FILE] [--group-by COL,...] [--set KEY.PATH=VALUE]... [--out FILE]

Accuracy of the model in DIR (a checkpoint: config.json, safetensors,
tokenizer.json, e.g. RUN/checkpoints/step-N; a LoRA run's checkpoint adds
adapter_model.safetensors and adapter_config.json, merged into the base; a
run folder: its newest complete checkpoint, and its recipe.yaml unless
--recipe is given; a hub id ORG/NAME from the local Hugging Face cache) on
the recipe's held-out problems (eval.held_out of them), printed and written
as JSON to FILE. Greedy by default; with eval.temperature > 0 each problem
gets eval.samples seeded answers (the seeds of the run's evaluations):
accuracy is then the mean over all answers (mean@n), and pass@k (for each k
of eval.pass_k; default 1 and n) and maj@n (majority vote over the final
answers; math and gsm8k verifiers) are added, e.g.
--set eval.samples=8 --set eval.temperature=1 --set eval.pass_k=[1,4,8].

--data FILE evaluates on the first eval.held_out rows of FILE (.jsonl,
.parquet or .csv) instead of the recipe's problems, no training file
needed: its columns are the recipe's data.dataset.columns (default prompt
and answer; --set data.dataset.columns.prompt=problem to map others).

--group-by subject,level (eval.group_by) also reports accuracy per value
of those columns of the evaluation rows (MATH-500's subject and level), and
with sampling pass@k per value: a table on stderr, "groups" in the JSON.

For mlmt and score recipes the episode is played greedily: accuracy of the
first and of the final answer (mlmt turn 3, score turn 2), their difference
(delta) and the fractions of problems that went incorrect→correct and
correct→incorrect; mlmt with a feedback policy loads it from DIR/feedback
and also reports the final turn with the static feedback text instead.

`

// evalResult is what `rlnode eval` prints and writes.
type evalResult struct {
	Model    string  `json:"model"`
	Recipe   string  `json:"recipe"`
	Problems int     `json:"problems"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"` // of the final answer; sampled: mean@n
	// Sampled is a sampled evaluation's samples, temperature, pass_at_K
	// and maj_at_N (of the final answer); absent when greedy.
	Sampled *train.SampledEval `json:"sampled,omitempty"`
	// Turns are the per-turn figures of mlmt and score episodes.
	Turns *train.TurnEval `json:"turns,omitempty"`
	// Groups are the figures per value of each eval.group_by column.
	Groups []train.GroupEval `json:"groups,omitempty"`
}

func evalCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelDir := fs.String("model", "", "checkpoint directory, run folder or hub id (ORG/NAME, from the local Hugging Face cache) to evaluate")
	recipe := fs.String("recipe", "", "recipe (a built-in name or a file) whose held-out problems, templates and limits are used (default with a run folder: its recipe.yaml)")
	out := fs.String("out", "", "write the result as JSON to this file")
	dataFile := fs.String("data", "", "evaluate on the first eval.held_out rows of this .jsonl, .parquet or .csv file instead of the recipe's problems")
	groupBy := fs.String("group-by", "", "comma-separated columns of the evaluation rows to break accuracy down by (eval.group_by), e.g. subject,level")
	var sets repeated
	fs.Var(&sets, "set", "override KEY.PATH=VALUE (repeatable; VALUE is YAML)")
	fs.Usage = func() {
		fmt.Fprint(stderr, evalUsage)
		fs.PrintDefaults()
	}
	pos, code, ok := parseCommand(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 || *modelDir == "" {
		fmt.Fprintf(stderr, "rlnode eval: want --model DIR (and --recipe RECIPE unless DIR is a run folder)\n\n%s", evalUsage)
		return 2
	}
	if *out != "" {
		// Before the evaluation, which takes a while; a symbolic link is
		// written through.
		dest, err := outpath.File(*out)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode eval: --out: %v\n", err)
			return 1
		}
		*out = dest
	}
	if err := evalTarget(modelDir, recipe, stderr); err != nil {
		fmt.Fprintf(stderr, "rlnode eval: %v\n", err)
		return 2
	}
	if *dataFile != "" {
		// Before the user's --set, so that those map the file's columns.
		sets = append(dataSets(*dataFile), sets...)
	}
	if *groupBy != "" {
		sets = append(sets, "eval.group_by="+groupBySet(*groupBy))
	}
	l, err := loadCheckedHere(*recipe, sets)
	if err != nil {
		printRecipeError(stderr, "eval", *recipe, err)
		return 1
	}
	if err := verifyModel("--model", *modelDir); err != nil {
		fmt.Fprintf(stderr, "rlnode eval: %v\n", err)
		return 1
	}
	// The driver's mapping gives the templates, the task and the limits,
	// and refuses what native evaluation cannot do.
	cfg, err := train.FromRecipe(l, *modelDir)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode eval: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var res evalResult
	if cfg.Episode == train.EpisodeMLMT || cfg.Episode == train.EpisodeSCoRe {
		res, err = evaluateTurns(ctx, *modelDir, cfg)
	} else {
		res, err = evaluate(ctx, *modelDir, cfg)
	}
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
	if te := res.Turns; te != nil {
		final := "turn 3"
		if te.Episode == train.EpisodeSCoRe {
			final = "turn 2"
		}
		fmt.Fprintf(stderr, "turn 1 accuracy %.3f, %s accuracy %.3f (delta %+.3f; incorrect→correct %.3f, correct→incorrect %.3f) on %d held-out problems, %s\n",
			te.Turn1, final, te.Final, te.Delta, te.IncorrectToCorrect, te.CorrectToIncorrect, te.Problems, howSampled(te.Sampled))
		if te.Sampled != nil {
			fmt.Fprintf(stderr, "(turn accuracies and flip rates are over all %d episodes; pass@k and maj@n of the final answer)\n", te.Problems*te.Sampled.Samples)
		}
		if te.FinalStatic >= 0 {
			fmt.Fprintf(stderr, "%s accuracy with the static feedback text instead of the feedback policy's: %.3f\n", final, te.FinalStatic)
		}
	}
	if len(res.Groups) > 0 {
		printGroups(stderr, res.Groups)
	}
	if s := res.Sampled; s != nil {
		fmt.Fprintf(stderr, "accuracy %.3f (mean@%d: %d/%d answers correct on %d held-out problems, %s)\n", res.Accuracy, s.Samples, res.Correct, s.Samples*res.Problems, res.Problems, howSampled(s))
		fmt.Fprintf(stderr, "%s\n", sampledFigures(s))
	} else {
		fmt.Fprintf(stderr, "accuracy %.3f (%d/%d held-out problems, greedy)\n", res.Accuracy, res.Correct, res.Problems)
	}
	_, _ = stdout.Write(js)
	return 0
}

// dataSets are the overrides that make a recipe evaluate on file alone:
// the file is the dataset's eval file, and its train file too (read, never
// trained on), in place of a task.
func dataSets(file string) []string {
	return []string{"data.task=null", "data.dataset.train=" + file, "data.dataset.eval=" + file}
}

// evalTarget resolves --model: a hub id to its cached snapshot, a run
// folder to its newest complete checkpoint that passes its checksums
// (and --recipe, when not given, to the run's recipe.yaml), telling
// stderr which newer ones it passed over and why.
func evalTarget(model, recipe *string, stderr io.Writer) error {
	dir, err := recipes.ModelDir(*model)
	if err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	st, statErr := os.Stat(dir)
	_, cfgErr := os.Stat(filepath.Join(dir, "config.json"))
	_, runErr := os.Stat(filepath.Join(dir, "checkpoints"))
	if statErr == nil && st.IsDir() && cfgErr != nil && runErr == nil {
		ck, skipped, _, err := train.NewestIntact(dir)
		for _, s := range skipped {
			fmt.Fprintf(stderr, "rlnode eval: --model %s: skipping %v\n", *model, s)
		}
		if err != nil {
			return fmt.Errorf("--model %s (a run folder): %w", dir, err)
		}
		if len(skipped) > 0 {
			fmt.Fprintf(stderr, "rlnode eval: --model %s: evaluating %s\n", *model, ck)
		}
		if *recipe == "" {
			*recipe = filepath.Join(dir, recipes.ResolvedFile)
		}
		*model = ck
		return nil
	}
	*model = dir
	if *recipe != "" {
		return nil // the model is checked after the recipe (verifyModel)
	}
	switch {
	case errors.Is(statErr, os.ErrNotExist):
		return fmt.Errorf("--model %s: no such folder (want a run folder, a checkpoint folder or a hub model id ORG/NAME of the local Hugging Face cache)", dir)
	case statErr != nil:
		return fmt.Errorf("--model: %w", statErr)
	case !st.IsDir():
		return fmt.Errorf("--model %s: not a folder (want a run folder, a checkpoint folder or a hub model id)", dir)
	case cfgErr != nil:
		return fmt.Errorf("--model %s: neither a run folder (no checkpoints/) nor a checkpoint (no config.json)", dir)
	}
	return fmt.Errorf("--model %s is a checkpoint, not a run folder: give --recipe RECIPE", dir)
}

// evaluate runs the model in dir greedily on cfg's held-out problems (the
// task's, or the dataset's eval file or held-out rows) and scores them
// with cfg's verifier: the driver's own evaluation, so the figure equals
// the run's eval_accuracy.
func evaluate(ctx context.Context, dir string, cfg train.Config) (evalResult, error) {
	se, err := train.EvaluateSingleCheckpoint(ctx, cfg, dir)
	if err != nil {
		return evalResult{}, err
	}
	return evalResult{Model: dir, Problems: se.Problems, Correct: se.Correct, Accuracy: se.Accuracy, Sampled: se.Sampled, Groups: se.Groups}, nil
}

// evaluateTurns plays the recipe's mlmt or score episode greedily on its
// held-out problems with the checkpoint in dir (the feedback policy from
// dir/feedback), the evaluation the driver runs at its eval steps.
func evaluateTurns(ctx context.Context, dir string, cfg train.Config) (evalResult, error) {
	te, err := train.EvaluateCheckpoint(ctx, cfg, dir)
	if err != nil {
		return evalResult{}, err
	}
	answers := te.Problems
	if te.Sampled != nil {
		answers *= te.Sampled.Samples
	}
	return evalResult{Model: dir, Problems: te.Problems, Correct: int(math.Round(te.Final * float64(answers))), Accuracy: te.Final, Sampled: te.Sampled, Turns: &te, Groups: te.Groups}, nil
}

// groupBySet is --group-by's list as a YAML flow sequence, each name
// quoted so that a column named like a number or "null" stays a name.
func groupBySet(list string) string {
	var cols []string
	for c := range strings.SplitSeq(list, ",") {
		q, _ := json.Marshal(strings.TrimSpace(c)) // a string: cannot fail
		cols = append(cols, string(q))
	}
	return "[" + strings.Join(cols, ", ") + "]"
}

// printGroups writes the per-group figures as a table: one row per value
// of each column, the first answer's accuracy for multi-turn episodes
// and pass@k when sampled.
func printGroups(w io.Writer, groups []train.GroupEval) {
	var ks []int
	turn1 := false
	for _, g := range groups {
		for k := range g.PassAt {
			if !slices.Contains(ks, k) {
				ks = append(ks, k)
			}
		}
		turn1 = turn1 || g.Turn1 != nil
	}
	slices.Sort(ks)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	head := "COLUMN\tVALUE\tPROBLEMS\tACCURACY"
	if turn1 {
		head += "\tTURN 1"
	}
	for _, k := range ks {
		head += fmt.Sprintf("\tPASS@%d", k)
	}
	fmt.Fprintln(tw, head)
	for _, g := range groups {
		row := fmt.Sprintf("%s\t%s\t%d\t%.3f", g.Column, g.Value, g.Problems, g.Accuracy)
		if turn1 {
			row += "\t" + optional(g.Turn1)
		}
		for _, k := range ks {
			cell := "-"
			if v, ok := g.PassAt[k]; ok {
				cell = fmt.Sprintf("%.3f", v)
			}
			row += "\t" + cell
		}
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()
}

// optional is a figure with three decimals, "-" when absent.
func optional(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *x)
}

// howSampled says how an evaluation sampled.
func howSampled(s *train.SampledEval) string {
	if s == nil {
		return "greedy"
	}
	return fmt.Sprintf("%d samples each at temperature %g", s.Samples, s.Temperature)
}

// sampledFigures is a sampled evaluation's pass@k and maj@n on one line.
func sampledFigures(s *train.SampledEval) string {
	ks := slices.Sorted(maps.Keys(s.PassAt))
	parts := make([]string, 0, len(ks)+1)
	for _, k := range ks {
		parts = append(parts, fmt.Sprintf("pass@%d %.3f", k, s.PassAt[k]))
	}
	if s.Majority != nil {
		parts = append(parts, fmt.Sprintf("maj@%d %.3f", s.Samples, *s.Majority))
	}
	return strings.Join(parts, ", ")
}

// verifyModel checks a checkpoint given as --model against its checksum
// manifest (train.VerifyCheckpoint); a model directory without one (not
// written by rlnode run, or by an older one) passes.
// A run folder is refused naming its newest checkpoint (rlnode eval
// resolves one itself, in evalTarget); flag names the argument.
// A path that is no folder, or a folder without config.json, is refused
// naming the flag: it read "read config: stat DIR/config.json: ...".
func verifyModel(flag, dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && !recipes.IsHubID(dir):
		return fmt.Errorf("%s %s: no such folder (give a checkpoint folder, such as a run's checkpoints/step-N, or a hub id ORG/NAME of the local Hugging Face cache)", flag, dir)
	case err == nil && !st.IsDir():
		return fmt.Errorf("%s %s is a file, not a checkpoint folder", flag, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, os.ErrNotExist) && st != nil {
		if cks, _ := train.Checkpoints(dir); len(cks) > 0 {
			return fmt.Errorf("%s %s is a run folder, not a checkpoint: give one of its checkpoints, e.g. %s", flag, dir, cks[len(cks)-1])
		}
		return fmt.Errorf("%s %s holds no config.json: not a checkpoint folder", flag, dir)
	}
	if err := train.VerifyCheckpoint(dir); err != nil && !errors.Is(err, train.ErrNoManifest) {
		return err
	}
	return nil
}
