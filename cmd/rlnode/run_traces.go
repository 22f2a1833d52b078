package main

import (
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/rlnode/rlnode/recipes"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/traces"
)

// runTraceFlags are rlnode run's flags for recording its episodes as
// traces: on by default, in DIR/traces, beside (never inside) the
// checkpoints and metrics.
type runTraceFlags struct {
	store  *string
	sample *float64
}

func addRunTraceFlags(fs *flag.FlagSet) *runTraceFlags {
	return &runTraceFlags{
		store:  fs.String("traces", "", "trace store the run's episodes are recorded in (default DIR/traces; off: none)"),
		sample: fs.Float64("trace-sample", 1, "share of episodes recorded, in [0, 1] (picked by a hash of the run and episode ids)"),
	}
}

// fromRecipe takes what the recipe's trace section says where the flags
// of fs were not given: enabled false is --traces off, sample is
// --trace-sample.
func (f *runTraceFlags) fromRecipe(t *recipes.Trace, fs *flag.FlagSet) {
	if t == nil {
		return
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["traces"] && t.Enabled != nil && !*t.Enabled {
		*f.store = "off"
	}
	if !set["trace-sample"] && t.Sample != nil {
		*f.sample = *t.Sample
	}
}

func (f *runTraceFlags) check() error {
	if !(*f.sample >= 0 && *f.sample <= 1) {
		return fmt.Errorf("--trace-sample must be in [0, 1], got %v", *f.sample)
	}
	return nil
}

// traceWriterOptions are the run's trace writer's (tests shrink them).
var traceWriterOptions = traces.WriterOptions{FlushInterval: 2 * time.Second}

// open starts recording into the store and returns the train.Config
// Episodes callback and a close function printing where the traces are;
// with --traces off both do nothing.
func (f *runTraceFlags) open(runDir string, stdout, stderr io.Writer) (func(int, []data.Turn), func(), error) {
	store := *f.store
	if store == "off" || *f.sample == 0 {
		return nil, func() {}, nil
	}
	if store == "" {
		store = filepath.Join(runDir, "traces")
	}
	opt := traceWriterOptions
	opt.OnError = func(err error) { fmt.Fprintf(stderr, "rlnode run: traces: %v\n", err) }
	w, err := traces.OpenWriter(store, opt)
	if err != nil {
		return nil, nil, fmt.Errorf("--traces: %w", err)
	}
	run := filepath.Base(filepath.Clean(runDir))
	// Spans the writer refuses (it fell behind: a slow or full disk) are
	// dropped, not waited for, so the run goes on; the first drop is said
	// at once and the count at the end.
	var dropped, steps atomic.Int64
	record := func(step int, turns []data.Turn) {
		spans := traces.SpansFromTurns(run, step, turns, *f.sample, time.Now())
		if err := w.Add(spans...); err != nil {
			if dropped.Add(int64(len(spans))) == int64(len(spans)) {
				fmt.Fprintf(stderr, "rlnode run: traces: step %d's %d spans dropped, the run goes on: %v\n", step, len(spans), err)
			}
			steps.Add(1)
		}
	}
	closeStore := func() {
		if d := dropped.Load(); d > 0 {
			fmt.Fprintf(stderr, "rlnode run: traces: %d spans of %d steps were dropped (the store's writer fell behind); %s lacks them\n", d, steps.Load(), store)
		}
		if err := w.Close(); err != nil {
			fmt.Fprintf(stderr, "rlnode run: traces: %v\n", err)
			return
		}
		if n := w.Written(); n > 0 {
			fmt.Fprintf(stdout, "traces: %s (%d spans; rlnode traces list --store %s)\n", store, n, store)
		}
	}
	return record, closeStore, nil
}
