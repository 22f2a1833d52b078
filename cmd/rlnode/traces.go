package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rlnode/rlnode/internal/atomicfile"
	"github.com/rlnode/rlnode/internal/outpath"
	"github.com/rlnode/rlnode/learner/tokenizer"
	"github.com/rlnode/rlnode/rollout/data"
	"github.com/rlnode/rlnode/rollout/verify"
	"github.com/rlnode/rlnode/traces"
)

func init() { commands["traces"] = tracesCommand }

func tracesUsage(w io.Writer) {
	fmt.Fprint(w, `usage: rlnode traces SUBCOMMAND --store DIR [flags]

Reads a trace store (a run's RUN/traces, or one written by rlnode serve --traces):
  list      traces that pass the filters, one a line
  show      one trace as a tree of spans: rlnode traces show --store DIR TRACE_ID
  stats     calls, errors, tokens, latency percentiles and mean reward per agent, tool, model or source
  export    the filtered spans as JSONL, Parquet or OTLP JSON
  annotate  give a trace (or one span) a reward: --trace ID --reward NAME=VALUE --reason TEXT
  reward    score the filtered traces: --kind tool (execution success, exception, empty),
            --kind answer --verifier math|gsm8k (final answer against the rlnode.reference attribute),
            or --kind coordination (multi-agent rounds: rounds, consensus, answer quality, tokens)

Filters (list, stats, export, reward): --since, --until (RFC 3339 or a duration back from now),
--agent, --model, --run, --tool, --source, --trace (id prefix), --reward NAME with --min-reward, --max-reward.
`)
}

func tracesCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		tracesUsage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	sub, args := args[0], args[1:]
	fs := flag.NewFlagSet("rlnode traces "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", "", "trace store folder")
	f := traces.Any()
	var ff *filterFlags
	if sub != "annotate" {
		ff = addFilterFlags(fs, &f)
	}
	var run func() error
	var pos []string
	switch sub {
	case "list":
		asJSON := fs.Bool("json", false, "print JSONL spans instead of a table")
		limit := fs.Int("limit", 100, "print at most this many traces (the newest; 0: all)")
		run = func() error { return tracesList(*store, f, *asJSON, *limit, stdout, stderr) }
	case "show":
		run = func() error {
			if len(pos) != 1 {
				return usageError{fmt.Errorf("show takes one TRACE_ID (or a unique prefix of one)")}
			}
			f.TraceID = pos[0]
			return tracesShow(*store, f, stdout, stderr)
		}
	case "stats":
		by := fs.String("by", "agent", "group by agent, tool, model or source")
		run = func() error { return tracesStats(*store, f, *by, stdout, stderr) }
	case "export":
		format := fs.String("format", "jsonl", "jsonl, parquet, otlp-json, or trajectories (Arrow IPC rows the learner trains on: one per conversation of model calls, rewarded by --reward)")
		out := fs.String("out", "-", "file to write (-: standard output)")
		policy := fs.String("policy", "actor", "trajectories: the policy id of the rows")
		tokPath := fs.String("tokenizer", "", "trajectories: tokenizer.json (or a checkpoint folder holding one) to re-tokenize calls recorded without token ids; without it they are left out")
		skipRefused := fs.Bool("skip-refused", false, "trajectories: leave out (and list) traces whose calls cannot be aligned with their token ids, instead of failing")
		mergeCalls := fs.Bool("merge-calls", true, "trajectories: a call whose prompt extends the prompt and answer ids of one of its trace's latest 8 rows, token for token, joins that row; false: one row per call")
		run = func() error {
			if *out != "-" {
				// A symbolic link is written through, not replaced by the file.
				dest, err := outpath.File(*out)
				if err != nil {
					return fmt.Errorf("--out: %w", err)
				}
				*out = dest
			}
			if *format == "trajectories" {
				return tracesTrajectories(*store, f, *policy, *tokPath, *out, trajectoryFlags{*skipRefused, !*mergeCalls}, stdout, stderr)
			}
			return tracesExport(*store, f, *format, *out, stdout, stderr)
		}
	case "annotate":
		trace := fs.String("trace", "", "trace id, or a unique prefix of one")
		span := fs.String("span", "", "span id (default: the trace's root span)")
		reward := fs.String("reward", "", "NAME=VALUE, e.g. human=1")
		reason := fs.String("reason", "", "why")
		run = func() error { return tracesAnnotate(*store, *trace, *span, *reward, *reason, stdout, stderr) }
	case "reward":
		kind := fs.String("kind", "tool", "tool, answer or coordination")
		verifier := fs.String("verifier", "math", "answer rewards: math or gsm8k")
		tr := traces.DefaultToolRewards()
		fs.Float64Var(&tr.Success, "success", tr.Success, "tool reward of a call that returned a result")
		fs.Float64Var(&tr.Exception, "exception", tr.Exception, "tool reward of a call that failed")
		fs.Float64Var(&tr.Empty, "empty", tr.Empty, "tool reward of a call that returned nothing")
		cr := traces.DefaultCoordinationRewards()
		fs.Float64Var(&cr.RoundPenalty, "round-penalty", cr.RoundPenalty, "coordination reward per round after the first")
		fs.Float64Var(&cr.Consensus, "consensus", cr.Consensus, "coordination reward when the agents' last answers agree")
		fs.Float64Var(&cr.QualityWeight, "quality-weight", cr.QualityWeight, "coordination: weight of the trace's answer reward")
		fs.Float64Var(&cr.TokenPenalty, "token-penalty", cr.TokenPenalty, "coordination reward per 1,000 tokens")
		run = func() error { return tracesReward(*store, f, *kind, *verifier, tr, cr, stdout, stderr) }
	default:
		fmt.Fprintf(stderr, "rlnode traces: unknown subcommand %q\n", sub)
		tracesUsage(stderr)
		return 2
	}
	// Flags may come before or after show's TRACE_ID, as in every command.
	pos, err := parseInterleaved(fs, args)
	if err == nil && len(pos) > 0 && sub != "show" {
		err = usageError{fmt.Errorf("unexpected argument %q", pos[0])}
	}
	if err == nil && *store == "" {
		err = usageError{fmt.Errorf("--store is required (a trace store: a run's RUN/traces, or rlnode serve's --traces)")}
	}
	if err == nil && ff != nil {
		err = parseFilterTimes(&f, *ff.since, *ff.until, *ff.minR, *ff.maxR, time.Now())
	}
	if err == nil {
		err = run()
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "rlnode traces %s: %v\n", sub, err)
		return 2
	}
	fmt.Fprintf(stderr, "rlnode traces %s: %v\n", sub, err)
	return 1
}

// filterFlags are the flags of a traces.Filter that need parsing.
type filterFlags struct{ since, until, minR, maxR *string }

func addFilterFlags(fs *flag.FlagSet, f *traces.Filter) *filterFlags {
	fs.StringVar(&f.Agent, "agent", "", "traces with a span of this agent")
	fs.StringVar(&f.Model, "model", "", "traces with a call to this model")
	fs.StringVar(&f.Run, "run", "", "traces of this run")
	fs.StringVar(&f.Tool, "tool", "", "traces that call this tool")
	fs.StringVar(&f.Source, "source", "", "traces of this store partition")
	fs.StringVar(&f.TraceID, "trace", "", "traces whose id starts with this")
	fs.StringVar(&f.Reward, "reward", "", "the reward --min-reward and --max-reward bound, and list and stats show (default: the sum of all)")
	return &filterFlags{
		since: fs.String("since", "", "traces starting at or after this time (RFC 3339, or a duration such as 24h back from now)"),
		until: fs.String("until", "", "traces starting before this time (RFC 3339, or a duration back from now)"),
		minR:  fs.String("min-reward", "", "traces whose reward is at least this"),
		maxR:  fs.String("max-reward", "", "traces whose reward is at most this"),
	}
}

func parseFilterTimes(f *traces.Filter, since, until, minR, maxR string, now time.Time) error {
	at := func(flagName, v string) (time.Time, error) {
		if v == "" {
			return time.Time{}, nil
		}
		if d, err := time.ParseDuration(v); err == nil {
			return now.Add(-d), nil
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, usageError{fmt.Errorf("--%s %q: want RFC 3339 (2026-01-02T15:04:05Z) or a duration (24h)", flagName, v)}
		}
		return t, nil
	}
	var err error
	if f.Since, err = at("since", since); err != nil {
		return err
	}
	if f.Until, err = at("until", until); err != nil {
		return err
	}
	num := func(flagName, v string) (float64, error) {
		if v == "" {
			return math.NaN(), nil
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) {
			return 0, usageError{fmt.Errorf("--%s %q: want a number", flagName, v)}
		}
		return x, nil
	}
	if f.MinReward, err = num("min-reward", minR); err != nil {
		return err
	}
	f.MaxReward, err = num("max-reward", maxR)
	return err
}

func loadTraces(store string, f traces.Filter, stderr io.Writer) ([]traces.Trace, error) {
	ts, skipped, err := traces.Load(store, f)
	for _, s := range skipped {
		fmt.Fprintf(stderr, "rlnode traces: skipped %s\n", s)
	}
	return ts, err
}

func tracesList(store string, f traces.Filter, asJSON bool, limit int, stdout, stderr io.Writer) error {
	ts, err := loadTraces(store, f, stderr)
	if err != nil {
		return err
	}
	if limit > 0 && len(ts) > limit {
		// Said on stderr, so that a count of the lines is not taken for
		// the count of the traces.
		fmt.Fprintf(stderr, "rlnode traces list: the newest %d of the %d traces that pass the filters (--limit 0 lists all)\n", limit, len(ts))
		ts = ts[len(ts)-limit:]
	}
	if asJSON {
		return traces.WriteJSONL(stdout, ts)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRACE\tSTART\tSOURCE\tSPANS\tERRORS\tMODELS\tTOOLS\tREWARD")
	for _, t := range ts {
		models, tools := map[string]bool{}, map[string]bool{}
		var ms, tl []string
		errs := 0
		for _, s := range t.Spans {
			if s.RequestModel != "" && !models[s.RequestModel] {
				models[s.RequestModel] = true
				ms = append(ms, s.RequestModel)
			}
			if s.ToolName != "" && !tools[s.ToolName] {
				tools[s.ToolName] = true
				tl = append(tl, s.ToolName)
			}
			if s.Failed() {
				errs++
			}
		}
		reward := "-"
		if r, ok := t.Reward(f.Reward); ok {
			reward = strconv.FormatFloat(r, 'g', 4, 64)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", t.ID, t.Start().Format(time.RFC3339), t.Source(), len(t.Spans), errs,
			dash(strings.Join(ms, ",")), dash(strings.Join(tl, ",")), reward)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func tracesShow(store string, f traces.Filter, stdout, stderr io.Writer) error {
	ts, err := loadTraces(store, f, stderr)
	if err != nil {
		return err
	}
	switch len(ts) {
	case 0:
		return fmt.Errorf("no trace %s in %s", f.TraceID, store)
	case 1:
	default:
		return fmt.Errorf("%d traces start with %s; give more of the id", len(ts), f.TraceID)
	}
	t := &ts[0]
	fmt.Fprintf(stdout, "trace %s  source %s  %s  %d spans\n", t.ID, t.Source(), t.Start().Format(time.RFC3339Nano), len(t.Spans))
	children := map[string][]int{}
	ids := map[string]bool{}
	for i := range t.Spans {
		ids[t.Spans[i].SpanID.String()] = true
	}
	var roots []int
	for i, s := range t.Spans {
		if p := s.ParentID.String(); s.ParentID.IsValid() && ids[p] {
			children[p] = append(children[p], i)
		} else {
			roots = append(roots, i)
		}
	}
	var walk func(i int, indent string)
	walk = func(i int, indent string) {
		s := &t.Spans[i]
		fmt.Fprintf(stdout, "%s%s\n", indent, spanLine(s, t.Start()))
		for _, c := range children[s.SpanID.String()] {
			walk(c, indent+"  ")
		}
	}
	for _, r := range roots {
		walk(r, "  ")
	}
	return nil
}

// spanLine is one line of show's tree.
func spanLine(s *traces.Span, t0 time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q +%v %v", s.SpanID, s.Name, s.Start.Sub(t0).Round(time.Microsecond), s.Duration().Round(time.Microsecond))
	if s.Status != traces.StatusUnset {
		fmt.Fprintf(&b, " %s", s.Status)
	}
	if s.ErrorType != "" {
		fmt.Fprintf(&b, " error=%s", s.ErrorType)
	}
	if s.RequestModel != "" {
		fmt.Fprintf(&b, " model=%s", s.RequestModel)
	}
	if s.InputTokens >= 0 || s.OutputTokens >= 0 {
		fmt.Fprintf(&b, " tokens=%d/%d", max(s.InputTokens, 0), max(s.OutputTokens, 0))
	}
	if s.ToolName != "" {
		fmt.Fprintf(&b, " tool=%s", s.ToolName)
	}
	for _, r := range s.Rewards {
		fmt.Fprintf(&b, " reward.%s=%g", r.Name, r.Value)
		if r.Reason != "" {
			fmt.Fprintf(&b, " (%s)", r.Reason)
		}
	}
	if out := traces.MessagesText(s.OutputMessages); out != "" {
		fmt.Fprintf(&b, " → %q", clip(out, 80))
	}
	return b.String()
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func tracesStats(store string, f traces.Filter, by string, stdout, stderr io.Writer) error {
	ts, err := loadTraces(store, f, stderr)
	if err != nil {
		return err
	}
	rows, err := traces.Stats(ts, by, f.Reward)
	if err != nil {
		return usageError{err}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tSPANS\tERRORS\tIN_TOKENS\tOUT_TOKENS\tP50\tP90\tP99\tREWARD_MEAN\n", strings.ToUpper(by))
	for _, r := range rows {
		mean := "-"
		if r.Rewards > 0 {
			mean = fmt.Sprintf("%.4g (%d)", r.RewardMean, r.Rewards)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%v\t%v\t%s\n", r.Key, r.Calls, r.Errors, r.InputTokens, r.OutputTokens,
			r.P50.Round(time.Microsecond), r.P90.Round(time.Microsecond), r.P99.Round(time.Microsecond), mean)
	}
	return tw.Flush()
}

func tracesExport(store string, f traces.Filter, format, out string, stdout, stderr io.Writer) error {
	write := map[string]func(io.Writer, []traces.Trace) error{
		"jsonl": traces.WriteJSONL, "parquet": traces.WriteParquet, "otlp-json": traces.WriteOTLPJSON,
	}[format]
	if write == nil {
		return usageError{fmt.Errorf("--format %q: want jsonl, parquet, otlp-json or trajectories", format)}
	}
	ts, err := loadTraces(store, f, stderr)
	if err != nil {
		return err
	}
	if out == "-" {
		return write(stdout, ts)
	}
	// Atomically: a failed export leaves the previous file whole.
	if err := atomicfile.Write(out, 0o644, func(w io.Writer) error { return write(w, ts) }); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(stderr, "exported %d traces to %s\n", len(ts), out)
	return nil
}

func tracesAnnotate(store, trace, span, reward, reason string, stdout, stderr io.Writer) error {
	name, val, ok := strings.Cut(reward, "=")
	v, err := strconv.ParseFloat(val, 64)
	if !ok || name == "" || err != nil {
		return usageError{fmt.Errorf("--reward %q: want NAME=VALUE, e.g. human=1", reward)}
	}
	if trace == "" {
		return usageError{fmt.Errorf("--trace is required")}
	}
	// The trace (and span) must be in the store: an annotation of an id
	// no trace has would be written and never reach one.
	f := traces.Any()
	f.TraceID = trace
	ts, err := loadTraces(store, f, stderr)
	if err != nil {
		return err
	}
	switch len(ts) {
	case 0:
		return fmt.Errorf("no trace %s in %s", trace, store)
	case 1:
		trace = ts[0].ID.String()
	default:
		return fmt.Errorf("%d traces start with %s; give more of the id", len(ts), trace)
	}
	if span != "" && !slices.ContainsFunc(ts[0].Spans, func(s traces.Span) bool { return s.SpanID.String() == span }) {
		return fmt.Errorf("trace %s has no span %s", trace, span)
	}
	if err := traces.Annotate(store, traces.Annotation{TraceID: trace, SpanID: span, By: "rlnode traces annotate",
		Reward: traces.Reward{Name: name, Value: v, Reason: reason}}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "annotated trace %s: %s = %g\n", trace, name, v)
	return nil
}

func tracesReward(store string, f traces.Filter, kind, verifierName string, tr traces.ToolRewards, cr traces.CoordinationRewards, stdout, stderr io.Writer) error {
	ts, err := loadTraces(store, f, stderr)
	if err != nil {
		return err
	}
	var as []traces.Annotation
	switch kind {
	case "tool":
		as = traces.ToolAnnotations(ts, tr)
	case "answer":
		var v verify.Verifier
		switch verifierName {
		case "math":
			v = verify.Math{}
		case "gsm8k":
			v = verify.GSM8K{}
		default:
			return usageError{fmt.Errorf("--verifier %q: want math or gsm8k", verifierName)}
		}
		for i := range ts {
			if a, ok := traces.AnswerReward(context.Background(), &ts[i], v); ok {
				as = append(as, a)
			}
		}
	case "coordination":
		for i := range ts {
			if a, ok := cr.Score(&ts[i]); ok {
				as = append(as, a)
			}
		}
	default:
		return usageError{fmt.Errorf("--kind %q: want tool, answer or coordination", kind)}
	}
	for i := range as {
		as[i].By = "rlnode traces reward --kind " + kind
	}
	if len(as) > 0 {
		if err := traces.Annotate(store, as...); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%d %s rewards on %d traces\n", len(as), kind, len(ts))
	return nil
}

// trajectoryFlags are export --format trajectories' switches.
type trajectoryFlags struct{ skipRefused, perCall bool }

func tracesTrajectories(store string, f traces.Filter, policy, tokPath, out string, fl trajectoryFlags, stdout, stderr io.Writer) error {
	opt := traces.TrajectoryOptions{Policy: policy, Reward: f.Reward, Model: f.Model, SkipRefused: fl.skipRefused, PerCall: fl.perCall}
	if tokPath != "" {
		if st, err := os.Stat(tokPath); err == nil && st.IsDir() {
			tokPath = filepath.Join(tokPath, "tokenizer.json")
		}
		tok, err := tokenizer.Load(tokPath)
		if err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
		opt.Tokenizer = tok
	}
	ts, err := loadTraces(store, f, stderr)
	if err != nil {
		return err
	}
	built, err := traces.Build(ts, opt)
	if err != nil {
		var ae *traces.AlignmentError
		if errors.As(err, &ae) && ae.Models != nil {
			return fmt.Errorf("%w (name it with --model, or leave such traces out with --skip-refused)", err)
		}
		if ae != nil {
			return fmt.Errorf("%w (leave such traces out with --skip-refused)", err)
		}
		return err
	}
	turns := built.Turns
	printDropped(stderr, built.Dropped)
	printSplits(stderr, built.Splits)
	if len(turns) == 0 {
		return fmt.Errorf("no trajectory rows from the %d traces that pass the filters, nothing written to %s", len(ts), out)
	}
	if out == "-" {
		return data.WriteTrajectories(stdout, turns, 0)
	}
	if err := data.WriteTrajectoryFile(out, turns); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "exported %d trajectory rows (%d model calls) of %d traces to %s\n", len(turns), built.Calls, len(ts), out)
	return nil
}

// printSplits says which calls started a row of their own although calls
// of their trace came before them: one line per reason with its count
// and the first one, as printDropped does.
func printSplits(w io.Writer, splits []traces.Split) {
	for _, sp := range traces.SummarizeSplits(splits) {
		printSplit(w, sp)
	}
}

// printSplit is the line the export and the run print for one reason.
func printSplit(w io.Writer, sp traces.SplitSummary) {
	fmt.Fprintf(w, "%d calls start a row of their own: %s (the first: %s)\n", sp.Calls, sp.Reason, sp.First)
}

// printDropped says which traces and calls became no trajectory row: one
// line per reason with its count and the first few, so a store of
// thousands of traces that all lack the reward asked for gives one line,
// not thousands.
func printDropped(w io.Writer, dropped []traces.Dropped) {
	const shown = 3
	var reasons []string
	byWhy := map[string][]traces.Dropped{}
	for _, d := range dropped {
		if byWhy[d.Why] == nil {
			reasons = append(reasons, d.Why)
		}
		byWhy[d.Why] = append(byWhy[d.Why], d)
	}
	for _, why := range reasons {
		ds := byWhy[why]
		var names []string
		for _, d := range ds[:min(len(ds), shown)] {
			name := "trace " + d.Trace
			if d.Span != "" {
				name += " span " + d.Span
			}
			names = append(names, name)
		}
		more := ""
		if len(ds) > shown {
			more = fmt.Sprintf(", and %d more", len(ds)-shown)
		}
		fmt.Fprintf(w, "rlnode traces: left out %d: %s (%s%s)\n", len(ds), why, strings.Join(names, ", "), more)
	}
}
