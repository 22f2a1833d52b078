package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/dashboard"
	"github.com/rlnode/rlnode/jobs"
	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout"
	"github.com/rlnode/rlnode/train"
)

// `rlnode run` trains a recipe: in this process on an embedded
// single-node cluster by default, or with --address on a running cluster
// (this process joins it as a node; the learner — placement.learner_shards
// ranks — and the rollout actors are placed on the cluster, generation
// always on rollout actors there, per the recipe's placement.rollout and
// engines.*.replicas). A lost rollout node's work is regenerated on the
// others; the end of the run reports how many chunks were; a lost learner
// rank restarts the run from its last checkpoint. What the driver cannot
// run yet is refused before anything starts, as rlnode recipe validate
// refuses it (train.Check).
// At the end (also after an interruption or an error, whenever
// metrics.jsonl has data) it draws DIR/curves.png from DIR/metrics.jsonl
// (train.WriteCurves); `rlnode plot DIR` redraws it. --metrics-addr serves the
// run's latest metrics for Prometheus (train.RunMetrics). --resume
// takes the newest checkpoint that has the driver's state file (a kill
// during a checkpoint write leaves one without it) and passes its
// checksum manifest (train.NewestIntact), saying which it skipped and why,
// and moves each skipped one aside (step-N.corrupt, step-N.incomplete)
// before the run writes step-N again.
//
// Not done yet: the endpoint exports the last step's values only (no
// histograms, no per-node rollout or learner metrics); the ETA of a run
// still in its warm-up covers the warm-up only.

func init() { commands["run"] = runCommand }

const runUsage = `usage: rlnode run RECIPE [--out DIR] [--set KEY.PATH=VALUE]... [--resume | --overwrite | --continue] [--address HOST:PORT [--owner-grace D] [--driver-only]] [--metrics-addr HOST:PORT [--metrics-max-conns-per-addr N]]

Trains RECIPE (a built-in name or a file). DIR gets metrics.jsonl (one JSON
object per step), checkpoints/step-N/, recipe.yaml (the resolved recipe) and,
at the end, curves.png. Ctrl-C stops after the current step (exit status
130), or at once while the run starts; --resume continues from the newest
checkpoint in DIR. A DIR that holds another run is refused unless --resume
or --overwrite; one that another run is using (DIR/run.lock) is refused.
--metrics-addr serves Prometheus metrics at http://HOST:PORT/metrics while
the run lasts.

`

// minOwnerGrace is the shortest --owner-grace: shorter would take a
// false loss (a second or two with --detection fast) for the driver gone.
const minOwnerGrace = 5 * time.Second

func runCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rlnode run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "run directory (default ./runs/NAME-YYYYMMDD-HHMMSS, or NAME-YYYYMMDD-HHMMSS-2... when that exists)")
	resume := fs.Bool("resume", false, "continue from the newest checkpoint in --out (the recipe may change only its schedule, eval, placement, checkpoint, trace and description)")
	overwrite := fs.Bool("overwrite", false, "replace the run --out holds (its recipe, metrics, checkpoints and curves are removed)")
	cont := fs.Bool("continue", false, "continue the run --out holds from its newest intact checkpoint as --resume does, or start the run there when --out holds none or a run that wrote no checkpoint (how a job's driver starts again on another node)")
	address := fs.String("address", "", "join the cluster a member at HOST:PORT (gossip address) belongs to and generate on rollout actors there; default: an embedded single-node cluster")
	keyFile := fs.String("key-file", filepath.Join(cluster.Home(), "cluster.key"), "gossip encryption key file (with --address)")
	bind := fs.String("bind", "0.0.0.0:0", "gossip address of this process's node (with --address)")
	driverOnly := fs.Bool("driver-only", false, "with --address: this process's node offers no CPUs, GPUs or memory, so none of the run's actors are placed on it (the drivers of rlnode submit's jobs run so, beside the node that hosts them)")
	detection := detectionFlag(fs)
	ownerGrace := fs.Duration("owner-grace", 0, fmt.Sprintf("with --address: how long the cluster keeps this run's learner and rollout actors and placement groups once this process is gone without stopping them (killed, its host lost), %v to %v (default: --detection's, 15s with fast, 30s with lan)", minOwnerGrace, cluster.MaxOwnerGrace))
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at http://HOST:PORT/metrics while the run lasts (port 0 picks one)")
	metricsConns := fs.Int("metrics-max-conns-per-addr", train.DefaultMetricsConnsPerAddr, fmt.Sprintf("with --metrics-addr: connections one scraper address (an IPv6 one with its /64, so hosts sharing a /64 share it) may hold open; more are closed at once (1 to %d)", cluster.MaxConnsPerAddr))
	var sets repeated
	fs.Var(&sets, "set", "override KEY.PATH=VALUE (repeatable; VALUE is YAML)")
	tf := addRunTraceFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, runUsage)
		fs.PrintDefaults()
	}
	pos, code, ok := parseCommand(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "rlnode run: want one recipe (a built-in name or a file)\n\n%s", runUsage)
		return 2
	}
	if *resume && *out == "" {
		fmt.Fprintln(stderr, "rlnode run: --resume needs --out DIR (the run to continue)")
		return 2
	}
	if *cont && (*out == "" || *resume || *overwrite) {
		fmt.Fprintln(stderr, "rlnode run: --continue needs --out DIR, and neither --resume nor --overwrite")
		return 2
	}
	if err := tf.check(); err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 2
	}
	if _, err := parseConnsPerAddr(strconv.Itoa(*metricsConns)); err != nil {
		fmt.Fprintf(stderr, "rlnode run: --metrics-max-conns-per-addr %v\n", err)
		return 2
	}
	if *driverOnly && *address == "" {
		fmt.Fprintln(stderr, "rlnode run: --driver-only needs --address (without it the run's actors live in its own process)")
		return 2
	}
	switch {
	case *ownerGrace == 0:
	case *address == "":
		fmt.Fprintln(stderr, "rlnode run: --owner-grace needs --address (without it the run's actors live in its own process)")
		return 2
	case *ownerGrace < minOwnerGrace || *ownerGrace > cluster.MaxOwnerGrace:
		fmt.Fprintf(stderr, "rlnode run: --owner-grace %v: want %v to %v\n", *ownerGrace, minOwnerGrace, cluster.MaxOwnerGrace)
		return 2
	}

	// Everything is checked before the run directory exists; on a cluster
	// the learner and engines run on its nodes, which check their GPUs.
	load := loadCheckedHere
	if *address != "" {
		load = loadChecked
	}
	l, err := load(pos[0], sets)
	if err != nil {
		printRecipeError(stderr, "run", pos[0], err)
		return 1
	}
	dir := *out
	if dir == "" {
		dir = filepath.Join("runs", fmt.Sprintf("%s-%s", l.Name, time.Now().Format("20060102-150405")))
	}
	if *address != "" {
		// Learners on other nodes write their part of each checkpoint
		// there: a relative path would name their working directory.
		if dir, err = filepath.Abs(dir); err != nil {
			fmt.Fprintf(stderr, "rlnode run: --out: %v\n", err)
			return 1
		}
	}
	cfg, err := train.FromRecipe(l, dir)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	var resolved bytes.Buffer
	if err := l.WriteResolved(&resolved); err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	if *out == "" {
		// The default names the second: a run started beside another in
		// the same second takes the next free NAME-DATE-N.
		if dir, err = reserveRunDir(dir); err != nil {
			fmt.Fprintf(stderr, "rlnode run: %v\n", err)
			return 1
		}
		cfg.Out = dir
		defer os.Remove(dir) // only while still empty: a run that wrote nothing leaves nothing
	}
	_, statErr := os.Stat(dir) // before the lock makes it
	unlock, err := lockRunDir(dir)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	defer unlock()
	if *cont {
		// Decided under the run lock: no other driver writes dir now.
		if _, err := os.Lstat(filepath.Join(dir, recipes.ResolvedFile)); err == nil {
			cks, err := train.Checkpoints(dir)
			if err != nil {
				fmt.Fprintf(stderr, "rlnode run: --continue: %v\n", err)
				return 1
			}
			if len(cks) > 0 {
				*resume = true
			} else {
				*overwrite = true
				fmt.Fprintf(stderr, "rlnode run: --continue: %s holds a run that wrote no checkpoint: starting it over\n", dir)
			}
		}
	}
	if err := checkRunDir(dir, resolved.Bytes(), *resume, *overwrite); err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 2
	}
	if *resume && len(heldRunFiles(dir)) == 0 {
		// Not "wrote no checkpoint: start it again with --continue": there
		// is no run there, and the folder may be a typo of the one meant.
		what := "holds no run (none of " + strings.Join(runFiles, ", ") + ")"
		if errors.Is(statErr, os.ErrNotExist) {
			what = "does not exist"
		}
		fmt.Fprintf(stderr, "rlnode run: --resume: --out %s %s: there is no run to continue; to start a run there, leave out --resume\n", dir, what)
		return 1
	}
	if *resume {
		// A run killed while writing a checkpoint leaves it without the
		// driver's state file (written after the learner's) or the
		// checksum manifest (written last); a checkpoint whose files no
		// longer match their manifest is never trained on: resume from the
		// newest complete, intact one.
		ck, skipped, noManifest, err := train.NewestIntact(dir)
		for _, s := range skipped {
			fmt.Fprintf(stderr, "rlnode run: --resume: skipping %v\n", s)
		}
		if err != nil {
			fmt.Fprintf(stderr, "rlnode run: --resume: %v\n", err)
			if cks, cerr := train.Checkpoints(dir); cerr == nil && len(cks) == 0 {
				// Stopped before its first checkpoint: nothing to resume,
				// and the user is left to guess how to start it again.
				fmt.Fprintf(stderr, "rlnode run: the run in %s wrote no checkpoint: start it again there with --continue instead of --resume (or --overwrite)\n", dir)
			}
			return 1
		}
		if noManifest {
			fmt.Fprintf(stderr, "rlnode run: --resume: %s has no checksum manifest (written by an older rlnode): its files are not verified\n", ck)
		}
		if len(skipped) > 0 {
			fmt.Fprintf(stderr, "rlnode run: --resume: continuing from %s\n", ck)
		}
		cfg.Resume, cfg.ResumeVerified = ck, true // NewestIntact read every file just now
		var step int
		if _, err := fmt.Sscanf(filepath.Base(ck), "step-%d", &step); err == nil && step > cfg.WarmupSteps+cfg.Steps {
			fmt.Fprintf(stderr, "rlnode run: --resume: %s is step %d, past the recipe's last step %d (%d warm-up + %d RL); raise schedule.steps to train further\n",
				ck, step, cfg.WarmupSteps+cfg.Steps, cfg.WarmupSteps, cfg.Steps)
			return 2
		}
		// The run writes the skipped steps again: each skipped folder is
		// moved out of its way, whole, rather than written into (which
		// would mix old files with new and lose the evidence) or counted
		// by checkpoint.keep among the newest (which would prune the
		// resumed run's own checkpoints before it).
		for _, s := range skipped {
			to, err := train.SetAside(s)
			if err != nil {
				fmt.Fprintf(stderr, "rlnode run: --resume: %v (move or remove it, then resume again)\n", err)
				return 1
			}
			fmt.Fprintf(stderr, "rlnode run: --resume: moved %s to %s (kept for inspection; no longer a checkpoint)\n", s.Dir, to)
		}
	}
	var key []byte
	if *address != "" {
		if key, _, err = cluster.LoadOrCreateKey(*keyFile, false); err != nil {
			fmt.Fprintf(stderr, "rlnode run: --address: %v\n", err)
			return 1
		}
	}

	// The metrics listener is opened before the run directory exists, so a
	// taken port stops the run before anything is written.
	var exporter *train.RunMetrics
	var exporterAddr string
	if *metricsAddr != "" {
		exporter = train.NewRunMetrics(l.Name, cfg.WarmupSteps+cfg.Steps)
		exporter.ConnsPerAddr = *metricsConns
		addr, stopServe, err := exporter.Serve(*metricsAddr)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode run: --metrics-addr: %v\n", err)
			return 1
		}
		defer stopServe()
		exporterAddr = addr
		fmt.Fprintf(stdout, "metrics endpoint: http://%s/metrics\n", addr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	setNodeLog := func(*slog.Logger) {}
	// The cluster is joined before the run directory exists too: a wrong
	// key or address leaves nothing that a retry would take for a run.
	if *address != "" {
		det, err := cluster.ParseDetection(*detection)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode run: --detection: %v\n", err)
			return 2
		}
		if *ownerGrace > 0 {
			det.OwnerGrace = *ownerGrace
		}
		var nodeLog *slog.Logger
		nodeLog, setNodeLog = newLateNotes()
		ncfg := cluster.Config{Bind: *bind, Join: []string{*address}, Key: key, Detection: det, Logger: nodeLog}
		if *driverOnly {
			ncfg.NoResources, ncfg.GPUs, ncfg.Memory = true, 0, cluster.NoMemory
		}
		if job := os.Getenv(jobs.EnvJob); job != "" && jobs.CheckName(job) == nil {
			// A job's driver says so (and which job) in its node's labels.
			ncfg.Labels = map[string]string{jobs.DriverLabel: job}
		}
		node, err := cluster.Start(ctx, ncfg)
		if err != nil {
			fmt.Fprintf(stderr, "rlnode run: %v\n", err) // names the join address, or the --bind at fault
			return 1
		}
		defer node.Stop()
		cfg.Node = node
		// Say what this process adds to the cluster: without
		// --driver-only the run's actors may land in it, beside the
		// nodes of the host it runs on (which offer the same cores).
		if total, _ := node.Resources(); *driverOnly {
			fmt.Fprintf(stdout, "joined the cluster at %s as node %s, offering nothing (--driver-only): the run's actors go to the other nodes\n", *address, node.ID())
		} else {
			fmt.Fprintf(stdout, "joined the cluster at %s as node %s, offering %s: the run's actors may be placed in this process (--driver-only: none)\n", *address, node.ID(), total)
		}
		// On a cluster, generation goes to rollout actors, unless vLLM
		// servers generate (the driver's client talks to them directly).
		if cfg.Rollout == nil && cfg.VLLM == nil {
			cfg.Rollout, cfg.FeedbackRollout = train.RolloutPlacement(l, cfg.Feedback != nil)
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
	// While the run lasts, DIR/metrics.addr says where its metrics
	// endpoint listens (rlnode dashboard asks it for the run's state).
	endpointFile := filepath.Join(dir, dashboard.EndpointFile)
	_ = os.Remove(endpointFile)
	if exporterAddr != "" {
		if err := os.WriteFile(endpointFile, []byte(exporterAddr+"\n"), 0o644); err == nil {
			defer os.Remove(endpointFile)
		}
	}
	tf.fromRecipe(l.Trace, fs)
	record, closeTraces, err := tf.open(dir, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		return 1
	}
	cfg.Episodes = record
	fmt.Fprintf(stdout, "run %s: %s (%s, %s), writing to %s\n", l.Name, l.Source, l.Algorithm.Name, l.Episode.Type, dir)
	if cfg.Resume != "" {
		fmt.Fprintf(stdout, "resuming from %s\n", cfg.Resume)
	}

	// The first Ctrl-C or SIGTERM (Slurm sends one before the time limit)
	// lets the current step finish and checkpoints it (cfg.Stop); a second
	// one cancels at once.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var mu sync.Mutex
	interrupted := false
	stop := make(chan struct{})
	cfg.Stop = stop
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
					fmt.Fprintln(stderr, "\nrlnode run: interrupted; stopping after the current step, which is checkpointed, or now if the run is still starting (Ctrl-C again stops now)")
					close(stop)
				} else {
					cancel()
				}
			case <-ctx.Done():
				return
			}
		}
	}()

	warmup := cfg.WarmupSteps
	if cfg.Resume != "" {
		if w, ok := train.EndedWarmup(cfg.Resume); ok {
			warmup = w // a probe ended the resumed run's warm-up there
		}
	}
	bar := newProgressBar(stderr, warmup, warmup+cfg.Steps)
	cfg.Progress = func(m train.Metrics) {
		bar.step(m)
		if exporter != nil {
			exporter.Observe(m)
		}
		if err := train.PruneCheckpoints(dir, l.Checkpoint.Keep); err != nil {
			bar.note(fmt.Sprintf("rlnode run: %v", err))
		}
	}
	cfg.Logger = runLogger(bar)
	setNodeLog(cfg.Logger)
	if exporter != nil {
		exporter.SetLogger(cfg.Logger)
	}
	res, err := train.Run(ctx, cfg)
	bar.done()
	closeTraces()
	mu.Lock()
	wasInterrupted := interrupted
	mu.Unlock()

	if exporter != nil {
		exporter.Finish(err)
	}
	fmt.Fprintf(stdout, "metrics: %s\n", filepath.Join(dir, "metrics.jsonl"))
	if perr := train.WriteCurves(filepath.Join(dir, "metrics.jsonl"), filepath.Join(dir, "curves.png")); perr != nil {
		if errors.Is(perr, train.ErrNoCurves) || errors.Is(perr, os.ErrNotExist) {
			fmt.Fprintf(stdout, "curves: none (no step finished)\n")
		} else {
			fmt.Fprintf(stderr, "rlnode run: curves: %v\n", perr)
		}
	} else {
		fmt.Fprintf(stdout, "curves: %s\n", filepath.Join(dir, "curves.png"))
	}
	newest, _ := train.NewestComplete(dir)
	if newest != "" {
		fmt.Fprintf(stdout, "checkpoints: %s (newest %s)\n", filepath.Join(dir, "checkpoints"), filepath.Base(newest))
	} else {
		fmt.Fprintf(stdout, "checkpoints: none written\n")
	}
	switch {
	case wasInterrupted && (err == nil && res.Stopped || errors.Is(err, context.Canceled)):
		// A signal while the run starts (learners placed, models built)
		// stops it before any step of this process has finished.
		where := fmt.Sprintf("after step %d", bar.last)
		if bar.last == 0 {
			where = "before its first step"
		}
		if newest == "" {
			fmt.Fprintf(stderr, "rlnode run: stopped %s, before any checkpoint: nothing to resume\n", where)
			return 130
		}
		if !cfg.Resumable() {
			fmt.Fprintf(stderr, "rlnode run: stopped %s; checkpoint %s holds its weights, but this run cannot be resumed\n", where, filepath.Base(newest))
			return 130
		}
		fmt.Fprintf(stderr, "rlnode run: stopped %s; continue from checkpoint %s with: %s\n",
			where, filepath.Base(newest), resumeCommand(fs, dir))
		return 130
	case err != nil && *address != "" && noRoomNow(err):
		fmt.Fprintf(stderr, "rlnode run: the cluster could hold this run once the actors, tasks or groups that hold its room end (exit %d; a job submitted with rlnode submit waits for it)\nrlnode run: %v\n", jobs.ExitNoRoom, err)
		if newest != "" && cfg.Resumable() {
			fmt.Fprintf(stderr, "%s%s with: %s\n", jobs.ResumeHint, filepath.Base(newest), resumeCommand(fs, dir))
		}
		return jobs.ExitNoRoom
	case err != nil:
		if *address != "" && errors.Is(err, cluster.ErrHeldBySelf) {
			// Before the error: a job's FAILED cause is its driver's last line.
			fmt.Fprintln(stderr, "rlnode run: the cluster is too small for this run: the room the rest of it needs is held by its own learners and rollout actors, and frees only when it ends; add nodes (rlnode join), give them more (--cpus, --gpus), or place less (placement.* in rlnode recipe show RECIPE --resolved)")
		}
		fmt.Fprintf(stderr, "rlnode run: %v\n", err)
		if newest != "" && cfg.Resumable() {
			fmt.Fprintf(stderr, "%s%s with: %s\n", jobs.ResumeHint, filepath.Base(newest), resumeCommand(fs, dir))
		}
		return 1
	}
	if res.PostWarmupEval >= 0 {
		fmt.Fprintf(stdout, "eval accuracy after warm-up: %.3f\n", res.PostWarmupEval)
	}
	if res.FinalEval >= 0 {
		fmt.Fprintf(stdout, "eval accuracy at the end: %.3f (%d held-out problems)\n", res.FinalEval, res.EvalProblems)
	}
	if cfg.Rollout != nil && res.RolloutRegenerated > 0 {
		fmt.Fprintf(stdout, "rollout: %d generation chunks regenerated after lost rollout actors\n", res.RolloutRegenerated)
	}
	if res.TraceCalls > 0 {
		fmt.Fprintf(stdout, "data.traces: %d model calls (%d with recorded token ids, %d re-tokenized) in %d rows\n",
			res.TraceCalls, res.TraceCalls-res.TraceRetokenized, res.TraceRetokenized, res.TraceRows)
		for _, sp := range res.TraceSplits {
			fmt.Fprint(stdout, "data.traces: ")
			printSplit(stdout, sp)
		}
	}
	if res.TracesRefused > 0 {
		fmt.Fprintf(stdout, "data.traces: %d traces refused and left out (skip_refused); the first: %s\n", res.TracesRefused, res.FirstTraceRefused)
	}
	fmt.Fprintf(stdout, "done: %d steps\n", res.Steps)
	return 0
}

// resumeFlags are the flags of rlnode run that say where a run runs and
// what it records, which a resume must be given again: without them the
// command the hint prints would continue a cluster run in one process on
// this host (or on another cluster, with another key), or record traces
// the run did not.
var resumeFlags = []string{"address", "bind", "key-file", "detection", "owner-grace", "driver-only", "traces", "trace-sample"}

// resumeCommand is the command that continues the run in dir: its
// resolved recipe, --out, --resume, and those of resumeFlags that this
// command was given.
func resumeCommand(fs *flag.FlagSet, dir string) string {
	if os.Getenv(jobs.EnvJob) != "" {
		// A job's driver: the run goes on as a job (rlnode run --address
		// would run its driver in a terminal, with this node's key file).
		return shellJoin([]string{"rlnode", "submit", filepath.Join(dir, jobs.RecipeFile), "--resume", "--out", dir})
	}
	args := []string{"rlnode", "run", filepath.Join(dir, recipes.ResolvedFile), "--out", dir, "--resume"}
	given := map[string]*flag.Flag{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = f })
	for _, name := range resumeFlags {
		f, ok := given[name]
		if !ok {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			// "--driver-only true" would end the flags at "true"; a
			// set one reads as the user typed it.
			if f.Value.String() == "true" {
				args = append(args, "--"+name)
			} else {
				args = append(args, "--"+name+"="+f.Value.String())
			}
			continue
		}
		args = append(args, "--"+name, f.Value.String())
	}
	return shellJoin(args)
}

// printRecipeError prints a recipe load error: every problem as
// FILE:LINE: field: message.
func printRecipeError(w io.Writer, verb, recipe string, err error) {
	if errors.Is(err, recipes.ErrInvalid) {
		n := strings.Count(err.Error(), "\n") + 1
		if es := recipes.Errors(nil); errors.As(err, &es) {
			n = es.Count()
		}
		fmt.Fprintf(w, "%v\nrlnode %s: %s: %d error(s)\n", err, verb, recipe, n)
		return
	}
	fmt.Fprintf(w, "rlnode %s: %v\n", verb, err)
}

// progressBar prints one line per step: redrawn in place (\r) on a
// terminal, plain lines otherwise (logs, pipes). tok/s is the step's
// tokens over its generation and training time. The ETA is per phase:
// SFT warm-up steps are far faster than RL steps, so during the warm-up it
// is the time left to the end of the warm-up ("warm-up ETA"), and during
// RL the remaining RL steps at the rate of the RL steps seen so far.
type progressBar struct {
	mu     sync.Mutex // step and note come from the driver's goroutines
	w      io.Writer
	tty    bool
	warmup int // warm-up steps planned (they come first)
	total  int
	now    func() time.Time

	lastAt     time.Time // when the previous step ended (the bar's start at first)
	phase      string
	phaseStart time.Time // when the current phase's first step began
	phaseFirst int       // the step before the current phase's first seen step
	last       int
	eval       *float64 // the newest evaluation's accuracy
	evalStep   int      // the step it was measured at
	drawn      bool
}

func newProgressBar(w io.Writer, warmup, total int) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil {
			tty = st.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progressBar{w: w, tty: tty, warmup: warmup, total: total, now: time.Now, lastAt: time.Now()}
}

func (b *progressBar) step(m train.Metrics) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if m.Phase != b.phase || b.phase == "" {
		b.phase, b.phaseStart, b.phaseFirst = m.Phase, b.lastAt, m.Step-1
	}
	if m.Phase == "rl" && m.Step-1 < b.warmup {
		// The warm-up ended before its planned length (sft.until): RL's
		// steps follow it.
		b.total -= b.warmup - (m.Step - 1)
		b.warmup = m.Step - 1
	}
	b.lastAt = now
	b.last = m.Step
	if m.EvalAccuracy != nil {
		b.eval, b.evalStep = m.EvalAccuracy, m.Step
	}
	// The step counts warm-up and RL steps together: the phase's own count
	// follows.
	var sb strings.Builder
	fmt.Fprintf(&sb, "step %d/%d", m.Step, b.total)
	switch m.Phase {
	case "warmup":
		fmt.Fprintf(&sb, " (warm-up %d/%d)", m.Step, b.warmup)
	case "rl":
		fmt.Fprintf(&sb, " (RL %d/%d)", m.Step-b.warmup, b.total-b.warmup)
	default:
		fmt.Fprintf(&sb, " (%s)", m.Phase)
	}
	if m.RewardMean != nil {
		fmt.Fprintf(&sb, " reward %.3f", *m.RewardMean)
	} else {
		fmt.Fprintf(&sb, " loss %.4f", m.Loss)
	}
	if b.eval != nil {
		fmt.Fprintf(&sb, " eval %.3f", *b.eval)
		if b.evalStep != m.Step {
			fmt.Fprintf(&sb, " (at step %d)", b.evalStep) // the newest evaluation, not this step's
		}
	}
	if s := m.GenSeconds + m.TrainSeconds; s > 0 && m.Tokens > 0 {
		fmt.Fprintf(&sb, " %.0f tok/s", float64(m.Tokens)/s)
	}
	end, label := b.total, "ETA"
	if m.Phase == "warmup" {
		// No RL step yet to time the rest by.
		end, label = b.warmup, "warm-up ETA"
	}
	if done := m.Step - b.phaseFirst; done > 0 && m.Step < end {
		per := now.Sub(b.phaseStart) / time.Duration(done)
		fmt.Fprintf(&sb, " %s %s", label, (per * time.Duration(end-m.Step)).Round(time.Second))
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
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
	fmt.Fprintln(b.w, msg)
}

func (b *progressBar) done() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.w)
		b.drawn = false
	}
}

// runLogger shows the driver's log records (warnings, learners restarted,
// rollout actors lost or replaced, how a sharded learner's gradients
// travel) as lines above the progress bar; the per-step record is the
// bar's own.
func runLogger(bar *progressBar) *slog.Logger {
	h := slog.NewTextHandler(noteWriter{bar}, &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})
	return slog.New(skipSteps{h})
}

// noteWriter prints each record (one Write) as a note of the bar.
type noteWriter struct{ bar *progressBar }

func (w noteWriter) Write(p []byte) (int, error) {
	w.bar.note("rlnode run: " + strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// skipSteps drops the driver's per-step record.
type skipSteps struct{ slog.Handler }

func (h skipSteps) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn && r.Message == "step" {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h skipSteps) WithAttrs(as []slog.Attr) slog.Handler { return skipSteps{h.Handler.WithAttrs(as)} }
func (h skipSteps) WithGroup(name string) slog.Handler    { return skipSteps{h.Handler.WithGroup(name)} }

// noRoomNow says whether the run failed for want of room the cluster
// could give once others release it (cluster.ErrNoRoom, not room its own
// actors hold, cluster.ErrHeldBySelf, which frees only when it ends):
// placing what it needs, or replacing its rollout actors, all lost
// mid-run, whose last try rollout.ErrAllLost carries as text only.
func noRoomNow(err error) bool {
	if errors.Is(err, cluster.ErrNoRoom) {
		return !errors.Is(err, cluster.ErrHeldBySelf)
	}
	msg := err.Error()
	i := strings.LastIndex(msg, "the last try: ")
	return errors.Is(err, rollout.ErrAllLost) && i >= 0 && strings.Contains(msg[i:], cluster.ErrNoRoom.Error()) &&
		!strings.Contains(msg[i:], cluster.ErrHeldBySelf.Error())
}
