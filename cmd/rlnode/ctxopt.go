package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/ctxopt"
	"github.com/rlnode/rlnode/internal/atomicfile"
)

func init() { commands["ctxopt"] = ctxoptCommand }

const ctxoptUsage = `usage:
  rlnode ctxopt list
      the built-in context-optimization recipes
  rlnode ctxopt validate NAME|FILE
      check a recipe: every problem as FILE:LINE: field: message
  rlnode ctxopt warmup NAME|FILE
      train the recipe's executor model (executor.lm) into the cache, or
      say where it is; train, eval and benchmark do it first when needed
  rlnode ctxopt train NAME|FILE --out DIR [--iterations N]
      learn a configuration policy; writes DIR/policy.json and
      DIR/metrics.jsonl, then scores it against a random policy on the
      held-out questions
  rlnode ctxopt eval NAME|FILE --policy FILE [--eval-per-type N]
      the learned policy against a random policy on held-out questions
  rlnode ctxopt benchmark NAME|FILE --policy FILE --out DIR [--eval-per-type N] [--also RECIPE=POLICY]...
      also every fixed configuration and the best fixed one per question
      type (picked on train questions); --also scores more learned policies
      beside it; writes DIR/benchmark.json and DIR/pareto.png

train and benchmark lock DIR (DIR/run.lock, as rlnode run): a second one on
it meanwhile is refused.
--seed N replaces the recipe's seed (questions, initial weights, sampling).
--address HOST:PORT [--key-file PATH] [--bind HOST:PORT] joins a running cluster
and runs the executions on one executor actor per other node (the same
outcomes as in process: every execution carries its seed).

The recipe schema: docs/ctxopt.md.
`

func ctxoptCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, ctxoptUsage)
		return 0
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("rlnode ctxopt "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "output directory")
	policy := fs.String("policy", "", "a policy.json written by rlnode ctxopt train")
	iters := fs.Int("iterations", 0, "override train.iterations")
	evalPer := fs.Int("eval-per-type", 0, "override data.eval_per_type")
	seed := fs.Uint64("seed", 0, "override seed")
	var also multiFlag
	address := fs.String("address", "", "join the cluster a member at HOST:PORT belongs to and run the executions on executor actors on its other nodes")
	keyFile := fs.String("key-file", filepath.Join(cluster.Home(), "cluster.key"), "gossip encryption key file (with --address)")
	bind := fs.String("bind", "0.0.0.0:0", "gossip address of this process's node (with --address)")
	detection := detectionFlag(fs)
	fs.Var(&also, "also", "benchmark: RECIPE=POLICY, another learned policy scored beside (repeatable)")
	pos, code, ok := parseCommand(fs, args)
	if !ok {
		return code
	}
	switch sub {
	case "list":
		for _, n := range ctxopt.Builtins() {
			r, err := ctxopt.LoadRecipe(n)
			if err != nil {
				fmt.Fprintf(stderr, "rlnode ctxopt list: %v\n", err)
				return 1
			}
			fmt.Fprintf(stdout, "%-22s %s\n", n, r.Description)
		}
		return 0
	case "validate", "warmup", "train", "eval", "benchmark":
	default:
		fmt.Fprintf(stderr, "rlnode ctxopt: unknown subcommand %q\n\n%s", sub, ctxoptUsage)
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "rlnode ctxopt %s: want one recipe (name or file)\n", sub)
		return 2
	}
	r, err := ctxopt.LoadRecipe(pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "rlnode ctxopt %s: %v\n", sub, err)
		return 1
	}
	if sub == "validate" {
		fmt.Fprintf(stdout, "%s: ok\n", pos[0])
		return 0
	}
	if sub == "warmup" {
		start := time.Now()
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		dir, err := r.WarmUp(ctx, stderr) // Ctrl-C or SIGTERM: stops, leaving no partial cache entry
		if err != nil {
			fmt.Fprintf(stderr, "rlnode ctxopt warmup: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "executor model: %s (%s)\n", dir, time.Since(start).Round(time.Second))
		return 0
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, o := range []struct {
		flag, field string
		v, most     int
		to          *int
	}{{"iterations", "train.iterations", *iters, ctxopt.MaxIterations, &r.Train.Iterations},
		{"eval-per-type", "data.eval_per_type", *evalPer, ctxopt.MaxPerType, &r.Data.EvalPerType}} {
		if !given[o.flag] {
			continue
		}
		if o.v < 1 || o.v > o.most {
			fmt.Fprintf(stderr, "rlnode ctxopt %s: --%s %d: want 1..%d (%s)\n", sub, o.flag, o.v, o.most, o.field)
			return 2
		}
		*o.to = o.v
	}
	if given["seed"] {
		r.Seed = *seed
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var node *cluster.Node
	if *address != "" {
		key, _, err := cluster.LoadOrCreateKey(*keyFile, false)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode ctxopt %s: --address: %v\n", sub, err)
			return 1
		}
		det, err := cluster.ParseDetection(*detection)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode ctxopt %s: --detection: %v\n", sub, err)
			return 2
		}
		if node, err = cluster.Start(ctx, cluster.Config{Bind: *bind, Join: []string{*address}, Key: key, Detection: det, Logger: actor.DiscardLogger()}); err != nil {
			fmt.Fprintf(stderr, "rlnode ctxopt %s: %v\n", sub, err) // names the join address, or the --bind at fault
			return 1
		}
		defer node.Stop()
	}
	if err := ctxoptRun(ctx, sub, r, node, *out, *policy, also, stdout); err != nil {
		fmt.Fprintf(stderr, "rlnode ctxopt %s: %v\n", sub, err)
		return 1
	}
	return 0
}

func ctxoptRun(ctx context.Context, sub string, r *ctxopt.Recipe, node *cluster.Node, out, policy string, also []string, stdout io.Writer) error {
	if (sub == "train" || sub == "benchmark") && out == "" {
		return fmt.Errorf("--out DIR is required")
	}
	if (sub == "eval" || sub == "benchmark") && policy == "" {
		return fmt.Errorf("--policy FILE is required")
	}
	if out != "" {
		// As rlnode run's: a second train or benchmark on the folder while
		// this one runs is refused, naming this process, instead of both
		// writing metrics.jsonl, policy.json or benchmark.json.
		unlock, err := lockRunDir(out)
		if err != nil {
			return err
		}
		defer unlock()
	}
	x, err := r.NewExecutor(ctx)
	if err != nil {
		return err
	}
	defer x.Engine.Close()
	if node != nil {
		var ids []string
		for _, v := range node.Views() {
			if v.ID != node.ID() {
				ids = append(ids, v.ID)
			}
		}
		sort.Strings(ids)
		pool, err := ctxopt.StartExecutors(ctx, node, r, "ctxopt-"+node.ID(), ids)
		if err != nil {
			return err
		}
		defer pool.Close(context.WithoutCancel(ctx))
		x.Remote = pool
		fmt.Fprintf(stdout, "executions on %d executor actors: nodes %s\n", len(ids), strings.Join(ids, ", "))
	}
	m, err := r.Method(ctx)
	if err != nil {
		return err
	}
	trainQs, heldOut, err := r.Questions()
	if err != nil {
		return err
	}
	switch sub {
	case "train":
		mpath := filepath.Join(out, "metrics.jsonl")
		mf, err := os.Create(mpath)
		if err != nil {
			return err
		}
		defer mf.Close()
		enc := json.NewEncoder(mf)
		var logErr error // the first failed write of metrics.jsonl
		start := time.Now()
		stats, err := ctxopt.Train(ctx, m, x, trainQs, ctxopt.TrainOptions{Iterations: r.Train.Iterations, Batch: r.Train.Batch, Seed: r.Seed,
			Log: func(s ctxopt.IterStats) {
				if err := enc.Encode(s); err != nil && logErr == nil {
					logErr = fmt.Errorf("write %s: %w", mpath, err)
				}
				if s.Iter%10 == 0 || s.Iter == r.Train.Iterations-1 {
					fmt.Fprintf(stdout, "iter %4d  reward %6.3f  accuracy %.3f  cost %.3f  executions/s %.0f  model calls/s %.0f  %.0fs\n",
						s.Iter, s.Reward, s.Accuracy, s.Cost, s.ExecPerSec, s.CallsPerSec, s.Elapsed)
				}
			}})
		if err != nil {
			return err
		}
		if logErr != nil {
			return logErr
		}
		if err := mf.Close(); err != nil {
			return fmt.Errorf("write %s: %w", mpath, err)
		}
		var execs, calls, secs float64
		for _, s := range stats {
			if s.ExecPerSec > 0 {
				execs += float64(r.Train.Batch)
				secs += float64(r.Train.Batch) / s.ExecPerSec
				calls += s.CallsPerSec * float64(r.Train.Batch) / s.ExecPerSec
			}
		}
		fmt.Fprintf(stdout, "trained %d iterations × %d episodes in %s; executor: %.0f executions/s, %.0f model calls/s\n",
			r.Train.Iterations, r.Train.Batch, time.Since(start).Round(time.Second), execs/secs, calls/secs)
		pf := filepath.Join(out, "policy.json")
		if err := ctxopt.SavePolicy(pf, m); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "policy: %s\n", pf)
	case "eval", "benchmark":
		if err := ctxopt.LoadPolicy(policy, m); err != nil {
			return err
		}
	}
	if sub != "benchmark" {
		return ctxoptEval(ctx, r, x, m, heldOut, stdout)
	}
	res, err := ctxopt.Benchmark(ctx, x, m, trainQs[:min(len(trainQs), len(heldOut))], heldOut, r.Seed)
	if err != nil {
		return err
	}
	res.Learned.Name = r.Name
	learned := map[string]ctxopt.Summary{r.Name: res.Learned}
	others, perType, configs, err := ctxoptAlso(ctx, r, x, heldOut, also)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "policy\taccuracy\tcost\treward\tstructures (direct/RA/RVA)\n")
	row := func(s ctxopt.Summary) {
		fmt.Fprintf(tw, "%s\t%.3f ± %.3f\t%.3f ± %.3f\t%.3f ± %.3f\t%d/%d/%d\n", s.Name, s.Accuracy, s.AccuracyCI, s.Cost, s.CostCI, s.Reward, s.RewardCI,
			s.Structures["direct"], s.Structures["reason-answer"], s.Structures["reason-verify-answer"])
	}
	row(res.Learned)
	for _, o := range others {
		row(o)
		learned[o.Name] = o
	}
	row(res.Random)
	row(res.BestPerType)
	for _, f := range res.TopFixed(5) {
		row(f)
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d fixed configurations, %d on the accuracy/cost Pareto front\n", len(res.Fixed), len(res.Front))
	for _, s := range append([]ctxopt.Summary{res.Learned}, others...) {
		if d := res.DominatedBy(s); len(d) == 0 {
			fmt.Fprintf(stdout, "%s is on or beyond the fixed configurations' Pareto front\n", s.Name)
		} else {
			fmt.Fprintf(stdout, "%s is dominated by: %s\n", s.Name, strings.Join(d, "; "))
		}
	}
	printPerType(stdout, r.Name, res.PerType)
	for _, o := range others {
		printPerType(stdout, o.Name, perType[o.Name])
	}
	printConfigsPerType(stdout, r.Name, res.ConfigsPerType)
	for _, o := range others {
		printConfigsPerType(stdout, o.Name, configs[o.Name])
	}
	b, err := json.MarshalIndent(struct {
		ctxopt.Result
		Also        []ctxopt.Summary                     `json:"also,omitempty"`
		AlsoConfigs map[string]map[string]map[string]int `json:"also_configs_per_type,omitempty"`
	}{res, others, configs}, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(out, "benchmark.json"), b, 0o644); err != nil {
		return err
	}
	png := filepath.Join(out, "pareto.png")
	if err := ctxopt.WritePlot(png, res, learned); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "table: %s\nplot: %s\n", filepath.Join(out, "benchmark.json"), png)
	return nil
}

// ctxoptEval scores the learned (greedy) policy and a random one on the
// held-out questions.
func ctxoptEval(ctx context.Context, r *ctxopt.Recipe, x *ctxopt.Executor, m ctxopt.Method, heldOut []ctxopt.Question, stdout io.Writer) error {
	rng := rand.New(rand.NewPCG(r.Seed, 0xbe7c))
	cs, _, err := m.Choose(heldOut, rng, true)
	if err != nil {
		return err
	}
	outs, err := ctxopt.Execute(ctx, x, heldOut, cs, r.Seed)
	if err != nil {
		return err
	}
	learned := ctxopt.Summarize(r.Name, outs, cs)
	rc := ctxopt.RandomConfigs(x.Space, len(heldOut), rng)
	if outs, err = ctxopt.Execute(ctx, x, heldOut, rc, r.Seed); err != nil {
		return err
	}
	random := ctxopt.Summarize("random", outs, rc)
	for _, s := range []ctxopt.Summary{learned, random} {
		fmt.Fprintf(stdout, "%-22s held-out n=%d  accuracy %.3f ± %.3f  cost %.3f ± %.3f  reward %.3f ± %.3f\n",
			s.Name, s.N, s.Accuracy, s.AccuracyCI, s.Cost, s.CostCI, s.Reward, s.RewardCI)
	}
	return nil
}

// multiFlag collects a repeated flag's values.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// ctxoptAlso scores further learned policies (RECIPE=POLICY) on the same
// held-out questions and executor; their recipes must share the space.
func ctxoptAlso(ctx context.Context, r *ctxopt.Recipe, x *ctxopt.Executor, heldOut []ctxopt.Question, also []string) ([]ctxopt.Summary, map[string]map[string][]int, map[string]map[string]map[string]int, error) {
	var out []ctxopt.Summary
	perType := map[string]map[string][]int{}
	configs := map[string]map[string]map[string]int{}
	for _, a := range also {
		name, path, ok := strings.Cut(a, "=")
		if !ok {
			return nil, nil, nil, fmt.Errorf("--also %q: want RECIPE=POLICY", a)
		}
		o, err := ctxopt.LoadRecipe(name)
		if err != nil {
			return nil, nil, nil, err
		}
		if fmt.Sprint(o.SpaceOf()) != fmt.Sprint(r.SpaceOf()) {
			return nil, nil, nil, fmt.Errorf("--also %s: its configuration space differs from %s's", name, r.Name)
		}
		o.Seed = r.Seed
		m, err := o.Method(ctx)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := ctxopt.LoadPolicy(path, m); err != nil {
			return nil, nil, nil, err
		}
		cs, _, err := m.Choose(heldOut, rand.New(rand.NewPCG(r.Seed, 0xbe7c)), true)
		if err != nil {
			return nil, nil, nil, err
		}
		outs, err := ctxopt.Execute(ctx, x, heldOut, cs, r.Seed)
		if err != nil {
			return nil, nil, nil, err
		}
		out = append(out, ctxopt.Summarize(o.Name, outs, cs))
		perType[o.Name] = ctxopt.StructuresPerType(heldOut, cs)
		configs[o.Name] = ctxopt.ConfigsPerType(x.Space, heldOut, cs)
	}
	return out, perType, configs, nil
}

// printPerType writes a policy's structures per question type.
func printPerType(w io.Writer, name string, perType map[string][]int) {
	fmt.Fprintf(w, "%s structures per question type (direct/RA/RVA):", name)
	for _, t := range slices.Sorted(maps.Keys(perType)) {
		v := perType[t]
		fmt.Fprintf(w, " %s %d/%d/%d", t, v[0], v[1], v[2])
	}
	fmt.Fprintln(w)
}

// printConfigsPerType writes a policy's whole configurations per question
// type, the most frequent first.
func printConfigsPerType(w io.Writer, name string, perType map[string]map[string]int) {
	fmt.Fprintf(w, "%s configurations per question type:\n", name)
	for _, t := range slices.Sorted(maps.Keys(perType)) {
		cs := make([]string, 0, len(perType[t]))
		for c := range perType[t] {
			cs = append(cs, c)
		}
		sort.Slice(cs, func(i, j int) bool {
			if a, b := perType[t][cs[i]], perType[t][cs[j]]; a != b {
				return a > b
			}
			return cs[i] < cs[j]
		})
		parts := make([]string, len(cs))
		for i, c := range cs {
			parts[i] = fmt.Sprintf("%d %s", perType[t][c], c)
		}
		fmt.Fprintf(w, "  %s: %s\n", t, strings.Join(parts, "; "))
	}
}
