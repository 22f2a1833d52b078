package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/recipes/driver"
)

// `rlnode run` trains a recipe: in this process on an embedded
// single-node cluster by default, or with --address on a running cluster
// (the learner is placed there; the native engine stays in this process).
// What the driver cannot run yet (recipes.ErrUnsupported: mlmt/score/tools
// episodes, datasets, vllm engines, async, split placement, several
// learner shards or engines) is refused before anything starts.
// Not done yet: curves.png, --metrics-addr.

func init() { commands["run"] = runCommand }

const runUsage = `usage: rlnode run RECIPE [--out DIR] [--set KEY.PATH=VALUE]... [--resume] [--address HOST:PORT]

Trains RECIPE (a built-in name or a file). DIR gets metrics.jsonl (one JSON
object per step), checkpoints/step-N/ and recipe.yaml (the resolved recipe).
Ctrl-C stops after the current step (exit status 130); --resume continues
from the newest checkpoint in DIR.

`

func runCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "run directory (default ./runs/NAME-YYYYMMDD-HHMMSS)")
	resume := fs.Bool("resume", false, "continue from the newest checkpoint in --out")
	address := fs.String("address", "", "join the cluster a member at HOST:PORT (gossip address) belongs to; default: an embedded single-node cluster")
	keyFile := fs.String("key-file", filepath.Join(cluster.Home(), "cluster.key"), "gossip encryption key file (with --address)")
	bind := fs.String("bind", "0.0.0.0:0", "gossip address of this process's node (with --address)")
	var sets repeated
	fs.Var(&sets, "set", "override KEY.PATH=VALUE (repeatable; VALUE is YAML)")
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "rlnode run: want one recipe (a built-in name or a file)\n\n%s", runUsage)
		return 2
	}
	if *resume && *out == "" {
		fmt.Fprintln(stderr, "rlnode run: --resume needs --out DIR (the run to continue)")
		return 2
	}

	// Everything is checked before the run directory exists.
	l, err := recipes.Load(pos[0], sets)
	if err != nil {
		printRecipeError(stderr, "run", pos[0], err)
		return 1
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("runs", fmt.Sprintf("%s-%s", l.Name, time.Now().Format("20060102-150405")))
	}
	cfg, err := l.DriverConfig(dir)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	if *resume {
		cks, err := recipes.Checkpoints(dir)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode run: --resume: %v\n", err)
			return 1
		}
		if len(cks) == 0 {
			fmt.Fprintf(stderr, "rlnode run: --resume: no checkpoint in %s\n", filepath.Join(dir, "checkpoints"))
			return 1
		}
		cfg.Resume = cks[len(cks)-1]
	}
	var key []byte
	if *address != "" {
		if key, _, err = cluster.LoadOrCreateKey(*keyFile, false); err != nil {
			fmt.Fprintf(stderr, "rlnode run: --address: %v\n", err)
			return 1
		}
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	if _, err := l.SaveResolved(dir); err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "run %s: %s (%s, %s), writing to %s\n", l.Name, l.Source, l.Algorithm.Name, l.Episode.Type, dir)
	if cfg.Resume != "" {
		fmt.Fprintf(stdout, "resuming from %s\n", cfg.Resume)
	}

	// The first Ctrl-C lets the current step finish: the progress callback
	// cancels the run's context after it, so the driver stops at the next
	// step's start. A second one cancels at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var mu sync.Mutex
	interrupted := false
	go func() {
		n := 0
		for {
			select {
			case <-sigs:
				n++
				mu.Lock()
				interrupted = true
				mu.Unlock()
				if n == 1 {
					fmt.Fprintln(stderr, "\nrlnode run: interrupted; stopping after the current step (Ctrl-C again stops now)")
				} else {
					cancel()
				}
			case <-ctx.Done():
				return
			}
		}
	}()

	if *address != "" {
		node, err := cluster.Start(ctx, cluster.Config{Bind: *bind, Join: []string{*address}, Key: key, Logger: actor.DiscardLogger()})
		if err != nil {
			fmt.Fprintf(stderr, "rlnode run: join %s: %v\n", *address, err)
			return 1
		}
		defer node.Stop()
		cfg.Node = node
	}

	bar := newProgressBar(stderr, cfg.WarmupSteps+cfg.Steps)
	cfg.Progress = func(m driver.Metrics) {
		bar.step(m)
		if err := recipes.PruneCheckpoints(dir, l.Checkpoint.Keep); err != nil {
			bar.note(fmt.Sprintf("rlnode run: %v", err))
		}
		mu.Lock()
		stop := interrupted
		mu.Unlock()
		if stop {
			cancel()
		}
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	res, err := driver.Run(ctx, cfg)
	bar.done()
	mu.Lock()
	wasInterrupted := interrupted
	mu.Unlock()

	fmt.Fprintf(stdout, "metrics: %s\n", filepath.Join(dir, "metrics.jsonl"))
	cks, _ := recipes.Checkpoints(dir)
	if len(cks) > 0 {
		fmt.Fprintf(stdout, "checkpoints: %s (newest %s)\n", filepath.Join(dir, "checkpoints"), filepath.Base(cks[len(cks)-1]))
	} else {
		fmt.Fprintf(stdout, "checkpoints: none written\n")
	}
	switch {
	case wasInterrupted && (err == nil || errors.Is(err, context.Canceled)):
		fmt.Fprintf(stderr, "rlnode run: stopped after step %d; continue from its newest checkpoint with: rlnode run %s --out %s --resume\n",
			bar.last, filepath.Join(dir, recipes.ResolvedFile), dir)
		return 130
	case err != nil:
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	if res.PostWarmupEval >= 0 {
		fmt.Fprintf(stdout, "eval accuracy after warm-up: %.3f\n", res.PostWarmupEval)
	}
	if res.FinalEval >= 0 {
		fmt.Fprintf(stdout, "eval accuracy at the end: %.3f (%d held-out problems)\n", res.FinalEval, res.EvalProblems)
	}
	fmt.Fprintf(stdout, "done: %d steps\n", res.Steps)
	return 0
}

// printRecipeError prints a recipe load error: every problem as
// FILE:LINE: field: message.
func printRecipeError(w io.Writer, verb, recipe string, err error) {
	if errors.Is(err, recipes.ErrInvalid) {
		n := strings.Count(err.Error(), "\n") + 1
		fmt.Fprintf(w, "%v\nrlnode %s: %s: %d error(s)\n", err, verb, recipe, n)
		return
	}
	fmt.Fprintf(w, "rlnode %s: %v\n", verb, err)
}

// progressBar prints one line per step: redrawn in place (\r) on a
// terminal, plain lines otherwise (logs, pipes).
type progressBar struct {
	w     io.Writer
	tty   bool
	total int
	start time.Time
	first int // first step seen, for the ETA of a resumed run
	last  int
	eval  *float64
	drawn bool
}

func newProgressBar(w io.Writer, total int) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progressBar{w: w, tty: tty, total: total, start: time.Now(), first: -1}
}

func (b *progressBar) step(m driver.Metrics) {
	if b.first < 0 {
		b.first = m.Step - 1
	}
	b.last = m.Step
	if m.EvalAccuracy != nil {
		b.eval = m.EvalAccuracy
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "step %d/%d %-6s", m.Step, b.total, m.Phase)
	if m.RewardMean != nil {
		fmt.Fprintf(&sb, " reward %.3f", *m.RewardMean)
	} else {
		fmt.Fprintf(&sb, " loss %.4f", m.Loss)
	}
	if b.eval != nil {
		fmt.Fprintf(&sb, " eval %.3f", *b.eval)
	}
	if s := m.GenSeconds + m.TrainSeconds; s > 0 && m.Tokens > 0 {
		fmt.Fprintf(&sb, " %.0f tok/s", float64(m.Tokens)/s)
	}
	if done := m.Step - b.first; done > 0 && m.Step < b.total {
		per := time.Since(b.start) / time.Duration(done)
		fmt.Fprintf(&sb, " ETA %s", (per * time.Duration(b.total-m.Step)).Round(time.Second))
	}
	if b.tty {
		fmt.Fprintf(b.w, "\r\033[K%s", sb.String())
		b.drawn = true
	} else {
		fmt.Fprintln(b.w, sb.String())
	}
}

// note prints a message without breaking the bar.
func (b *progressBar) note(msg string) {
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
	fmt.Fprintln(b.w, msg)
}

func (b *progressBar) done() {
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}
